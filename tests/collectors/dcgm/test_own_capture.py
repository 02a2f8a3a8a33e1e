"""parse_exposition and the collector on our own dcgm-exporter page (two H100s): runs in a fresh
clone; the real L4 and T4 pages under ../shared are the thorough tests."""

from __future__ import annotations

import pytest

from collectors.catalog import Scope
from collectors.dcgm import DcgmExporterCollector, ExpositionError, ParseStats, parse_exposition
from collectors.frames import Rejection
from collectors.schema import SchemaMapper
from tests.collectors.dcgm.test_collector import page, serve
from tests.collectors.own_captures import DCGM_PAGE, read

TS = 1_700_000_000_000_000_000


def test_page_values() -> None:
    stats = ParseStats()
    points = parse_exposition(read(DCGM_PAGE), None, TS, stats=stats)
    gpus = {p.tags["gpu"]: p for p in points if p.measurement == "gpu"}
    assert sorted(gpus) == ["0", "1"]
    assert gpus["1"].tags == {"host": "gpu-node-b07", "gpu": "1"}
    infos = {p.tags["gpu"]: p.fields for p in points if p.measurement == "gpu_info"}
    assert infos["1"] == {"uuid": "GPU-c4d3b2a1-0f9e-4a8b-b7c6-d5e4f3a2b1c0",
                          "pci_bus_id": "00000000:9A:00.0", "model": "NVIDIA H100 80GB HBM3",
                          "driver": "570.124.06"}
    assert infos["0"]["uuid"] == "GPU-5e1f7a20-3b4c-4d9e-8f01-a2b3c4d5e6f7"
    g0, g1 = gpus["0"].fields, gpus["1"].fields
    assert (g0["gpu_temp"], g0["power_draw"], g0["sm_clock"]) == (49.0, 402.118, 1980.0)
    assert (g1["gpu_temp"], g1["mem_temp"], g1["gpu_util"], g1["pcie_replay"]) == (
        81.0, 71.0, 100.0, 27)
    # Throttle reasons 72 = 0x40 (HW thermal) | 0x8 (HW slowdown).
    assert (g1["throttle_thermal"], g1["throttle_hw_slowdown"], g1["throttle_power"]) == (1, 1, 0)
    assert (g1["ecc_sbe_volatile"], g1["ecc_dbe_volatile"]) == (14, 1)
    assert (g1["remapped_rows_correctable"], g1["remapped_rows_uncorrectable"],
            g1["remapped_rows_failure"]) == (2, 1, 0)
    xids = {p.tags["gpu"]: p.fields["code"] for p in points if p.measurement == "xid"}
    assert xids == {"0": 0, "1": 94}
    assert stats.samples == 40 and stats.mapped == 26
    assert stats.unknown["DCGM_FI_DEV_FB_FREE"] == 2
    assert stats.unknown["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == 2
    assert stats.skipped == {"NVLink total over all links (the catalog keeps links apart)": 2}
    batch = SchemaMapper().to_batch(points)
    assert not batch.rejected and len(batch.frames[Scope.GPU]) == 2


def test_collector_scrapes_the_page() -> None:
    with serve(page(read(DCGM_PAGE))) as url:
        c = DcgmExporterCollector(url, clock=lambda: TS)
        batch = c.collect()
        c.close()
    assert c.status.up and c.status.reason == "" and not batch.rejected
    frame = batch.frames[Scope.GPU]
    assert [e.key for e in frame.entities] == ["gpu-node-b07:gpu0", "gpu-node-b07:gpu1"]


def _cut_in_a_sample() -> str:
    text = read(DCGM_PAGE)
    return text[:text.index('DCGM_FI_DEV_GPU_UTIL{gpu="1"') + 40]


def test_page_cut_in_a_sample_keeps_the_whole_samples_before_it() -> None:
    text = _cut_in_a_sample()
    stats, rejected = ParseStats(), []
    points = parse_exposition(text, None, TS, stats=stats, rejected=rejected)
    g0, g1 = (p.fields for p in points if p.measurement == "gpu")
    assert g1["gpu_temp"] == 81.0 and g1["pcie_replay"] == 27 and "gpu_util" not in g1
    assert g0["gpu_util"] == 88.0  # GPU 0's line came whole
    [r] = rejected
    assert r.line == text.count("\n") + 1 and "was cut" in r.reason
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="1"' in r.reason


def test_page_cut_inside_a_value_refuses_the_value() -> None:
    # "... 81" cut to "... 8" still reads as a number: a last line without its line feed is
    # refused whatever it says.
    text = read(DCGM_PAGE)
    end = text.index("\n", text.index('DCGM_FI_DEV_GPU_TEMP{gpu="1"')) - 1
    rejected: list[Rejection] = []
    points = parse_exposition(text[:end], None, TS, rejected=rejected)
    g1 = next(p.fields for p in points if p.measurement == "gpu" and p.tags["gpu"] == "1")
    assert "gpu_temp" not in g1 and g1["mem_temp"] == 71.0
    assert [r.line for r in rejected] == [text[:end].count("\n") + 1]


def test_bad_lines_inside_the_page_are_refused_and_the_rest_is_read() -> None:
    lines = read(DCGM_PAGE).split("\n")
    temp1 = next(i for i, x in enumerate(lines) if x.startswith('DCGM_FI_DEV_GPU_TEMP{gpu="1"'))
    util0 = next(i for i, x in enumerate(lines) if x.startswith('DCGM_FI_DEV_GPU_UTIL{gpu="0"'))
    lines[temp1] = lines[temp1].replace('UUID="', "UUID=")  # an unquoted label value
    lines[util0] = lines[util0].rsplit(" ", 1)[0] + " 12,5"  # a value that is not a number
    lines.insert(3, "<html>")
    rejected: list[Rejection] = []
    points = parse_exposition("\n".join(lines), None, TS, rejected=rejected)
    assert [(r.line, r.reason.split(":")[0]) for r in rejected] == [
        (4, "not a sample"), (temp1 + 2, "label 2 is not name=\"value\" (cut or malformed)"),
        (util0 + 2, "sample value or timestamp is not a number")]
    whole = parse_exposition(read(DCGM_PAGE), None, TS)
    g0, g1 = ({k: v for k, v in p.fields.items()} for p in points if p.measurement == "gpu")
    w0, w1 = (p.fields for p in whole if p.measurement == "gpu")
    assert g0 == {k: v for k, v in w0.items() if k != "gpu_util"}
    assert g1 == {k: v for k, v in w1.items() if k != "gpu_temp"}


@pytest.mark.parametrize("line", [
    "x" * 20_000 + " 1",  # longer than a line may be
    "DCGM_FI_" + "X" * 300 + ' {gpu="0"} 1',  # a name past the bound
    "DCGM_FI_DEV_GPU_TEMP{" + ",".join(f'l{i}="v"' for i in range(65)) + "} 1",
    'DCGM_FI_DEV_GPU_TEMP{gpu="' + "\\" * 5_000 + "} 1",  # an escape run never closed
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",gpu="1"} 1',
    'DCGM_FI_DEV_GPU_TEMP{__name__="x",gpu="0"} 1',
    'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 1 2 3',
    "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"}",
    "# TYPE DCGM_FI_DEV_GPU_TEMP",
])
def test_each_kind_of_bad_line_is_refused_alone(line: str) -> None:
    good = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h"} 40\n'
    rejected: list[Rejection] = []
    points = parse_exposition(good + line + "\n" + good.replace("40", "41"), None, TS,
                              rejected=rejected)
    assert [p.fields for p in points] == [{"gpu_temp": 41.0}]
    assert [r.line for r in rejected] == [2] and len(rejected[0].reason) < 200


@pytest.mark.parametrize("text", ["<html>502 Bad Gateway</html>\n", "{}\n\x00\x01\n",
                                  _cut_in_a_sample().split("\n")[-1]])
def test_a_page_with_no_sample_and_a_bad_line_is_a_clear_error(text: str) -> None:
    with pytest.raises(ExpositionError, match="not Prometheus text exposition: line 1: "):
        parse_exposition(text, None, TS)


def test_collector_reads_a_cut_page_up_to_the_cut() -> None:
    with serve(page(_cut_in_a_sample())) as url:
        c = DcgmExporterCollector(url, clock=lambda: TS)
        batch = c.collect()
        c.close()
    assert c.status.up
    assert batch.frames[Scope.GPU].values.shape[0] == 2
