"""Node and GPU detail: risk with its explanation, temperatures against the driver's own
thresholds, memory errors, NVLink errors per link, power and throttling, Xid events, and the
whole server beside the GPUs (service.grafana.chassis: supplies, fans, air, host errors, PCIe)."""

from __future__ import annotations

from collectors.catalog import Scope
from models.detectors.dynamic import DynamicConfig
from service.grafana import chassis
from service.grafana.common import (
    NODE,
    RISK_STEPS,
    action_annotation,
    alert_annotation,
    cluster_var,
    gpu_var,
    node_var,
    risk_table,
)
from service.grafana.contract import RATES, RISK, SAMPLES, XID, counters, metric
from service.grafana.panels import (
    Json,
    dashboard,
    override,
    row,
    state_timeline,
    table,
    target,
    timeseries,
)
from service.grafana.queries import col, lit, q, select

VARS = ("cluster", "node", "gpu")
GPU = SAMPLES[Scope.GPU]
GPU_RATE = RATES[Scope.GPU]
NVLINK = SAMPLES[Scope.NVLINK]
NVLINK_RATE = RATES[Scope.NVLINK]
_PER_GPU = "gpu$tag_gpu $col"


def _m(name: str) -> str:
    return metric(name, Scope.GPU).name


def _dashed(name_regex: str, color: str) -> Json:
    return override("byRegexp", name_regex, color={"mode": "fixed", "fixedColor": color},
                    custom__lineStyle={"fill": "dash", "dash": [10, 10]}, custom__lineWidth=2)


def _against_limits(title: str, value: str, limits: dict[str, str], *,
                    hold: float | None = None, description: str) -> Json:
    """A temperature per GPU with the driver's per-SKU limits as dashed lines (the lowest
    over the selected GPUs, which for one SKU is the limit itself)."""
    a = select(GPU, [col("mean", GPU.field(value))], variables=VARS, by=["gpu"])
    b = select(GPU, [col("min", GPU.field(lim)) for lim in limits], variables=VARS)
    steps = [(None, "transparent"), (hold, "purple")] if hold is not None else []
    return timeseries(title, [target(a, alias=_PER_GPU), target(b, "B", alias="$col")],
                      unit="celsius", description=description, steps=steps,
                      overrides=[_dashed(f"^{lim}$", c) for lim, c in limits.items()])


def _series(title: str, m: str, fields: list[str], fn: str, *, unit: str,
            description: str, per: tuple[str, ...] = ("gpu",), w: int = 12) -> Json:
    meas = GPU_RATE if m == "rate" else GPU
    query = select(meas, [col(fn, meas.field(f)) for f in fields], variables=VARS, by=per)
    return timeseries(title, [target(query, alias=_PER_GPU)], unit=unit, w=w,
                      description=description)


def _states(title: str, fields: list[str], description: str) -> Json:
    query = select(GPU, [col("max", GPU.field(f)) for f in fields], variables=VARS, by=["gpu"])
    return state_timeline(title, [target(query, alias=_PER_GPU)],
                          steps=[(None, "green"), (1, "red")], description=description)


# The sink writes a link when it moves and every 55 s (service.history.influx.sparse): with
# intervals of at least a minute (rounds up to 5 s apart), every interval holds a point of
# every reporting link, and its min or max is the min or max over all its rounds.
LINK_INTERVAL = "1m"


def _per_link(panel: Json) -> Json:
    panel["interval"] = LINK_INTERVAL
    return panel


def _nvlink_errors() -> list[Json]:
    """One panel per NVLink error counter of the catalog, a series per GPU link."""
    panels = []
    for m in counters(Scope.NVLINK):
        query = select(NVLINK_RATE, [col("max", NVLINK_RATE.field(m.name))], variables=VARS,
                       by=["gpu", "link"])
        panels.append(_per_link(timeseries(
            m.description, [target(query, alias="gpu$tag_gpu link$tag_link")], unit="short",
            w=12, h=7, minimum=0, description=f"{m.name}: per-second rate ({m.unit}/s), "
                                              "highest in each interval (a minute or more), "
                                              "per link.")))
    return panels


def _risk() -> Json:
    gpus = select(RISK, [col("max", RISK.field("risk"))], variables=VARS,
                  where=[f"{q('scope')} = {lit(str(Scope.GPU))}"], by=["gpu"])
    node = select(RISK, [col("max", RISK.field("risk"))], variables=("cluster", "node"),
                  where=[f"{q('scope')} = {lit('node')}"])
    return timeseries("Risk", [target(gpus, alias="gpu$tag_gpu"), target(node, "B", alias="node")],
                      unit="percentunit", minimum=0, steps=RISK_STEPS, w=12, h=9,
                      description="Fused risk per GPU and of the whole node; dashed lines "
                                  "are the alert levels' enter thresholds.")


def _xid() -> Json:
    query = select(XID, [q(XID.field("code")), q(XID.tag("gpu"))], variables=VARS,
                   bucket=False, tail="ORDER BY time DESC LIMIT 200")
    return table("Xid events", [target(query, table=True)], w=12, h=8,
                 description="Driver Xid errors, newest first.")


def build() -> Json:
    dyn = DynamicConfig()
    panels = [
        row("Risk"),
        _risk(),
        risk_table("Why: strongest signal per entity", ("cluster", "node"), w=12, h=9,
                   description="Every GPU, link, port and the node, by latest risk, with "
                               "the signal that drove it."),
        row("Thermal"),
        _against_limits("GPU temperature vs slowdown and shutdown", _m("gpu_temp"),
                        {_m("gpu_slowdown_temp"): "orange", _m("gpu_shutdown_temp"): "red"},
                        description="Core temperature per GPU; dashed: the driver's "
                                    "slowdown and shutdown thresholds."),
        _against_limits("HBM temperature vs maximum operating", _m("mem_temp"),
                        {_m("mem_max_temp"): "red"}, hold=dyn.hbm_temp_c,
                        description="HBM temperature per GPU; dashed red: the driver's "
                                    "maximum operating HBM temperature; purple: the "
                                    f"sustained-heat rule's {dyn.hbm_temp_c:g} °C."),
        row("Memory errors"),
        _series("ECC error rate", "rate",
                [_m("ecc_sbe_volatile"), _m("ecc_dbe_volatile"), _m("ecc_sram_correctable")],
                "max", unit="short", description="Per-second rates of correctable (SBE, "
                "SRAM) and uncorrectable (DBE) ECC errors, reset-aware."),
        _series("Retired pages and remapped rows", "samples",
                [_m("retired_pages_sbe"), _m("retired_pages_dbe"),
                 _m("remapped_rows_correctable"), _m("remapped_rows_uncorrectable")],
                "last", unit="short", description="Cumulative counts over each GPU's life."),
        _states("Pending retirement, pending remap, remap failure",
                [_m("retired_pages_pending"), _m("remapped_rows_pending"),
                 _m("remapped_rows_failure")],
                "Red while a retirement or remap waits for a reset, or a remap failed."),
        _xid(),
        row("NVLink"),
        *_nvlink_errors(),
        _per_link(state_timeline("NVLink link state", [target(
            select(NVLINK, [col("min", NVLINK.field(metric("nvlink_state", Scope.NVLINK).name))],
                   variables=VARS, by=["gpu", "link"]), alias="gpu$tag_gpu link$tag_link")],
            steps=[(None, "red"), (1, "green")], w=24, h=7,
            description="Red while a link is inactive (in intervals of a minute or more).")),
        row("Power, clocks and throttling"),
        _series("Power draw", "samples", [_m("power_draw")], "mean", unit="watt",
                description="Board power per GPU.", w=8),
        _series("SM clock", "samples", [_m("sm_clock")], "mean", unit="rotmhz",
                description="Current SM clock per GPU; a drop under load is throttling.", w=8),
        _series("PCIe replays", "rate", [_m("pcie_replay")], "max", unit="short", w=8,
                description="PCIe link-level replays per second."),
        _states("Throttling", [_m("throttle_thermal"), _m("throttle_power"),
                               _m("throttle_hw_slowdown")],
                "Red while thermal, power-cap or hardware slowdown holds clocks down."),
        _series("GPU utilization", "samples", [_m("gpu_util")], "mean", unit="percent",
                description="Share of time a kernel ran; idle GPUs run cooler."),
        *chassis.panels(),
    ]
    return dashboard(NODE, "gpuhealth: node and GPU detail",
                     "One node's GPUs: risk and why, thermal, memory errors, NVLink, power; its "
                     "supplies, fans, air, host errors and PCIe links.",
                     panels, variables=[cluster_var(), node_var(GPU), gpu_var()],
                     annotations=[alert_annotation(("cluster", "node")),
                                  action_annotation(("cluster", "node"))])

