"""parse_exposition over real dcgm-exporter pages (an L4 and a T4 node) and small edge cases."""

from __future__ import annotations

import pytest

from collectors.catalog import Scope
from collectors.dcgm import FIELDS, ExpositionError, ParseStats, parse_exposition
from collectors.frames import Entity
from collectors.lineprotocol import Point
from collectors.schema import SchemaMapper
from tests.collectors.dcgm.pages import L4, T4, exposition, needs_pages

TS = 1_700_000_000_000_000_000


@needs_pages
def test_l4_page_values() -> None:
    stats = ParseStats()
    info, p = parse_exposition(exposition(L4), None, TS, stats=stats)
    assert p.measurement == "gpu"
    assert p.tags == {"host": "i-030791dc5a37cd257", "gpu": "0"}
    # The identity in the labels is the GPU's gpu_info, not a tag on every reading.
    assert (info.measurement, info.tags, info.ts_ns) == (
        "gpu_info", {"host": "i-030791dc5a37cd257", "gpu": "0"}, TS)
    assert info.fields == {"uuid": "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c",
                           "pci_bus_id": "00000000:31:00.0", "model": "NVIDIA L4",
                           "driver": "580.105.08"}
    assert p.ts_ns == TS
    assert p.fields["gpu_temp"] == 31.0
    assert p.fields["power_draw"] == pytest.approx(16.365)
    assert p.fields["sm_clock"] == 210.0
    assert p.fields["gpu_util"] == 0.0
    # Counters (TYPE counter: prometheus_client renames them *_total) arrive under their names.
    assert p.fields["pcie_replay"] == 0
    assert p.fields["remapped_rows_correctable"] == 0
    assert p.fields["remapped_rows_uncorrectable"] == 0
    assert p.fields["remapped_rows_failure"] == 0
    assert stats.samples == 23
    assert stats.mapped == 9
    assert stats.unknown["DCGM_FI_DEV_FB_FREE"] == 1
    assert stats.unknown["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 1
    assert sum(stats.unknown.values()) == 14


@needs_pages
def test_default_counters_leave_out_ecc_retired_pages_and_nvlink() -> None:
    # default-counters.csv ships these commented out, so neither page has them.
    for path in (L4, T4):
        [p] = _readings(parse_exposition(exposition(path), "n1", TS))
        fields = p.fields
        for name in ("ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_dbe_aggregate",
                     "retired_pages_dbe", "retired_pages_pending", "throttle_thermal"):
            assert name not in fields, (path.name, name)
    assert not [p for p in parse_exposition(exposition(L4), "n1", TS)
                if p.measurement not in ("gpu", "gpu_info")]


@needs_pages
def test_t4_page_values_and_host_override() -> None:
    stats = ParseStats()
    info, p = parse_exposition(exposition(T4), "node-7", TS, stats=stats)
    assert (info.tags, p.tags) == ({"host": "node-7", "gpu": "0"},) * 2
    assert info.fields == {"uuid": "GPU-d7cbb0cd-d4bd-c2f7-dfaf-221df5e958ea",
                           "pci_bus_id": "00000000:00:1E.0", "model": "Tesla T4",
                           "driver": "580.105.08"}
    f = p.fields
    assert f["gpu_temp"] == 24.0
    assert f["power_draw"] == pytest.approx(14.512)
    assert f["sm_clock"] == 300.0
    assert f["mem_temp"] == 0.0
    # This capture is a set of excerpts: no PCIe replay or remap fields were pasted.
    assert "pcie_replay" not in f and "remapped_rows_failure" not in f
    assert stats.samples == 17 and stats.mapped == 5


@needs_pages
def test_points_map_onto_a_batch() -> None:
    batch = SchemaMapper().to_batch(parse_exposition(exposition(L4), None, TS))
    assert not batch.rejected
    frame = batch.frames[Scope.GPU]
    assert frame.entities[0] == Entity.gpu("i-030791dc5a37cd257", 0)
    assert batch.samples == 9


_LABELS = 'gpu="{g}",UUID="GPU-x{g}",pci_bus_id="0000:0{g}:00.0",Hostname="h1"'


def _readings(points: list[Point]) -> list[Point]:
    return [p for p in points if p.measurement != "gpu_info"]


def _line(name: str, value: str, g: int = 0, extra: str = "") -> str:
    return f"{name}{{{_LABELS.format(g=g)}{extra}}} {value}\n"


def test_nvlink_per_link_totals_skipped_and_xid_reading() -> None:
    text = (
        "# TYPE DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L3 counter\n"
        + _line("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L3", "7")
        + _line("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L11", "2", g=1)
        + "# TYPE DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL counter\n"
        + _line("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "7")
        + _line("DCGM_FI_DEV_XID_ERRORS", "79")
        + _line("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", str(0x40 | 0x4))
        + _line("DCGM_FI_DEV_GPU_TEMP", "NaN")
    )
    stats = ParseStats()
    points = {(p.measurement, p.tags["gpu"], p.tags.get("link")): p
              for p in parse_exposition(text, None, TS, stats=stats)}
    assert points["nvlink", "0", "3"].fields == {"nvlink_crc_flit": 7}
    assert points["nvlink", "1", "11"].fields == {"nvlink_replay": 2}
    assert points["xid", "0", None].fields == {"code": 79}
    assert points["gpu", "0", None].fields == {"throttle_thermal": 1, "throttle_power": 1,
                                               "throttle_hw_slowdown": 0}
    assert stats.skipped == {"NVLink total over all links (the catalog keeps links apart)": 1,
                             "value is not finite": 1}
    assert not stats.unknown


def test_mig_instances_fold_into_the_gpu() -> None:
    mig = ',GPU_I_ID="{}",GPU_I_PROFILE="1g.10gb"'
    text = (_line("DCGM_FI_DEV_GPU_TEMP", "55", extra=mig.format(1))
            + _line("DCGM_FI_DEV_GPU_UTIL", "40", extra=mig.format(1))
            + _line("DCGM_FI_DEV_GPU_TEMP", "55", extra=mig.format(2)))
    stats = ParseStats()
    points = parse_exposition(text, None, TS, stats=stats)
    assert [(p.tags["gpu"], p.tags["mig"], p.fields) for p in _readings(points)] == [
        ("0", "1", {"gpu_temp": 55.0}), ("0", "2", {"gpu_temp": 55.0})]
    assert stats.skipped == {"gpu_util of a MIG instance (not the GPU's)": 1}
    batch = SchemaMapper().to_batch(points)
    assert not batch.rejected and len(batch.frames[Scope.GPU]) == 1  # one physical GPU
    # The instances carry their parent's labels: one identity, the board's.
    assert [p.fields for p in points if p.measurement == "gpu_info"] == [
        {"uuid": "GPU-x0", "pci_bus_id": "0000:00:00.0"}]
    assert batch.identity["h1:gpu0"].pci_bus_id == "00000000:00:00.0"


def test_garbage_is_an_error_and_non_dcgm_families_are_ignored() -> None:
    with pytest.raises(ExpositionError):
        parse_exposition("<html>502 Bad Gateway</html>\n", "h", TS)
    stats = ParseStats()
    assert parse_exposition("go_goroutines 12\n", "h", TS, stats=stats) == []
    assert stats.samples == 0


def test_field_map_covers_every_catalog_dcgm_spelling() -> None:
    names = FIELDS.names()
    assert "DCGM_FI_DEV_GPU_TEMP" in names
    assert "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L<n>" in names
    assert FIELDS.lookup("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL") is None
    assert FIELDS.is_link_total("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL")
    found = FIELDS.lookup("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L17")
    assert found is not None and found.link == 17
    assert [t.metric.name for t in found.targets] == ["nvlink_crc_data"]
