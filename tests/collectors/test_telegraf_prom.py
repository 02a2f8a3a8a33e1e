"""Telegraf's prometheus input scraping dcgm-exporter, both metric versions, through the schema
mapper: values land on the catalog, the last-Xid gauge becomes events only on change, and the node
is Telegraf's `host` before dcgm-exporter's `Hostname`, never a pod name."""

from __future__ import annotations

from collectors.catalog import CATALOG, Scope
from collectors.schema import SchemaMapper

NS = 1_700_000_000_000_000_000


# Telegraf on the GPU node (a DaemonSet with `[agent] hostname` set to the node's name) scraping
# the GPU operator's dcgm-exporter, whose Hostname is its own pod name (no NODE_NAME).
POD = "nvidia-dcgm-exporter-7x2kq"


def _v1(gpu: int, field: str, value: float, ts: int = NS, *, tags: str = f"Hostname={POD},host=n5"
        ) -> str:
    return f"{field},gpu={gpu},UUID=GPU-{gpu},{tags},modelName=H100 gauge={value} {ts}"


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
    # Telegraf's host, not the exporter's pod; Hostname where it is the only name
    assert keys == ["n5:gpu0", "n5:gpu1"]

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


def test_a_sample_named_only_by_a_pod_is_refused_with_the_reason() -> None:
    m = SchemaMapper()
    text = "\n".join([
        _v1(0, "DCGM_FI_DEV_GPU_TEMP", 41, tags=f"Hostname={POD}"),
        f"prometheus,gpu=1,Hostname={POD} DCGM_FI_DEV_POWER_USAGE=250.5,"
        f"DCGM_FI_DEV_GPU_TEMP=40 {NS}",
        f"prometheus,gpu=1,Hostname={POD} go_goroutines=12 {NS}",  # not a DCGM sample
        _v1(2, "DCGM_FI_DEV_GPU_TEMP", 42, tags="Hostname=gpu-node-b7k2x"),
    ])
    b = m.parse(text)
    assert [(r.line, r.reason) for r in b.rejected] == [
        (n, f"Hostname={POD} is a pod name of the nvidia-dcgm-exporter DaemonSet, not a node "
            "name: give the exporter its node's name (dcgm-exporter: NODE_NAME; Telegraf: "
            "[agent] hostname)") for n in (1, 2)]
    # A node whose name merely ends like a pod's is a node: only exporters' pods are refused.
    gpu = b.frames[Scope.GPU]
    assert [gpu.entities[int(r)].key for r in gpu.rows] == ["gpu-node-b7k2x:gpu2"]
    # The Xid gauge of a pod-named sample is refused too, and no baseline: the node's first
    # named reading is.
    xid = m.parse(_v1(0, "DCGM_FI_DEV_XID_ERRORS", 13, tags=f"Hostname={POD}"))
    assert len(xid.rejected) == 1 and xid.events.keys == []
    assert m.parse(_v1(0, "DCGM_FI_DEV_XID_ERRORS", 79, NS + 5 * 10**9)).events.keys == []
    assert m.parse(_v1(0, "DCGM_FI_DEV_XID_ERRORS", 48, NS + 10 * 10**9)).events.keys == [
        "n5:gpu0"]


def test_a_central_scraper_takes_hostname_first_and_still_passes_over_pods() -> None:
    m = SchemaMapper(node_name_from=("Hostname", "host"))
    b = m.parse("\n".join([
        _v1(0, "DCGM_FI_DEV_GPU_TEMP", 41, tags="Hostname=gpu-node-3,host=scraper"),
        _v1(1, "DCGM_FI_DEV_GPU_TEMP", 41, tags=f"Hostname={POD},host=scraper"),
    ]))
    gpu = b.frames[Scope.GPU]
    assert [gpu.entities[int(r)].key for r in gpu.rows] == ["gpu-node-3:gpu0", "scraper:gpu1"]
    assert b.rejected == []


def test_telegraf_own_pod_name_names_no_nvidia_smi_node() -> None:
    b = SchemaMapper(strict=False).parse(
        f"nvidia_smi,host=telegraf-ds-x7k2q,index=0 temperature_gpu=50i {NS}\n"
        f"nvidia_smi,host=gpu-node-3,index=0 temperature_gpu=51i {NS}\n")
    assert [(r.line, r.reason.split(" is ")[0]) for r in b.rejected] == [
        (1, "host=telegraf-ds-x7k2q")]
    gpu = b.frames[Scope.GPU]
    assert [gpu.entities[int(r)].key for r in gpu.rows] == ["gpu-node-3:gpu0"]
