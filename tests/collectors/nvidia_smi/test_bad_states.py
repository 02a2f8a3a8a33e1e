"""GPUs in a bad state are signals, not crashes (issue 31): what nvidia-smi prints for a GPU it
cannot read becomes that GPU's `gpu_unreadable` (collectors.nvidia_smi.states), the other GPUs
keep their readings, and the agent keeps running. Spellings are NVML's error strings as
nvidia-smi prints them and the man page's "ERR!" / "No devices were found"."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch
from collectors.nvidia_smi import NvidiaSmiCollector, RunResult, parse_text, parse_xml
from collectors.nvidia_smi.bus_ids import read_bus_map
from collectors.nvidia_smi.csvparse import parse_query_csv_with_header
from service.commands.cli import main
from tests.collectors.nvidia_smi.fixtures import TEXT_DIR, need, readings
from tests.collectors.own_captures import (
    SMI_BAD_CSV,
    SMI_ERR_TABLE,
    SMI_NO_DEVICES,
    SMI_TEXT,
    SMI_XML,
    read,
)

TS = 1_700_000_000_000_000_000


# ---- the agent crash: "[Unknown Error]" as a bus id ----------------------------------------------

def test_agent_starts_when_a_bus_id_reads_unknown_error(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """It exited with a traceback: the kernel-log source's GPU bus map refused the row."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho '0, 00000000:07:00.0'\necho '1, [Unknown Error]'\nexit 15\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "kern.log"
    log.write_text("")
    env_path = os.environ["PATH"]
    os.environ["PATH"] = f"{fake.parent}{os.pathsep}{env_path}"
    try:
        from collectors import registry

        built = registry.get("kernel-log").build("n1", {"path": str(log)})
        assert len(built.collect().events) == 0 and built.status.up  # no Xid; counters at 0
        rc = main(["agent", "--once", "--stdout", "--source", "kernel-log", "--host", "n1",
                   "--spool", str(tmp_path / "spool")])
    finally:
        os.environ["PATH"] = env_path
    assert rc in (0, 1)  # 1 only where this machine has neither /dev/kmsg nor journalctl
    assert "collector=kernel_log" in capsys.readouterr().out


def test_bus_map_keeps_the_gpus_that_read() -> None:
    out = "0, 00000000:07:00.0\n1, [Unknown Error]\n[Unknown Error], 00000000:0A:00.0\n" \
          "Unable to determine the device handle for GPU 00000000:0B:00.0: Unknown Error\n" \
          "4, 00000000:0C:00.0\n"
    assert read_bus_map(out) == {"00000000:07:00.0": 0, "00000000:0C:00.0": 4}


# ---- parsers -------------------------------------------------------------------------------------

def _by_gpu(points: Sequence[object]) -> dict[str, dict[str, object]]:
    return {p.tags["gpu"]: p.fields for p in points}  # type: ignore[attr-defined]


def test_query_csv_capture_of_bad_states() -> None:
    gpus = _by_gpu(readings(parse_query_csv_with_header(read(SMI_BAD_CSV), "n1", TS)))
    assert {g: f["gpu_unreadable"] for g, f in gpus.items()} == {
        "0": 0, "1": 1, "2": 2, "4": 0, "5": 1}  # GPU 3 has a handle-error line, no row
    assert gpus["1"] == {"gpu_unreadable": 1}  # nothing else read
    assert gpus["4"]["pcie_link_width"] == 8 and gpus["4"]["pcie_link_width_max"] == 16
    assert gpus["5"]["gpu_temp"] == 39 and gpus["5"]["pcie_link_gen"] == 1


@pytest.mark.parametrize(("value", "state"), [
    ("[Unknown Error]", 1), ("Unknown Error", 1), ("ERR!", 1), ("[GPU requires reset]", 2),
    ("[GPU is lost]", 3), ("45", 0), ("[N/A]", 0), ("[Not Supported]", 0)])
def test_query_csv_cell_states(value: str, state: int) -> None:
    text = f"index, temperature.gpu, power.draw\n0, {value}, 55.0\n"
    [p] = readings(parse_query_csv_with_header(text, "n1", TS))
    assert p.fields["gpu_unreadable"] == state


def test_unknown_error_outside_the_core_readings_is_not_the_gpus() -> None:
    text = "index, temperature.gpu, addressing_mode, fan.speed\n0, 45, Unknown Error, ERR!\n"
    [p] = readings(parse_query_csv_with_header(text, "n1", TS))
    assert p.fields["gpu_unreadable"] == 0
    # A healthy RTX 4090 prints "Addressing Mode : Unknown Error" (a real capture).
    text = need(TEXT_DIR / "gpud-nvidia-smi-query.535.154.05.out.3.valid").read_text()
    assert "Unknown Error" in text
    assert [p.fields["gpu_unreadable"] for p in readings(parse_text(text, "n1", TS))] == [0] * 8


def test_default_table_capture_with_err() -> None:
    gpus = _by_gpu(readings(parse_text(read(SMI_ERR_TABLE), "n1", TS)))
    assert gpus == {"0": {"gpu_unreadable": 0}, "1": {"gpu_unreadable": 1},
                    "2": {"gpu_unreadable": 2}}  # the process table is not read


@pytest.mark.parametrize(("old", "new", "state"), [
    ("<gpu_temp>79 C</gpu_temp>", "<gpu_temp>Unknown Error</gpu_temp>", 1),
    ("<gpu_temp>79 C</gpu_temp>", "<gpu_temp>[GPU requires reset]</gpu_temp>", 2),
    ('<gpu id="00000000:5D:00.0">', '<gpu id="[GPU is lost]">', 3),
])
def test_xml_gpu_in_a_bad_state(old: str, new: str, state: int) -> None:
    text = read(SMI_XML)
    assert text.count(old) == 1
    first, second = readings(parse_xml(text.replace(old, new), "n1", TS))
    assert first.fields["gpu_unreadable"] == 0 and first.fields["gpu_temp"] == 52
    assert second.fields["gpu_unreadable"] == state


def test_text_gpu_in_a_bad_state() -> None:
    text = read(SMI_TEXT).replace("GPU Current Temp                  : 83 C",
                                  "GPU Current Temp                  : Unknown Error")
    text = text.replace("GPU 00000000:1B:00.0", "GPU [Unknown Error]")
    first, second = readings(parse_text(text, "n1", TS))
    assert first.fields["gpu_unreadable"] == 1 and first.fields["gpu_temp"] == 47
    assert second.fields["gpu_unreadable"] == 1 and "gpu_temp" not in second.fields


# ---- the collector -----------------------------------------------------------------------------

FIELDS = ("index", "temperature.gpu", "pci.bus_id", "pcie.link.width.current",
          "pcie.link.width.max")
GOOD = ("0, 41, 00000000:18:00.0, 16, 16\n1, 42, 00000000:2A:00.0, 16, 16\n"
        "2, 43, 00000000:3A:00.0, 16, 16\n")


class Runner:
    """Answers every call with the next of `answers` (the last one repeats)."""

    def __init__(self, *answers: RunResult | Exception) -> None:
        self.answers = list(answers)

    def __call__(self, argv: Sequence[str], timeout: float) -> RunResult:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def _collector(*answers: RunResult | Exception) -> NvidiaSmiCollector:
    # The first collect reads the XML (the first answer), then the CSV; later ones the CSV only.
    return NvidiaSmiCollector(host="n1", runner=Runner(*answers), query_fields=FIELDS,
                              xml_interval=1e9, clock=lambda: 1.7e9)


def _states(batch: Batch) -> dict[int, dict[str, float]]:
    frame = batch.frames[Scope.GPU]
    names = [m.name for m in CATALOG.columns(Scope.GPU)]
    out = {}
    for slot, row in zip(frame.rows.tolist(), frame.values.tolist(), strict=True):
        out[int(frame.entities[slot].unit)] = {
            n: v for n, v in zip(names, row, strict=True) if v == v}
    return out


XML_OK = (0, read(SMI_XML), "")


def test_collector_reports_each_bad_gpu_and_reads_the_others() -> None:
    handle = ("0, 41, 00000000:18:00.0, 16, 16\n"
              "Unable to determine the device handle for GPU 00000000:2A:00.0: Unknown Error\n")
    c = _collector(XML_OK, (0, GOOD, ""), (15, handle, ""), (6, "", "No devices were found"),
                   TimeoutError("nvidia-smi did not finish within 5 s; killed"), (0, GOOD, ""))
    assert {g: s["gpu_unreadable"] for g, s in _states(c.collect()).items()} == \
        {0: 0, 1: 0, 2: 0}
    got = _states(c.collect())  # GPU 1 has no handle, GPU 2 is not listed at all
    assert got[0]["gpu_temp"] == 41 and got[0]["gpu_unreadable"] == 0
    assert got[1] == {"gpu_unreadable": 1} and got[2] == {"gpu_unreadable": 5}
    assert c.status.up and "unreadable GPU 1 (state 1), 2 (state 5)" in c.status.reason
    got = _states(c.collect())  # "No devices were found": every GPU listed before
    assert got == {i: {"gpu_unreadable": 5} for i in range(3)}
    got = _states(c.collect())  # nvidia-smi hung: every GPU, and the source is down
    assert got == {i: {"gpu_unreadable": 4} for i in range(3)}
    assert not c.status.up and "did not finish" in c.status.reason
    got = _states(c.collect())  # back
    assert {g: s["gpu_unreadable"] for g, s in got.items()} == {0: 0, 1: 0, 2: 0}
    assert c.status.up and c.status.reason == ""


def test_no_devices_on_a_node_never_read_is_down_not_a_state() -> None:
    c = _collector(XML_OK, (6, read(SMI_NO_DEVICES), ""))
    assert c.collect().samples == 0
    assert not c.status.up and "lists no GPU" in c.status.reason


def test_a_handle_error_for_a_bus_id_never_listed_is_named() -> None:
    c = _collector(XML_OK, (15, "0, 41, 00000000:18:00.0, 16, 16\nUnable to determine the "
                                "device handle for GPU 00000000:99:00.0: GPU is lost\n", ""))
    got = _states(c.collect())
    assert got[0]["gpu_unreadable"] == 0 and got[0]["gpu_temp"] == 41
    assert c.status.up and "PCI 0000:99:00 (never listed)" in c.status.reason
