from __future__ import annotations

from pathlib import Path

import pytest

from collectors.nvidia_smi import DEFAULT_QUERY_FIELDS, SmiParseError, parse_query_csv
from collectors.schema import SchemaMapper
from tests.collectors.nvidia_smi.fixtures import TEXT_DIR, bundle_sections, files, is_bundle, need

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
        [p] = parse_query_csv(body, fields, "n1", TS)
        assert (p.measurement, p.tags, p.ts_ns) == ("gpu", {"host": "n1", "gpu": "0"}, TS)
        assert {"gpu_temp", "power_draw", "sm_clock", "gpu_util", "throttle_power"} <= set(
            p.fields)
        assert SchemaMapper().to_batch([p]).rejected == []


def test_h100_load_values() -> None:
    path = need(TEXT_DIR / "nvidia_gpu_exporter-capture-linux-x86_64__nvidia-h100-80gb-hbm3"
                           "__590.48.01.txt")
    _, (fields, body) = _queries(path)
    [p] = parse_query_csv(body, fields, "n1", TS)
    f = p.fields
    assert (f["gpu_temp"], f["mem_temp"], f["gpu_temp_margin"]) == (59.0, 54.0, 26.0)
    assert f["power_draw"] == 631.95  # power.draw, the first spelling asked for
    assert (f["sm_clock"], f["gpu_util"]) == (1980.0, 100.0)
    assert f["remapped_rows_pending"] == 0.0 and f["ecc_dbe_aggregate"] == 0.0


def test_rtx2080_idle_power_cap_active() -> None:
    path = need(TEXT_DIR / "nvidia_gpu_exporter-capture-linux-x86_64__nvidia-geforce-rtx-2080-"
                           "super__595.71.05.txt")
    (fields, body), _ = _queries(path)
    [p] = parse_query_csv(body, fields, "n1", TS)
    assert p.fields["throttle_power"] == 1.0  # clocks_event_reasons.sw_power_cap: Active
    assert "mem_temp" not in p.fields  # [N/A] on GDDR boards


def test_noheader_nounits_several_gpus() -> None:
    text = ("1, 45, 60, 250.12, 1410, 97, Not Active, Active, Not Active\n"
            "0, 44, [N/A], 249.00, 1410, 100, Not Active, Not Active, Not Active\n")
    points = parse_query_csv(text, DEFAULT_QUERY_FIELDS, "n1", TS)
    assert [p.tags["gpu"] for p in points] == ["1", "0"]  # the index column, not the row
    assert points[0].fields == {"gpu_temp": 45.0, "mem_temp": 60.0, "power_draw": 250.12,
                                "sm_clock": 1410.0, "gpu_util": 97.0, "throttle_thermal": 0.0,
                                "throttle_power": 1.0, "throttle_hw_slowdown": 0.0}
    assert "mem_temp" not in points[1].fields


def test_header_with_units() -> None:
    text = ("index, temperature.gpu, power.draw [W]\n"
            "0, 31, 55.00 W\n")
    [p] = parse_query_csv(text, ["index", "temperature.gpu", "power.draw"], "n1", TS)
    assert p.fields == {"gpu_temp": 31.0, "power_draw": 55.0}


@pytest.mark.parametrize(("text", "match"), [
    ("", "no rows"),
    ("0, 45\n", "has 2 cells for 3 fields"),
    ("x, 45, 1\n", "index 'x'"),
    ("index, temperature.memory, power.draw\n0, 1, 2\n", "does not match"),
])
def test_bad_csv(text: str, match: str) -> None:
    with pytest.raises(SmiParseError, match=match):
        parse_query_csv(text, ["index", "temperature.gpu", "power.draw"], "n1", TS)
