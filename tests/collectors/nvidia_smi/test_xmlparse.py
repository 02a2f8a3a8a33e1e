from __future__ import annotations

from pathlib import Path

import pytest

from collectors.catalog import CATALOG, Scope
from collectors.nvidia_smi import SmiParseError, parse_xml
from collectors.schema import SchemaMapper
from tests.collectors.nvidia_smi.fixtures import XML_DIR, files, need, readings

TS = 1_700_000_000_000_000_000


def _one(name: str) -> dict[str, float | int | bool | str]:
    points = readings(parse_xml(need(XML_DIR / name).read_text(), "n1", TS))
    assert len(points) == 1
    return dict(points[0].fields)


@pytest.mark.parametrize("path", files(XML_DIR, lambda n: n.endswith(".xml")))
def test_every_capture_parses_into_our_schema(path: Path) -> None:
    points = readings(parse_xml(path.read_text(), "n1", TS))
    assert points, path.name
    for i, p in enumerate(points):
        assert p.measurement == "gpu"
        assert {"host": "n1", "gpu": str(i)}.items() <= p.tags.items()
        assert p.ts_ns == TS
        # Every capture in the set reports at least the core temperature and the SM clock.
        assert {"gpu_temp", "sm_clock"} <= p.fields.keys()
    batch = SchemaMapper().to_batch(points)
    assert batch.rejected == []
    assert len(batch.frames[Scope.GPU]) == len(points)


def test_a100_v12_readings() -> None:
    f = _one("telegraf-a100-sxm4-v12.xml")
    assert f["gpu_temp"] == 27.0
    assert f["mem_temp"] == 44.0
    assert f["power_draw"] == 67.03
    assert f["sm_clock"] == 1275.0
    assert (f["gpu_slowdown_temp"], f["gpu_shutdown_temp"], f["mem_max_temp"]) == (89, 92, 95)
    assert f["ecc_sbe_volatile"] == 0.0 and f["ecc_dbe_aggregate"] == 0.0
    assert f["pcie_replay"] == 0.0
    assert f["throttle_thermal"] == 0.0  # clocks_event_reasons, "Not Active"
    # MIG is enabled: utilization is N/A for the physical GPU and stays out, not zero.
    assert "gpu_util" not in f
    # <remapped_rows>N/A</remapped_rows>: no row remapper reading, so no fields.
    assert not any(k.startswith("remapped_rows") for k in f)
    # Page retirement counts are N/A on Ampere (row remapping replaced them).
    assert "retired_pages_sbe" not in f


def test_v11_power_readings_and_throttle_reasons() -> None:
    f = _one("telegraf-a10g.xml")
    assert f["power_draw"] == 25.58  # power_readings/power_draw
    assert f["throttle_hw_slowdown"] == 0.0  # clocks_throttle_reasons/...
    assert f["remapped_rows_pending"] == 0.0 and f["remapped_rows_failure"] == 0.0
    assert f["gpu_util"] == 0.0


def test_v13_instant_power_and_tlimit() -> None:
    f = _one("telegraf-rtx-3080-v13.xml")
    assert f["power_draw"] == 142.33  # instant_power_draw, not the average
    assert f["gpu_util"] == 65.0
    ada = _one("telegraf-rtx-4000-sff-ada-v13.xml")
    assert ada["gpu_temp_margin"] == 49.0
    # *_tlimit_threshold values are relative to T.Limit (e.g. -7 C), not absolute thresholds.
    assert "gpu_shutdown_temp" not in ada and "gpu_slowdown_temp" not in ada


def test_v11_retired_pages_counts() -> None:
    f = _one("telegraf-tesla-t4.xml")
    assert f["retired_pages_sbe"] == 0.0 and f["retired_pages_dbe"] == 0.0
    assert f["retired_pages_pending"] == 0.0


def test_without_doctype_and_trimmed_v10() -> None:
    assert _one("telegraf-gtx-1660-ti.xml")["power_draw"] == 8.93
    f = _one("telegraf-gtx-1070-ti.xml")
    assert f == {"gpu_temp": 39.0, "sm_clock": 135.0, "gpu_util": 0.0,  # power_draw is N/A
                 "pcie_link_gen": 1.0, "pcie_link_width": 16.0, "gpu_unreadable": 0}


def test_old_ecc_layout_all_na_gives_no_ecc_fields() -> None:
    f = _one("telegraf-quadro-p2000-v12.xml")
    assert not any(k.startswith("ecc_") for k in f)


def test_several_gpus_are_numbered_in_document_order() -> None:
    gpu = ("<gpu id='0000:01:00.0'><temperature><gpu_temp>{} C</gpu_temp></temperature>"
           "<remapped_rows><remapped_row_unc>{}</remapped_row_unc>"
           "<remapped_row_pending>Yes</remapped_row_pending></remapped_rows></gpu>")
    text = f"<nvidia_smi_log>{gpu.format(30, 0)}{gpu.format(31, 2)}</nvidia_smi_log>"
    points = readings(parse_xml(text, "n1", TS))
    assert [(p.tags["gpu"], p.fields["gpu_temp"]) for p in points] == [("0", 30.0), ("1", 31.0)]
    assert points[1].fields["remapped_rows_uncorrectable"] == 2.0
    assert points[1].fields["remapped_rows_pending"] == 1.0


def test_every_xml_metric_in_the_catalog_has_paths() -> None:
    from collectors.nvidia_smi import XML_PATHS
    wanted = {m.name for m in CATALOG.columns(Scope.GPU) if m.smi_xml}
    assert set(XML_PATHS) == wanted


@pytest.mark.parametrize("text", [
    "", "garbage \x00 not xml", "<nvidia_smi_log><gpu><temperature>",
    "<other/>", "<nvidia_smi_log></nvidia_smi_log>",
])
def test_bad_input_raises_a_value_error_with_a_message(text: str) -> None:
    with pytest.raises(SmiParseError) as info:
        readings(parse_xml(text, "n1", TS))
    assert isinstance(info.value, ValueError) and str(info.value)


def test_truncated_capture_raises() -> None:
    text = need(XML_DIR / "telegraf-a100-sxm4-v12.xml").read_text()
    with pytest.raises(SmiParseError, match="does not parse"):
        readings(parse_xml(text[: len(text) // 2], "n1", TS))


def test_mig_instances_are_tags_of_the_physical_gpu() -> None:
    from collectors.lineprotocol import parse
    from collectors.lineprotocol_format import format_point

    points = readings(parse_xml(need(XML_DIR / "telegraf-a100-sxm4-v12.xml").read_text(), "n1", TS))
    (p,) = points
    assert p.tags["gpu"] == "0"
    assert p.tags["mig"] == "enabled"
    assert p.tags["mig_instances"] == "3,4,5,6"
    # The comma in the tag value is escaped on the wire and comes back whole.
    (back,) = parse(format_point(p)).points
    assert back.tags["mig_instances"] == "3,4,5,6"
    # The catalog mapping ignores the extra tags: the readings land on the physical GPU.
    batch = SchemaMapper().to_batch(points)
    assert batch.rejected == []
    assert [e.key for e in batch.frames[Scope.GPU].entities.entities] == ["n1:gpu0"]


def test_gpus_without_mig_mode_carry_no_mig_tags() -> None:
    for name in ("telegraf-a10g.xml", "telegraf-rtx-3080-v13.xml"):
        for p in readings(parse_xml(need(XML_DIR / name).read_text(), "n1", TS)):
            assert "mig" not in p.tags and "mig_instances" not in p.tags


def test_a_reading_too_large_for_a_float_is_refused_not_raised() -> None:
    from collectors.frames import Rejection

    big = "9" * 400
    xml = (f"<?xml version='1.0'?><nvidia_smi_log><gpu><temperature><gpu_temp>{big} C"
           "</gpu_temp><memory_temp>44 C</memory_temp></temperature></gpu></nvidia_smi_log>")
    rejected: list[Rejection] = []
    [p] = readings(parse_xml(xml, "n1", TS, rejected))
    assert p.fields == {"mem_temp": 44.0}
    [r] = rejected
    assert (r.entity, r.metric) == ("n1:gpu0", "gpu_temp") and "out of range" in r.reason
