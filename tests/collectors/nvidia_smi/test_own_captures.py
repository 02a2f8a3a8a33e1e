"""The nvidia-smi parsers and collector on our own small captures (tests/collectors/captures/):
these run in a fresh clone; the real captures under ../shared are the thorough tests."""

from __future__ import annotations

import pytest

from collectors.catalog import Scope
from collectors.frames import Rejection
from collectors.nvidia_smi import (
    NvidiaSmiCollector,
    SmiParseError,
    looks_like_nvlink_status,
    parse_nvlink_status,
    parse_text,
    parse_xml,
)
from collectors.schema import SchemaMapper
from tests.collectors.nvidia_smi.fixtures import readings
from tests.collectors.nvidia_smi.test_collector import FakeClock, FakeRunner, _cell
from tests.collectors.own_captures import SMI_NVLINK, SMI_TEXT, SMI_XML, read

TS = 1_700_000_000_000_000_000


def test_query_text_values() -> None:
    points = readings(parse_text(read(SMI_TEXT), "n1", TS))
    assert [p.tags for p in points] == [{"host": "n1", "gpu": "0"}, {"host": "n1", "gpu": "1"}]
    g0, g1 = (p.fields for p in points)
    assert (g0["gpu_temp"], g0["mem_temp"], g0["power_draw"], g0["sm_clock"]) == (
        47.0, 55.0, 212.64, 1410.0)
    assert (g0["ecc_sbe_volatile"], g0["remapped_rows_pending"], g0["throttle_thermal"]) == (
        0.0, 0.0, 0.0)
    assert (g1["gpu_temp"], g1["gpu_util"], g1["pcie_replay"]) == (83.0, 100.0, 41.0)
    assert (g1["ecc_sbe_volatile"], g1["ecc_dbe_volatile"], g1["ecc_dbe_aggregate"]) == (
        17.0, 2.0, 2.0)
    assert (g1["remapped_rows_correctable"], g1["remapped_rows_uncorrectable"],
            g1["remapped_rows_pending"], g1["remapped_rows_failure"]) == (2.0, 1.0, 1.0, 0.0)
    assert (g1["throttle_thermal"], g1["throttle_hw_slowdown"], g1["throttle_power"]) == (
        1.0, 1.0, 0.0)
    assert (g1["gpu_slowdown_temp"], g1["gpu_shutdown_temp"], g1["mem_max_temp"]) == (
        89.0, 92.0, 95.0)
    assert "retired_pages_sbe" not in g1 and "gpu_temp_margin" not in g1  # N/A: missing
    assert SchemaMapper().to_batch(points).rejected == []


def test_query_text_cut_inside_the_second_gpu_keeps_what_came_before() -> None:
    text = read(SMI_TEXT)
    cut = text[:text.index("Power Draw", text.index("GPU 00000000:2C:00.0")) + 16]
    whole = readings(parse_text(text, "n1", TS))
    first, second = readings(parse_text(cut, "n1", TS))
    assert first.fields == whole[0].fields  # the first GPU is whole
    assert second.fields["gpu_temp"] == 83.0 and second.fields["remapped_rows_pending"] == 1.0
    # "Power Draw      " with its value cut off is no reading, and nothing after it is read.
    assert "power_draw" not in second.fields and "sm_clock" not in second.fields


@pytest.mark.parametrize("text", ["", "\x00\x01\xff junk\n", read(SMI_NVLINK)])
def test_query_text_refuses_what_is_not_query_output(text: str) -> None:
    with pytest.raises(SmiParseError, match="nvidia-smi -q"):
        readings(parse_text(text, "n1", TS))


def test_query_xml_values() -> None:
    points = readings(parse_xml(read(SMI_XML), "n1", TS))
    assert [p.tags for p in points] == [{"host": "n1", "gpu": "0"}, {"host": "n1", "gpu": "1"}]
    g0, g1 = (p.fields for p in points)
    assert (g0["gpu_temp"], g0["gpu_temp_margin"], g0["power_draw"], g0["sm_clock"]) == (
        52.0, 35.0, 611.2, 1755.0)
    assert (g0["throttle_power"], g0["throttle_thermal"], g0["ecc_sram_correctable"]) == (
        1.0, 0.0, 1.0)
    assert (g1["gpu_temp"], g1["mem_temp"], g1["gpu_temp_margin"], g1["pcie_replay"]) == (
        79.0, 88.0, 8.0, 12.0)
    assert (g1["ecc_sbe_volatile"], g1["ecc_dbe_volatile"]) == (5.0, 1.0)
    assert (g1["remapped_rows_correctable"], g1["remapped_rows_uncorrectable"],
            g1["remapped_rows_pending"]) == (3.0, 1.0, 1.0)
    assert (g1["throttle_thermal"], g1["throttle_hw_slowdown"]) == (1.0, 1.0)
    assert "retired_pages_dbe" not in g1  # N/A on Hopper
    assert SchemaMapper().to_batch(points).rejected == []


@pytest.mark.parametrize("cut", [0.5, 0.99])
def test_query_xml_cut_short_is_a_clear_error(cut: float) -> None:
    text = read(SMI_XML)
    with pytest.raises(SmiParseError, match="nvidia-smi XML does not parse"):
        readings(parse_xml(text[:int(len(text) * cut)], "n1", TS))


def test_nvlink_status_values() -> None:
    text = read(SMI_NVLINK)
    assert looks_like_nvlink_status(text)
    notes: list[str] = []
    points = parse_nvlink_status(text, "n1", TS, notes=notes)
    states = {(int(p.tags["gpu"]), int(p.tags["link"])): p.fields["nvlink_state"]
              for p in points}
    assert sorted(states) == [(g, link) for g in (0, 1) for link in range(18)]
    assert [k for k, v in states.items() if v == 0.0] == [(1, 5), (1, 13)]
    assert notes == []
    assert SchemaMapper().to_batch(points).rejected == []


@pytest.mark.parametrize(("text", "match"), [
    ("", "no 'GPU <n>:' line"),
    ("No devices were found\n", "no 'GPU <n>:' line"),
    (read(SMI_TEXT), "is it nvidia-smi nvlink --status"),  # -q output: GPU lines, no links
])
def test_nvlink_status_refuses_other_output(text: str, match: str) -> None:
    assert not looks_like_nvlink_status(text)
    with pytest.raises(SmiParseError, match=match):
        parse_nvlink_status(text, "n1", TS)


def test_nvlink_status_cut_after_a_link_label_does_not_report_it_up() -> None:
    text = read(SMI_NVLINK)
    at = text.index("Link 9:", text.index("GPU 1:")) + len("Link 9:")
    notes: list[str] = []
    points = parse_nvlink_status(text[:at], "n1", TS, notes=notes)
    states = {(int(p.tags["gpu"]), int(p.tags["link"])): p.fields["nvlink_state"]
              for p in points}
    assert states[(1, 8)] == 1.0 and states[(1, 5)] == 0.0  # the whole lines are kept
    assert (1, 9) not in states  # the cut line is no reading ...
    assert any("link 9" in n.lower() for n in notes)  # ... and that is said


@pytest.mark.parametrize(("status", "shown"), [
    ("", "''"), ("garbage", "'garbage'"), ("26.5", "'26.5'"), ("<inact", "'<inact'"),
    ("Active", "'Active'")])
def test_nvlink_status_unreadable_link_is_refused_and_the_others_kept(status: str,
                                                                      shown: str) -> None:
    text = read(SMI_NVLINK)
    at = text.index("Link 3:", text.index("GPU 1:"))
    end = text.index("\n", at)
    bad = text[:at] + f"Link 3: {status}" + text[end:]
    rejected: list[Rejection] = []
    notes: list[str] = []
    points = parse_nvlink_status(bad, "n1", TS, notes=notes, rejected=rejected)
    states = {(int(p.tags["gpu"]), int(p.tags["link"])): p.fields["nvlink_state"]
              for p in points}
    whole = {(int(p.tags["gpu"]), int(p.tags["link"])): p.fields["nvlink_state"]
             for p in parse_nvlink_status(text, "n1", TS)}
    assert states == {k: v for k, v in whole.items() if k != (1, 3)}
    [r] = rejected
    assert r.line == bad[:at].count("\n") + 1 and r.entity == "n1:gpu1:nvlink3"
    assert r.metric == "nvlink_state"
    assert r.reason.startswith(f"GPU 1 link 3: no readable status ({shown};")
    assert notes == []  # with a rejected list, refusals go there only


def test_collector_merges_our_csv_rows_and_xml() -> None:
    csv = ("0, 50, 60, 600.25, 1740, 98, Active, Not Active, Not Active, "
           "00000000:4A:00.0, 5, 5, 16, 16, NVIDIA H100 80GB HBM3, "
           "GPU-3c2d1e0f-9a8b-4c7d-a6e5-f4d3c2b1a098, 1652023000000, 96.00.89.00.01, 535.161.08\n"
           "1, 80, 89, 490.00, 1185, 100, Not Active, Active, Active, "
           "00000000:5D:00.0, 5, 5, 16, 16, NVIDIA H100 80GB HBM3, "
           "GPU-b1c2d3e4-f5a6-4b7c-8d9e-0f1a2b3c4d5e, [Unknown Error], 96.00.89.00.01, "
           "535.161.08\n")
    runner, clock = FakeRunner(read(SMI_XML), csv), FakeClock()
    c = NvidiaSmiCollector(host="n1", runner=runner, clock=clock, xml_interval=60)
    batch = c.collect()
    assert c.status.up and c.status.reason == "" and batch.rejected == []
    frame = batch.frames[Scope.GPU]
    assert len(frame) == 2
    assert _cell(batch, "gpu_temp") == 50.0  # the CSV wins over the XML's 52
    assert _cell(batch, "ecc_sram_correctable") == 1.0  # only in the XML
    assert _cell(batch, "remapped_rows_pending") == 0.0


def test_collector_with_a_cut_xml_is_down_and_says_why() -> None:
    text = read(SMI_XML)
    c = NvidiaSmiCollector(host="n1", runner=FakeRunner(text[:len(text) // 2]),
                           clock=FakeClock(), xml_interval=60)
    c.collect()
    assert not c.status.up and "XML does not parse" in c.status.reason
