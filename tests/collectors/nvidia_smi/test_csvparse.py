from __future__ import annotations

from pathlib import Path

import pytest

from collectors.frames import Rejection
from collectors.nvidia_smi import (
    DEFAULT_QUERY_FIELDS,
    SmiParseError,
    parse_query_csv,
    parse_query_csv_with_header,
)
from collectors.schema import SchemaMapper
from tests.collectors.nvidia_smi.fixtures import (
    TEXT_DIR,
    bundle_sections,
    files,
    is_bundle,
    need,
    readings,
)

TS = 1_700_000_000_000_000_000


def _queries(path: Path) -> list[tuple[list[str], str]]:
    out = []
    for cmd, body in bundle_sections(path):
        if cmd.startswith("nvidia-smi --query-gpu="):
            fields = cmd.split("=", 1)[1].split(" ")[0].split(",")
            out.append((fields, body))
    return out


@pytest.mark.parametrize("path", files(TEXT_DIR, is_bundle))
def test_every_bundle_query_gpu_csv_with_header_and_units(path: Path) -> None:
    queries = _queries(path)
    assert len(queries) == 2  # idle and under load
    for fields, body in queries:
        [p] = readings(parse_query_csv(body, fields, "n1", TS))
        assert (p.measurement, p.tags, p.ts_ns) == ("gpu", {"host": "n1", "gpu": "0"}, TS)
        assert {"gpu_temp", "power_draw", "sm_clock", "gpu_util", "throttle_power"} <= set(
            p.fields)
        assert SchemaMapper().to_batch([p]).rejected == []


def test_h100_load_values() -> None:
    path = need(TEXT_DIR / "nvidia_gpu_exporter-capture-linux-x86_64__nvidia-h100-80gb-hbm3"
                           "__590.48.01.txt")
    _, (fields, body) = _queries(path)
    [p] = readings(parse_query_csv(body, fields, "n1", TS))
    f = p.fields
    assert (f["gpu_temp"], f["mem_temp"], f["gpu_temp_margin"]) == (59.0, 54.0, 26.0)
    assert f["power_draw"] == 631.95  # power.draw, the first spelling asked for
    assert (f["sm_clock"], f["gpu_util"]) == (1980.0, 100.0)
    assert f["remapped_rows_pending"] == 0.0 and f["ecc_dbe_aggregate"] == 0.0


def test_rtx2080_idle_power_cap_active() -> None:
    path = need(TEXT_DIR / "nvidia_gpu_exporter-capture-linux-x86_64__nvidia-geforce-rtx-2080-"
                           "super__595.71.05.txt")
    (fields, body), _ = _queries(path)
    [p] = readings(parse_query_csv(body, fields, "n1", TS))
    assert p.fields["throttle_power"] == 1.0  # clocks_event_reasons.sw_power_cap: Active
    assert "mem_temp" not in p.fields  # [N/A] on GDDR boards


def test_noheader_nounits_several_gpus() -> None:
    text = ("1, 45, 60, 250.12, 1410, 97, Not Active, Active, Not Active\n"
            "0, 44, [N/A], 249.00, 1410, 100, Not Active, Not Active, Not Active\n")
    points = readings(parse_query_csv(text, DEFAULT_QUERY_FIELDS[:9], "n1", TS))
    assert [p.tags["gpu"] for p in points] == ["1", "0"]  # the index column, not the row
    assert points[0].fields == {"gpu_temp": 45.0, "mem_temp": 60.0, "power_draw": 250.12,
                                "sm_clock": 1410.0, "gpu_util": 97.0, "throttle_thermal": 0.0,
                                "throttle_power": 1.0, "throttle_hw_slowdown": 0.0,
                                "gpu_unreadable": 0}
    assert "mem_temp" not in points[1].fields


def test_header_with_units() -> None:
    text = ("index, temperature.gpu, power.draw [W]\n"
            "0, 31, 55.00 W\n")
    [p] = readings(parse_query_csv(text, ["index", "temperature.gpu", "power.draw"], "n1", TS))
    assert p.fields == {"gpu_temp": 31.0, "power_draw": 55.0, "gpu_unreadable": 0}


@pytest.mark.parametrize(("text", "match"), [
    ("", "no rows"),
    ("0, 45\n", "has 2 cells for 3 fields"),
    ("x, 45, 1\n", "index 'x'"),
    ("index, temperature.memory, power.draw\n0, 1, 2\n", "does not match"),
])
def test_bad_csv(text: str, match: str) -> None:
    with pytest.raises(SmiParseError, match=match):
        readings(parse_query_csv(text, ["index", "temperature.gpu", "power.draw"], "n1", TS))


# A wide capture in the shape nvidia_gpu_exporter asks for (our own text, few of its ~230
# fields): the header, with units, runs far past any fixed prefix a reader might look at.
_WIDE_FIELDS = ["timestamp", "driver_version", "name", "pci.bus_id", "index"] + [
    f"clocks_event_reasons_counters.unused_{i}" for i in range(60)] + [
    "temperature.gpu", "temperature.memory", "power.draw", "power.draw.instant",
    "clocks.current.sm", "utilization.gpu", "ecc.errors.uncorrected.volatile.total",
    "clocks_event_reasons.sw_power_cap", "fabric.health.summary", "hostname"]
_UNITS = {"power.draw": " [W]", "power.draw.instant": " [W]", "clocks.current.sm": " [MHz]",
          "utilization.gpu": " [%]"}


def _wide(gpu_temp: str = "41") -> str:
    head = ", ".join(f + _UNITS.get(f, "") for f in _WIDE_FIELDS)
    rows = []
    for g in (0, 1):
        cells = ["2026/01/05 10:00:00.000", "570.86.15", "NVIDIA H100 80GB HBM3",
                 f"00000000:{0x19 + g:02X}:00.0", str(g)] + ["0"] * 60 + [
            gpu_temp, "[N/A]", "301.12 W", "300.50 W", "1980 MHz", "97 %", "0",
            "Not Active", "[N/A]", "node7"]
        rows.append(", ".join(cells))
    return head + "\n" + "\n".join(rows) + "\n"


def test_wide_capture_is_read_by_its_header_and_the_rest_ignored() -> None:
    text = _wide()
    assert len(text.splitlines()[0]) > 2000
    points = readings(parse_query_csv_with_header(text, "n1", TS))
    assert [p.tags["gpu"] for p in points] == ["0", "1"]
    assert points[1].fields == {"gpu_temp": 41.0, "power_draw": 301.12, "sm_clock": 1980.0,
                                "gpu_util": 97.0, "ecc_dbe_volatile": 0.0,
                                "throttle_power": 0.0, "gpu_unreadable": 0}
    # The collector's own narrow query, with the fields it asked for, still checks the header.
    assert readings(parse_query_csv(text, [f.strip() for f in _WIDE_FIELDS], "n1", TS)) == points


@pytest.mark.parametrize("path", files(TEXT_DIR, is_bundle))
def test_every_bundle_query_gpu_csv_is_read_by_its_header_alone(path: Path) -> None:
    for fields, body in _queries(path):
        assert len(body.splitlines()[0]) > 400 and len(fields) > 200
        assert readings(parse_query_csv_with_header(body, "n1", TS)) == readings(parse_query_csv(
            body, fields, "n1", TS))


def test_headerless_capture_says_it_has_no_header() -> None:
    text = "0, 45, 60, 250.12\n1, 44, 61, 249.00\n"
    with pytest.raises(SmiParseError, match=r"has no header line.*--format=csv \(not noheader\)"
                                            r".*first line is '0, 45, 60, 250.12'"):
        readings(parse_query_csv_with_header(text, "n1", TS))


def test_header_mismatch_names_the_first_difference() -> None:
    text = _wide()
    asked = [f.strip() for f in _WIDE_FIELDS]
    asked[66] = "temperature.gpu.tlimit"
    with pytest.raises(SmiParseError, match=r"field 67 is 'temperature.memory' where "
                                            r"'temperature.gpu.tlimit' was asked for"):
        readings(parse_query_csv(text, asked, "n1", TS))
    with pytest.raises(SmiParseError, match="the header has 75 fields, 3 were asked for"):
        readings(parse_query_csv(text, ["index", "temperature.gpu", "power.draw"], "n1", TS))


def test_a_reading_too_large_for_a_float_is_refused_and_the_rest_kept() -> None:
    rejected: list[Rejection] = []
    points = readings(parse_query_csv_with_header(_wide("9" * 400), "n1", TS, rejected))
    assert [("gpu_temp" in p.fields, p.fields["power_draw"]) for p in points] == [
        (False, 301.12), (False, 301.12)]
    assert [(r.entity, r.metric) for r in rejected] == [("n1:gpu0", "gpu_temp"),
                                                         ("n1:gpu1", "gpu_temp")]
    assert "temperature.gpu: reading '999999999999...99999999' (400 digits) is out of range" in (
        rejected[0].reason)
    # Without a list to refuse into, the reading is left out all the same: never an exception.
    p, _ = readings(parse_query_csv_with_header(_wide("9" * 400), "n1", TS))
    assert "gpu_temp" not in p.fields
