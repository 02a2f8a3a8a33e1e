"""Telegraf's prometheus input scraping dcgm-exporter, both metric versions, through the schema
mapper: values land on the catalog and the last-Xid gauge becomes events only on change."""

from __future__ import annotations

from collectors.catalog import CATALOG, Scope
from collectors.schema import SchemaMapper

NS = 1_700_000_000_000_000_000


def _v1(gpu: int, field: str, value: float, ts: int = NS) -> str:
    return (f"{field},gpu={gpu},UUID=GPU-{gpu},Hostname=n5,host=scraper,modelName=H100 "
            f"gauge={value} {ts}")


def test_both_metric_versions_map_onto_the_catalog() -> None:
    m = SchemaMapper()
    text = "\n".join([
        _v1(0, "DCGM_FI_DEV_GPU_TEMP", 41),
        _v1(0, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 0x40 | 0x4),
        f"prometheus,gpu=1,Hostname=n5 DCGM_FI_DEV_POWER_USAGE=250.5,"
        f"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L3=7,DCGM_FI_DEV_FB_USED=3 {NS}",
    ])
    b = m.parse(text)
    assert b.rejected == []
    gpu = b.frames[Scope.GPU]
    keys = [gpu.entities[int(r)].key for r in gpu.rows]
    assert keys == ["n5:gpu0", "n5:gpu1"]  # the GPU node's Hostname, not the scraper's host

    def cell(row: int, metric: str) -> float:
        return float(gpu.values[row, CATALOG.column(Scope.GPU, metric)])

    assert cell(0, "gpu_temp") == 41
    assert (cell(0, "throttle_thermal"), cell(0, "throttle_power"),
            cell(0, "throttle_hw_slowdown")) == (1, 1, 0)
    assert cell(1, "power_draw") == 250.5
    nvl = b.frames[Scope.NVLINK]
    assert nvl.entities[int(nvl.rows[0])].key == "n5:gpu1:nvlink3"
    assert nvl.values[0, CATALOG.column(Scope.NVLINK, "nvlink_crc_flit")] == 7


def test_the_last_xid_gauge_is_an_event_only_when_it_changes() -> None:
    m = SchemaMapper()
    codes = [13, 13, 79, 79, 0, 48]
    events = []
    for i, code in enumerate(codes):
        b = m.parse(_v1(2, "DCGM_FI_DEV_XID_ERRORS", code, NS + i * 5_000_000_000))
        events += list(zip(b.events.keys, b.events.values, strict=True))
    # 13 was there before we looked (baseline); 79 is new; 0 means none; 48 is new again.
    assert events == [("n5:gpu2", 79.0), ("n5:gpu2", 48.0)]
