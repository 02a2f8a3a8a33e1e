"""parse_exposition and the collector on our own dcgm-exporter page (two H100s): runs in a fresh
clone; the real L4 and T4 pages under ../shared are the thorough tests."""

from __future__ import annotations

import pytest

from collectors.catalog import Scope
from collectors.dcgm import DcgmExporterCollector, ExpositionError, ParseStats, parse_exposition
from collectors.schema import SchemaMapper
from tests.collectors.dcgm.test_collector import page, serve
from tests.collectors.own_captures import DCGM_PAGE, read

TS = 1_700_000_000_000_000_000


def test_page_values() -> None:
    stats = ParseStats()
    points = parse_exposition(read(DCGM_PAGE), None, TS, stats=stats)
    gpus = {p.tags["gpu"]: p for p in points if p.measurement == "gpu"}
    assert sorted(gpus) == ["0", "1"]
    assert gpus["1"].tags == {"host": "gpu-node-b07", "gpu": "1",
                              "uuid": "GPU-c4d3b2a1-0f9e-4a8b-b7c6-d5e4f3a2b1c0",
                              "pci_bus_id": "00000000:9A:00.0"}
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


def test_page_cut_in_a_sample_is_a_clear_error() -> None:
    with pytest.raises(ExpositionError, match="not Prometheus text exposition"):
        parse_exposition(_cut_in_a_sample(), None, TS)


@pytest.mark.xfail(strict=True, reason=(
    "parse_exposition hands the whole page to prometheus_client's parser, which raises on the "
    "first bad line: a page cut in its last sample loses every whole sample before the cut"))
def test_page_cut_in_a_sample_keeps_the_whole_samples_before_it() -> None:
    stats = ParseStats()
    points = parse_exposition(_cut_in_a_sample(), None, TS, stats=stats)
    g1 = next(p.fields for p in points if p.measurement == "gpu" and p.tags["gpu"] == "1")
    assert g1["gpu_temp"] == 81.0 and "gpu_util" not in g1
