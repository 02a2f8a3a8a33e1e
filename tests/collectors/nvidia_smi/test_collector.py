from __future__ import annotations

import math
import stat
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from collectors.base import Collector
from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch
from collectors.nvidia_smi import DEFAULT_QUERY_FIELDS, NvidiaSmiCollector, RunResult
from tests.collectors.nvidia_smi.fixtures import XML_DIR, need

A100_XML = XML_DIR / "telegraf-a100-sxm4-v12.xml"
# The default fields: index, five gauges, three throttle flags, bus id, PCIe gen and width, and
# the identity (name, uuid, serial, vbios_version, driver_version; the A100 capture's own).
LINK = ", 00000000:01:00.0, 4, 4, 16, 16"
A100_ID = (", NVIDIA A100-SXM4-80GB, GPU-513536b6-7d19-9063-b049-1e69664bb298, 1650522003820, "
           "92.00.36.00.02, 535.54.03")
CSV = f"0, 30, 45, 80.50, 1410, 12, Not Active, Active, Not Active{LINK}{A100_ID}\n"


class FakeClock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeRunner:
    """Answers `-q -x` with an XML text and `--query-gpu` with a CSV text, recording calls."""

    def __init__(self, xml: str, csv: str = CSV) -> None:
        self.xml, self.csv = xml, csv
        self.calls: list[tuple[str, ...]] = []
        self.fail: RunResult | Exception | None = None

    def __call__(self, argv: Sequence[str], timeout: float) -> RunResult:
        self.calls.append(tuple(argv))
        if isinstance(self.fail, Exception):
            raise self.fail
        if self.fail is not None:
            return self.fail
        return 0, self.xml if "-x" in argv else self.csv, ""


def _cell(batch: Batch, metric: str) -> float:
    frame = batch.frames[Scope.GPU]
    return float(frame.values[0, CATALOG.column(Scope.GPU, metric)])


@pytest.fixture
def xml() -> str:
    return need(A100_XML).read_text()


def test_is_a_collector(xml: str) -> None:
    assert isinstance(NvidiaSmiCollector(host="n1", runner=FakeRunner(xml)), Collector)


def test_merges_fast_csv_and_slow_xml(xml: str) -> None:
    runner, clock = FakeRunner(xml), FakeClock()
    c = NvidiaSmiCollector(host="n1", runner=runner, clock=clock, xml_interval=60)
    batch = c.collect()
    assert c.status.up and c.status.reason == ""
    assert batch.rejected == []
    frame = batch.frames[Scope.GPU]
    assert len(frame) == 1 and frame.ts[0] == clock.t
    assert _cell(batch, "gpu_temp") == 30.0  # the CSV wins over the XML's 27
    assert _cell(batch, "throttle_power") == 1.0
    assert _cell(batch, "gpu_shutdown_temp") == 92.0  # only in the XML
    assert _cell(batch, "ecc_sbe_aggregate") == 0.0
    assert math.isnan(_cell(batch, "remapped_rows_pending"))  # N/A: missing, not zero
    assert runner.calls[0] == ("nvidia-smi", "-q", "-x")
    assert runner.calls[1] == ("nvidia-smi", f"--query-gpu={','.join(DEFAULT_QUERY_FIELDS)}",
                               "--format=csv,noheader,nounits")


def test_xml_only_every_interval_and_one_entity_table(xml: str) -> None:
    runner, clock = FakeRunner(xml), FakeClock()
    c = NvidiaSmiCollector(host="n1", runner=runner, clock=clock, xml_interval=60)
    first = c.collect()
    clock.t += 5
    second = c.collect()
    assert math.isnan(_cell(second, "gpu_shutdown_temp"))  # no XML this tick
    assert _cell(second, "gpu_temp") == 30.0
    clock.t += 55
    third = c.collect()
    assert _cell(third, "gpu_shutdown_temp") == 92.0
    assert sum("-x" in call for call in runner.calls) == 2
    tables = {id(b.frames[Scope.GPU].entities) for b in (first, second, third)}
    assert len(tables) == 1


@pytest.mark.parametrize(("fail", "reason"), [
    ((9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
     "exited with status 9: NVIDIA-SMI has failed"),
    (TimeoutError("nvidia-smi did not finish within 5 s; killed"), "did not finish within 5 s"),
    (FileNotFoundError(2, "No such file or directory"), "cannot run nvidia-smi"),
    ((0, "garbage", ""), "XML does not parse"),
])
def test_failures_are_data(xml: str, fail: RunResult | Exception, reason: str) -> None:
    runner = FakeRunner(xml)
    c = NvidiaSmiCollector(host="n1", runner=runner, clock=FakeClock())
    runner.fail = fail
    batch = c.collect()
    assert not c.status.up and reason in c.status.reason
    assert batch.frames == {} and batch.samples == 0
    runner.fail = None
    assert c.collect().samples > 0 and c.status.up  # recovers on the next good tick


def test_failed_xml_is_retried_next_tick(xml: str) -> None:
    runner, clock = FakeRunner("<broken"), FakeClock()
    c = NvidiaSmiCollector(host="n1", runner=runner, clock=clock)
    c.collect()
    assert not c.status.up
    runner.xml = xml
    clock.t += 5
    assert _cell(c.collect(), "gpu_shutdown_temp") == 92.0


def test_bad_csv_is_down(xml: str) -> None:
    c = NvidiaSmiCollector(host="n1", runner=FakeRunner(xml, csv="0, 1\n"), clock=FakeClock())
    assert c.collect().samples == 0
    assert f"cells for {len(DEFAULT_QUERY_FIELDS)} fields" in c.status.reason


# ---- the real subprocess path, with fake nvidia-smi executables -------------------------------

def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_real_process_prints_a_captured_xml(tmp_path: Path) -> None:
    xml_path = need(A100_XML).resolve()  # read where it lies, never copied into the repo
    binary = _script(tmp_path, f'case "$1" in\n  -q) cat "{xml_path}" ;;\n'
                               f'  *) printf "{CSV}" ;;\nesac\n')
    c = NvidiaSmiCollector(binary=binary, host="n1")
    batch = c.collect()
    assert c.status.up, c.status.reason
    assert _cell(batch, "power_draw") == 80.5
    assert _cell(batch, "mem_max_temp") == 95.0


def test_real_process_hanging_is_killed(tmp_path: Path) -> None:
    # The sleeping child holds stdout open: only killing the process group ends the read.
    binary = _script(tmp_path, "sleep 1000 &\nwait\n")
    c = NvidiaSmiCollector(binary=binary, host="n1", timeout=1.0)
    start = time.monotonic()
    batch = c.collect()
    assert time.monotonic() - start < 4.0
    assert not c.status.up and "did not finish within 1 s" in c.status.reason
    assert batch.samples == 0


def test_real_process_garbage(tmp_path: Path) -> None:
    c = NvidiaSmiCollector(binary=_script(tmp_path, "echo 'Segmentation fault?'\n"), host="n1")
    assert c.collect().samples == 0
    assert not c.status.up and "does not parse" in c.status.reason


def test_real_process_non_zero_exit(tmp_path: Path) -> None:
    binary = _script(tmp_path, "echo 'No devices were found' >&2\nexit 6\n")
    c = NvidiaSmiCollector(binary=binary, host="n1")
    assert c.collect().samples == 0
    assert not c.status.up
    assert "exited with status 6: No devices were found" in c.status.reason


def test_missing_binary(tmp_path: Path) -> None:
    c = NvidiaSmiCollector(binary=str(tmp_path / "absent"), host="n1")
    assert c.collect().samples == 0
    assert not c.status.up and "cannot run" in c.status.reason


def test_bad_configuration_raises() -> None:
    with pytest.raises(ValueError):
        NvidiaSmiCollector(timeout=0)


def test_a_reading_too_large_for_a_float_is_a_rejection_not_a_crash() -> None:
    from collectors.schema import batch_to_lines

    runner = FakeRunner(need(A100_XML).read_text(), CSV.replace("80.50", "9" * 400))
    c = NvidiaSmiCollector(host="n1", runner=runner, clock=FakeClock())
    batch = c.collect()
    assert c.status.up
    # The CSV's power is refused; the XML read in the same round still gives one.
    assert _cell(batch, "power_draw") == 67.03 and _cell(batch, "gpu_temp") == 30.0
    [r] = batch.rejected
    assert (r.entity, r.metric) == ("n1:gpu0", "power_draw") and "out of range" in r.reason
    assert all("=inf" not in line for line in batch_to_lines(batch))
