from __future__ import annotations

from pathlib import Path

import pytest

from collectors.catalog import Scope
from collectors.lineprotocol import Point
from collectors.nvidia_smi import parse_text
from collectors.schema import SchemaMapper
from tests.collectors.nvidia_smi.fixtures import (
    TEXT_DIR,
    bundle_sections,
    files,
    is_bundle,
    is_query_text,
    is_wrapper,
    need,
    readings,
    wrapper_string,
)

TS = 1_700_000_000_000_000_000


def _check(points: list[Point]) -> None:
    assert points
    for i, p in enumerate(points):
        assert (p.measurement, p.tags, p.ts_ns) == ("gpu", {"host": "n1", "gpu": str(i)}, TS)
    assert SchemaMapper().to_batch(points).rejected == []


def _by_gpu(text: str) -> list[dict[str, float | int | bool | str]]:
    return [dict(p.fields) for p in readings(parse_text(text, "n1", TS))]


@pytest.mark.parametrize("path", files(TEXT_DIR, is_query_text))
def test_every_query_capture(path: Path) -> None:
    _check(readings(parse_text(path.read_text(), "n1", TS)))


@pytest.mark.parametrize("path", files(TEXT_DIR, is_wrapper))
def test_every_wrapper_capture(path: Path) -> None:
    points = readings(parse_text(wrapper_string(path, "out_a"), "n1", TS))
    _check(points)
    assert all({"gpu_temp", "sm_clock", "gpu_util"} <= p.fields.keys() for p in points)


@pytest.mark.parametrize("path", files(TEXT_DIR, is_bundle))
def test_every_bundle_query_section(path: Path) -> None:
    sections = [body for cmd, body in bundle_sections(path) if cmd == "nvidia-smi -q"]
    assert len(sections) == 2  # idle and under load
    for body in sections:
        _check(readings(parse_text(body, "n1", TS)))


def test_a10_pending_row_remap() -> None:
    [f] = _by_gpu(need(TEXT_DIR / "gpud-nvidia-smi-query.535.129.03.out.0.valid.a10").read_text())
    assert f["remapped_rows_uncorrectable"] == 4.0
    assert f["remapped_rows_correctable"] == 0.0
    assert f["remapped_rows_pending"] == 1.0
    assert f["remapped_rows_failure"] == 0.0
    assert (f["gpu_temp"], f["power_draw"], f["sm_clock"]) == (33.0, 43.89, 225.0)
    assert (f["gpu_shutdown_temp"], f["gpu_slowdown_temp"]) == (101.0, 98.0)
    assert "mem_temp" not in f and "gpu_temp_margin" not in f  # N/A on an A10
    assert "retired_pages_sbe" not in f  # N/A


def test_a100x4_wrapper_ecc_and_pending_remap() -> None:
    gpus = _by_gpu(wrapper_string(need(TEXT_DIR / "thamada-gls-A100SXMx4_smi.py"), "out_a"))
    assert len(gpus) == 4
    g1 = gpus[1]  # GPU 00000000:9E:00.0
    assert g1["ecc_sbe_volatile"] == 353.0 and g1["ecc_sbe_aggregate"] == 353.0
    assert g1["remapped_rows_correctable"] == 1.0
    assert g1["remapped_rows_pending"] == 1.0
    assert gpus[2]["remapped_rows_correctable"] == 1.0
    assert gpus[2]["remapped_rows_pending"] == 0.0
    assert gpus[0]["ecc_sbe_volatile"] == 0.0
    assert (gpus[0]["gpu_temp"], gpus[0]["mem_temp"], gpus[0]["power_draw"]) == (25, 43, 59.77)


def test_edited_page_retirement_capture() -> None:
    text = need(TEXT_DIR / "azurehpc-bad_nvsmi8_output-page-retirement-EDITED.txt").read_text()
    gpus = _by_gpu(text)  # starts with a blank line; -q -d PAGE_RETIREMENT only
    assert len(gpus) == 8
    got = [(g["retired_pages_sbe"], g["retired_pages_dbe"], g["retired_pages_pending"])
           for g in gpus]
    assert got == [(60, 5, 0), (2, 61, 1), (0, 0, 0), (6, 0, 1),
                   (0, 0, 0), (20, 45, 1), (0, 0, 0), (8, 56, 1)]
    assert all(set(g) == {"retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"}
               for g in gpus)


def test_original_page_retirement_capture_is_all_zero() -> None:
    text = need(TEXT_DIR / "azurehpc-orig_nvsmi8_output-page-retirement.txt").read_text()
    assert _by_gpu(text) == [{"retired_pages_sbe": 0.0, "retired_pages_dbe": 0.0,
                              "retired_pages_pending": 0.0}] * 8


def test_h100_bundle_under_load() -> None:
    path = need(TEXT_DIR / "nvidia_gpu_exporter-capture-linux-x86_64__nvidia-h100-80gb-hbm3"
                           "__590.48.01.txt")
    idle, load = (body for cmd, body in bundle_sections(path) if cmd == "nvidia-smi -q")
    [f] = _by_gpu(load)
    assert (f["gpu_temp"], f["mem_temp"], f["gpu_temp_margin"]) == (59.0, 55.0, 26.0)
    assert f["power_draw"] == 588.39  # "Instantaneous Power Draw" (590 drivers)
    assert f["pcie_replay"] == 9.0
    assert f["gpu_util"] == 100.0
    # "GPU Shutdown T.Limit Temp : -8 C" is relative to T.Limit, not an absolute threshold.
    assert "gpu_shutdown_temp" not in f
    assert _by_gpu(idle)[0]["gpu_temp"] == 41.0


def test_old_driver_ecc_layout_na() -> None:
    [f] = _by_gpu(wrapper_string(need(TEXT_DIR / "thamada-gls-GTX1050Ti_smi.py"), "out_a"))
    assert not any(k.startswith("ecc_") for k in f)  # Single Bit > Device Memory : N/A
    assert (f["gpu_temp"], f["sm_clock"]) == (31.0, 1290.0)


def test_old_single_bit_layout_and_throttle_reasons() -> None:
    text = """
==============NVSMI LOG==============

GPU 00000000:04:00.0
    Clocks Throttle Reasons
        SW Power Cap                : Active
        HW Slowdown                 : Active
            HW Thermal Slowdown     : Active
    ECC Errors
        Volatile
            Single Bit
                Device Memory       : 7
                Total               : 9
            Double Bit
                Device Memory       : 1
        Aggregate
            Single Bit
                Device Memory       : 70
    Retired Pages
        Single Bit ECC              : 2
        Double Bit ECC              : 1
        Pending                     : Yes
    Remapped Rows                   : N/A
"""
    [f] = _by_gpu(text)
    assert f == {"throttle_power": 1.0, "throttle_hw_slowdown": 1.0, "throttle_thermal": 1.0,
                 "ecc_sbe_volatile": 7.0, "ecc_dbe_volatile": 1.0, "ecc_sbe_aggregate": 70.0,
                 "retired_pages_sbe": 2.0, "retired_pages_dbe": 1.0,
                 "retired_pages_pending": 1.0}


def test_truncated_capture_keeps_what_is_there() -> None:
    # Upstream's "invalid" case: cut off inside the first of 8 GPUs.
    text = need(TEXT_DIR / "gpud-nvidia-smi-query.535.183.01.out.0.invalid").read_text()
    assert len(_by_gpu(text)) == 1


@pytest.mark.parametrize(("name", "unreadable"), [
    ("gpud-nvidia-smi.550.90.07.out.0.valid", [0] * 8),
    ("gpud-nvidia-smi.525.125.06.out.0.valid", [1]),  # "|ERR!   38C ..." under GPU 0
])
def test_default_table_gives_only_which_gpu_printed_err(name: str, unreadable: list[int]) -> None:
    points = readings(parse_text(need(TEXT_DIR / name).read_text(), "n1", TS))
    assert [p.tags["gpu"] for p in points] == [str(i) for i in range(len(unreadable))]
    assert [p.fields for p in points] == [{"gpu_unreadable": s} for s in unreadable]


@pytest.mark.parametrize("text", ["", "\n\n", "garbage\nmore garbage : 1\n"])
def test_garbage_raises(text: str) -> None:
    with pytest.raises(ValueError, match="nvidia-smi -q"):
        readings(parse_text(text, "n1", TS))


def test_batch_holds_one_row_per_gpu() -> None:
    path = need(TEXT_DIR / "gpud-nvidia-smi-query.535.183.01.out.0.valid")
    batch = SchemaMapper().to_batch(readings(parse_text(path.read_text(), "n1", TS)))
    assert len(batch.frames[Scope.GPU]) == 8


# `nvidia-smi -q` of an A100 in MIG mode with two instances (our own text in the driver's
# shape): each "MIG Device" section repeats the same keys, and carries its own ECC and FB
# readings that must not stand in for the GPU's.
MIG_TEXT = """
==============NVSMI LOG==============

Timestamp                                 : Mon Jan  5 10:00:00 2026
Driver Version                            : 570.86.15
Attached GPUs                             : 2
GPU 00000000:07:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    MIG Mode
        Current                           : Enabled
        Pending                           : Enabled
    MIG Device
        Index                             : 0
        GPU Instance ID                   : 3
        Compute Instance ID               : 0
        ECC Errors
            Volatile
                SRAM Uncorrectable        : 7
        FB Memory Usage
            Total                         : 19968 MiB
    MIG Device
        Index                             : 1
        GPU Instance ID                   : 5
        Compute Instance ID               : 0
    ECC Errors
        Volatile
            DRAM Correctable              : 2
            DRAM Uncorrectable            : 0
    Temperature
        GPU Current Temp                  : 33 C
    Processes
        GPU instance ID                   : 3
        Compute instance ID               : 0
        Process ID                        : 4242
GPU 00000000:0F:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    MIG Mode
        Current                           : Disabled
        Pending                           : Disabled
    Temperature
        GPU Current Temp                  : 35 C
"""


def test_mig_gpu_in_text_gets_the_xml_parsers_tags() -> None:
    mig, plain = readings(parse_text(MIG_TEXT, "n1", TS))
    assert mig.tags == {"host": "n1", "gpu": "0", "mig": "enabled", "mig_instances": "3,5"}
    assert mig.fields == {"gpu_temp": 33.0, "ecc_sbe_volatile": 2.0, "ecc_dbe_volatile": 0.0,
                          "gpu_unreadable": 0}
    assert plain.tags == {"host": "n1", "gpu": "1"}
    assert SchemaMapper().to_batch([mig, plain]).rejected == []


def test_text_and_xml_tag_a_mig_gpu_alike() -> None:
    from collectors.nvidia_smi import parse_xml
    from tests.collectors.nvidia_smi.fixtures import XML_DIR

    [xml] = readings(parse_xml(need(XML_DIR / "telegraf-a100-sxm4-v12.xml").read_text(), "n1", TS))
    [text] = readings(parse_text(MIG_TEXT.replace("GPU Instance ID                   : 5",
                                         "GPU Instance ID                   : 4\n"
                                         "    MIG Device\n"
                                         "        GPU Instance ID                   : 5\n"
                                         "    MIG Device\n"
                                         "        GPU Instance ID                   : 6"
                                         ).split("GPU 00000000:0F")[0], "n1", TS))
    assert {k: v for k, v in text.tags.items() if k.startswith("mig")} == {
        k: v for k, v in xml.tags.items() if k.startswith("mig")}


def test_a_reading_too_large_for_a_float_is_refused() -> None:
    from collectors.frames import Rejection

    rejected: list[Rejection] = []
    text = MIG_TEXT.replace("DRAM Correctable              : 2",
                            "DRAM Correctable              : " + "9" * 400)
    mig, _ = readings(parse_text(text, "n1", TS, rejected))
    assert "ecc_sbe_volatile" not in mig.fields and mig.fields["gpu_temp"] == 33.0
    [r] = rejected
    assert (r.entity, r.metric) == ("n1:gpu0", "ecc_sbe_volatile") and "400 digits" in r.reason
