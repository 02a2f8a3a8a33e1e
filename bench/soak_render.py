"""The soak fleet's readings in the shapes real tools print them: nvidia-smi `--query-gpu` CSV
and `-q -x` XML (DTD v12 layout), a dcgm-exporter page, Telegraf's `nvidia_smi` and
`infiniband` lines, and kernel-log Xid lines in `dmesg --time-format iso` form.

Standard library only: the fake nvidia-smi imports this module on every call, and a heavy
import would make each call slower than the real tool.

A GPU's readings are a flat dict (see soak_fleet.GpuState.as_dict); `lost` GPUs (fallen off the
bus) keep their place in the XML with unreadable values, as nvidia-smi prints them, and are
left out of the CSV and the exporter page.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Gpu = Mapping[str, Any]

# --query-gpu field -> how to print it from a GPU's readings (nounits form).
QUERY: dict[str, str] = {
    "index": "index", "uuid": "uuid", "name": "name", "pci.bus_id": "bus_id",
    "temperature.gpu": "temp", "temperature.memory": "mem_temp", "power.draw": "power",
    "clocks.current.sm": "sm_clock", "utilization.gpu": "util",
    "clocks_throttle_reasons.hw_thermal_slowdown": "thr_thermal",
    "clocks_throttle_reasons.sw_power_cap": "thr_power",
    "clocks_throttle_reasons.hw_slowdown": "thr_hw",
    "ecc.errors.corrected.volatile.total": "sbe_vol",
    "ecc.errors.uncorrected.volatile.total": "dbe_vol",
    "ecc.errors.corrected.aggregate.total": "sbe_agg",
    "ecc.errors.uncorrected.aggregate.total": "dbe_agg",
    "pcie.link.gen.current": "pcie_gen", "pcie.link.gen.max": "pcie_gen_max",
    "pcie.link.width.current": "pcie_width", "pcie.link.width.max": "pcie_width_max",
    "serial": "serial", "vbios_version": "vbios", "driver_version": "driver",
}
# PCIe link readings a GPU's dict may leave out: a healthy x16 Gen 4 link.
_LINK = {"pcie_gen": 4, "pcie_gen_max": 4, "pcie_width": 16, "pcie_width_max": 16,
         # and identity a GPU's dict leaves out (the fleet's driver, soak_fleet)
         "serial": "[N/A]", "vbios": "96.00.89.00.01", "driver": "550.54.15"}
_UNITS = {"temp": " C", "mem_temp": " C", "power": " W", "sm_clock": " MHz", "util": " %"}
_ACTIVE = {"thr_thermal", "thr_power", "thr_hw"}


def _cell(g: Gpu, key: str, units: bool) -> str:
    v = g[key] if key in g or key not in _LINK else _LINK[key]
    if key in _ACTIVE:
        return "Active" if v else "Not Active"
    if key in ("temp", "mem_temp"):
        text = f"{v:.0f}"  # nvidia-smi prints whole degrees
    else:
        text = f"{v:.2f}" if isinstance(v, float) else str(v)
    return text + (_UNITS.get(key, "") if units else "")


def query_csv(gpus: Sequence[Gpu], fields: Sequence[str], *, header: bool,
              units: bool) -> str:
    """The CSV nvidia-smi prints; raises KeyError naming a field it does not know."""
    for f in fields:
        if f not in QUERY:
            raise KeyError(f)
    out = []
    if header:
        out.append(", ".join(f + (" [unit]" if units and QUERY[f] in _UNITS else "")
                             for f in fields))
    for g in gpus:
        if not g["lost"]:
            out.append(", ".join(_cell(g, QUERY[f], units) for f in fields))
    return "\n".join(out) + "\n"


def _yn(v: object) -> str:
    return "Yes" if v else "No"


def _gpu_xml(g: Gpu) -> str:
    if g["lost"]:
        bad = "Unknown Error"
        return (f'    <gpu id="{g["bus_id"]}">\n        <product_name>{bad}</product_name>\n'
                f"        <uuid>{bad}</uuid>\n        <temperature>\n"
                f"            <gpu_temp>{bad}</gpu_temp>\n        </temperature>\n    </gpu>\n")
    act = {k: "Active" if g[k] else "Not Active" for k in _ACTIVE}
    return f"""    <gpu id="{g["bus_id"]}">
        <product_name>{g["name"]}</product_name>
        <product_architecture>Hopper</product_architecture>
        <serial>{g.get("serial", "N/A")}</serial>
        <uuid>{g["uuid"]}</uuid>
        <pci>
            <pci_bus_id>{g["bus_id"]}</pci_bus_id>
            <replay_counter>{g["pcie_replay"]}</replay_counter>
            <replay_rollover_counter>0</replay_rollover_counter>
        </pci>
        <clocks_event_reasons>
            <clocks_event_reason_gpu_idle>Not Active</clocks_event_reason_gpu_idle>
            <clocks_event_reason_sw_power_cap>{act["thr_power"]}</clocks_event_reason_sw_power_cap>
            <clocks_event_reason_hw_slowdown>{act["thr_hw"]}</clocks_event_reason_hw_slowdown>
            <clocks_event_reason_hw_thermal_slowdown>{act["thr_thermal"]}</clocks_event_reason_hw_thermal_slowdown>
        </clocks_event_reasons>
        <utilization>
            <gpu_util>{g["util"]} %</gpu_util>
            <memory_util>{g["util"] // 2} %</memory_util>
        </utilization>
        <ecc_errors>
            <volatile>
                <sram_correctable>0</sram_correctable>
                <sram_uncorrectable>0</sram_uncorrectable>
                <dram_correctable>{g["sbe_vol"]}</dram_correctable>
                <dram_uncorrectable>{g["dbe_vol"]}</dram_uncorrectable>
            </volatile>
            <aggregate>
                <sram_correctable>0</sram_correctable>
                <sram_uncorrectable>0</sram_uncorrectable>
                <dram_correctable>{g["sbe_agg"]}</dram_correctable>
                <dram_uncorrectable>{g["dbe_agg"]}</dram_uncorrectable>
            </aggregate>
        </ecc_errors>
        <retired_pages>
            <multiple_single_bit_retirement>
                <retired_count>N/A</retired_count>
            </multiple_single_bit_retirement>
            <double_bit_retirement>
                <retired_count>N/A</retired_count>
            </double_bit_retirement>
            <pending_blacklist>N/A</pending_blacklist>
            <pending_retirement>N/A</pending_retirement>
        </retired_pages>
        <remapped_rows>
            <remapped_row_corr>{g["remap_corr"]}</remapped_row_corr>
            <remapped_row_unc>{g["remap_unc"]}</remapped_row_unc>
            <remapped_row_pending>{_yn(g["remap_pending"])}</remapped_row_pending>
            <remapped_row_failure>{_yn(g["remap_failure"])}</remapped_row_failure>
        </remapped_rows>
        <temperature>
            <gpu_temp>{g["temp"]:.0f} C</gpu_temp>
            <gpu_temp_tlimit>{87 - g["temp"]:.0f} C</gpu_temp_tlimit>
            <gpu_temp_max_threshold>{g["shut_temp"]:.0f} C</gpu_temp_max_threshold>
            <gpu_temp_slow_threshold>{g["slow_temp"]:.0f} C</gpu_temp_slow_threshold>
            <gpu_temp_max_gpu_threshold>87 C</gpu_temp_max_gpu_threshold>
            <memory_temp>{g["mem_temp"]:.0f} C</memory_temp>
            <gpu_temp_max_mem_threshold>95 C</gpu_temp_max_mem_threshold>
        </temperature>
        <gpu_power_readings>
            <power_state>P0</power_state>
            <power_draw>{g["power"]:.2f} W</power_draw>
            <current_power_limit>700.00 W</current_power_limit>
        </gpu_power_readings>
        <clocks>
            <graphics_clock>{g["sm_clock"]} MHz</graphics_clock>
            <sm_clock>{g["sm_clock"]} MHz</sm_clock>
            <mem_clock>2619 MHz</mem_clock>
        </clocks>
    </gpu>
"""


def query_xml(gpus: Sequence[Gpu], driver: str, now: float) -> str:
    stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(now))
    head = f"""<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
    <timestamp>{stamp}</timestamp>
    <driver_version>{driver}</driver_version>
    <cuda_version>12.4</cuda_version>
    <attached_gpus>{len(gpus)}</attached_gpus>
"""
    return head + "".join(_gpu_xml(g) for g in gpus) + "</nvidia_smi_log>\n"


# ---- dcgm-exporter --------------------------------------------------------------------------

_DCGM: tuple[tuple[str, str, str], ...] = (  # field, type, reading
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "sm_clock"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "temp"),
    ("DCGM_FI_DEV_SLOWDOWN_TEMP", "gauge", "slow_temp"),
    ("DCGM_FI_DEV_SHUTDOWN_TEMP", "gauge", "shut_temp"),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "throttle_mask"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "mem_temp"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "power"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "util"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "fb_used"),  # not in the catalog: ignored, as in life
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "pcie_replay"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "last_xid"),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "sbe_vol"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "dbe_vol"),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "sbe_agg"),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "dbe_agg"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "remap_corr"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "remap_unc"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "remap_failure"),
)
_NVL = ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")


def dcgm_page(host: str, gpus: Sequence[Gpu], links: int) -> str:
    """A dcgm-exporter page; `links` per-link NVLink counters per GPU (0 until they appear)."""
    live = [g for g in gpus if not g["lost"]]
    out: list[str] = []

    def labels(g: Gpu) -> str:
        return (f'gpu="{g["index"]}",UUID="{g["uuid"]}",pci_bus_id="{g["bus_id"]}",'
                f'device="nvidia{g["index"]}",modelName="{g["name"]}",Hostname="{host}"')

    for name, kind, key in _DCGM:
        out.append(f"# HELP {name} {name}.")
        out.append(f"# TYPE {name} {kind}")
        out += [f"{name}{{{labels(g)}}} {g[key]}" for g in live]
    for err in _NVL:
        for link in range(links):
            name = f"DCGM_FI_DEV_NVLINK_{err}_ERROR_COUNT_L{link}"
            out.append(f"# HELP {name} NVLink {err} errors on link {link}.")
            out.append(f"# TYPE {name} counter")
            out += [f"{name}{{{labels(g)}}} {g['nvl'][err][link]}" for g in live]
    return "\n".join(out) + "\n"


# ---- Telegraf -------------------------------------------------------------------------------

def _esc(tag: str) -> str:
    return tag.replace(" ", "\\ ").replace(",", "\\,").replace("=", "\\=")


def telegraf_gpu(host: str, g: Gpu, ts_ns: int) -> str:
    """Telegraf's nvidia_smi line, schema v12 (5xx drivers): catalog fields beside many it
    does not map (memory, fans, clocks, driver version as a string)."""
    tags = (f"nvidia_smi,arch=Hopper,compute_mode=Default,host={host},index={g['index']},"
            f"name={_esc(str(g['name']))},pstate=P0,uuid={g['uuid']}")
    fields = (f"clocks_current_graphics={g['sm_clock']}i,clocks_current_memory=2619i,"
              f"clocks_current_sm={g['sm_clock']}i,clocks_current_video=1755i,"
              f'driver_version="550.54.15",encoder_stats_average_fps=0i,fan_speed=0i,'
              f"memory_free=81000i,memory_total=81559i,memory_used={g['fb_used']}i,"
              f"pcie_link_gen_current=5i,pcie_link_width_current=16i,"
              f"power_draw={g['power']:.2f},temperature_gpu={g['temp']:.0f}i,"
              f"utilization_gpu={g['util']}i,utilization_memory={g['util'] // 2}i,"
              f'serial="{g.get("serial", "[N/A]")}"')
    return f"{tags} {fields} {ts_ns}"


IB_TELEGRAF = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
               "local_link_integrity_errors", "excessive_buffer_overrun_errors",
               "port_rcv_data", "port_xmit_data")


def telegraf_ib(host: str, device: str, port: int, counters: Mapping[str, int],
                ts_ns: int) -> str:
    """Telegraf's infiniband line: every counter file as a field, no state, no rate."""
    extra = {"VL15_dropped": 0, "multicast_rcv_packets": 12, "multicast_xmit_packets": 9,
             "port_rcv_packets": counters["port_rcv_data"] // 64,
             "port_xmit_packets": counters["port_xmit_data"] // 64}
    items = {**{k: counters[k] for k in IB_TELEGRAF}, **extra}
    body = ",".join(f"{k}={v}i" for k, v in sorted(items.items()))
    return f"infiniband,device={device},host={host},port={port} {body} {ts_ns}"


# ---- kernel log -----------------------------------------------------------------------------

def _iso(ts: float) -> str:
    frac = round((ts - math.floor(ts)) * 1e6) % 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(math.floor(ts))) + f",{frac:06d}+00:00"


def xid_line(ts: float, bus_id: str, code: int, text: str) -> str:
    """`dmesg --time-format iso` form; the bus id as the driver prints it (0000:38:00)."""
    short = bus_id[4:-2] if len(bus_id) == 16 else bus_id
    return (f"{_iso(ts)} NVRM: Xid (PCI:{short}): {code}, pid='<unknown>', name=<unknown>, "
            f"{text}")


def noise_lines(ts: float, n: int) -> Iterable[str]:
    """Kernel chatter that is not an Xid: the log grows whether or not GPUs fail."""
    msgs = ("mlx5_core 0000:0c:00.0: mlx5_pcie_event:301: PCIe slot advertised sufficient "
            "power (27W).", "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected "
            "invalid context, skipping further processing",
            "audit: type=1400 audit(0.0:1): apparmor=\"STATUS\" operation=\"profile_load\"")
    for i in range(n):
        yield f"{_iso(ts)} {msgs[i % len(msgs)]}"
