"""The node dashboard's whole-server panels (issue 31): power supplies (health, state, output
watts, input volts), fans against their lower critical speed, inlet and exhaust air,
redundancy and BMC reachability, host memory errors and machine checks, the BMC event log,
and each GPU's PCIe link (width against its maximum, generation, AER errors) and readability.
Every field comes from the storage contract, so a renamed metric fails generation."""

from __future__ import annotations

from collectors.catalog import Scope
from models.detectors.chassis import ChassisRuleConfig
from service.grafana.contract import EVENTS, RATES, SAMPLES, metric
from service.grafana.panels import (
    Json,
    override,
    row,
    state_timeline,
    table,
    target,
    timeseries,
    value_map,
)
from service.grafana.queries import col, q, select

NODE_VARS = ("cluster", "node")
GPU_VARS = ("cluster", "node", "gpu")
PSU, FAN, NODE = SAMPLES[Scope.PSU], SAMPLES[Scope.FAN], SAMPLES[Scope.NODE]
NODE_RATE, GPU, GPU_RATE = RATES[Scope.NODE], SAMPLES[Scope.GPU], RATES[Scope.GPU]
SEL = EVENTS["sel"]

# The wire schema's enums (collectors/catalog.py, docs/metrics.md), in words and colours.
HEALTH_MAP = value_map({0: ("OK", "green"), 1: ("Warning", "yellow"), 2: ("Critical", "red")})
PSU_STATE_MAP = value_map({0: ("delivering", "green"), 1: ("standby by design", "blue"),
                           2: ("absent", "text"), 3: ("not delivering", "red")})
UNREADABLE_MAP = value_map({0: ("readable", "green"), 1: ("Unknown Error", "red"),
                            2: ("requires reset", "red"), 3: ("lost", "red"),
                            4: ("nvidia-smi timed out", "red"), 5: ("not found", "red")})
BOOL_MAP = value_map({0: ("lost", "red"), 1: ("ok", "green")})


def _f(m: str, scope: Scope) -> str:
    return metric(m, scope).name


def _dashed(name: str, color: str) -> Json:
    return override("byName", name, color={"mode": "fixed", "fixedColor": color},
                    custom__lineStyle={"fill": "dash", "dash": [10, 10]}, custom__lineWidth=2)


def _psu_states(title: str, field: str, mappings: list[Json], steps: list[tuple[float | None,
                                                                                 str]],
                description: str) -> Json:
    query = select(PSU, [col("max", PSU.field(_f(field, Scope.PSU)))], variables=NODE_VARS,
                   by=["psu"])
    return state_timeline(title, [target(query, alias="supply $tag_psu")], steps=steps,
                          mappings=mappings, w=12, h=6, description=description)


def _psu_series(title: str, field: str, fn: str, unit: str, description: str) -> Json:
    query = select(PSU, [col(fn, PSU.field(_f(field, Scope.PSU)))], variables=NODE_VARS,
                   by=["psu"])
    return timeseries(title, [target(query, alias="supply $tag_psu")], unit=unit, w=12, h=7,
                      description=description)


def _fans() -> Json:
    rpm = select(FAN, [col("mean", FAN.field(_f("fan_rpm", Scope.FAN)))], variables=NODE_VARS,
                 by=["fan"])
    floor = select(FAN, [col("max", FAN.field(_f("fan_rpm_lower_critical", Scope.FAN)),
                             "lower critical")], variables=NODE_VARS)
    return timeseries("Fan speed vs lower critical", [target(rpm, alias="fan $tag_fan"),
                                                      target(floor, "B", alias="$col")],
                      unit="rotrpm", w=12, h=8, minimum=0, overrides=[_dashed("lower critical",
                                                                              "red")],
                      description="Each chassis fan's speed; dashed red: the BMC's lower "
                                  "critical threshold (the highest over the node's fans). A "
                                  "fan under it, or sliding away from its peers, alerts "
                                  "(FanFailureRisk).")


def _fan_health() -> Json:
    query = select(FAN, [col("max", FAN.field(_f("fan_health", Scope.FAN)))],
                   variables=NODE_VARS, by=["fan"])
    return state_timeline("Fan health", [target(query, alias="fan $tag_fan")],
                          steps=[(None, "green"), (1, "yellow"), (2, "red")],
                          mappings=HEALTH_MAP, w=12, h=8,
                          description="Each fan's health as its BMC reports it.")


def _air() -> Json:
    cfg = ChassisRuleConfig()
    query = select(NODE, [col("mean", NODE.field(_f(m, Scope.NODE)))
                          for m in ("inlet_temp_c", "exhaust_temp_c")], variables=NODE_VARS)
    return timeseries("Inlet and exhaust air", [target(query, alias="$col")], unit="celsius",
                      w=12, h=7, steps=[(None, "transparent"), (cfg.inlet_limit_c, "red")],
                      description="The chassis inlet and exhaust temperatures; dashed red: the "
                                  f"inlet rule's {cfg.inlet_limit_c:g} °C (held "
                                  f"{cfg.inlet_hold_s:g} s: NodeAtRisk).")


def _redundancy() -> Json:
    query = select(NODE, [col("min", NODE.field(_f(m, Scope.NODE)))
                          for m in ("psu_redundant", "fan_redundant", "bmc_reachable")],
                   variables=NODE_VARS)
    return state_timeline("Redundancy and BMC", [target(query, alias="$col")],
                          steps=[(None, "red"), (1, "green")], mappings=BOOL_MAP, w=12, h=7,
                          description="Red while the supplies or the fans have lost their "
                                      "redundancy, or the BMC did not answer a poll.")


def _host_errors() -> Json:
    query = select(NODE_RATE, [col("max", NODE_RATE.field(m.name), scale=60.0)
                               for m in (metric("edac_ce_total", Scope.NODE),
                                         metric("edac_ue_total", Scope.NODE),
                                         metric("mce_total", Scope.NODE))],
                   variables=NODE_VARS)
    return timeseries("Host memory errors and machine checks", [target(query, alias="$col")],
                      unit="short", w=12, h=7, minimum=0,
                      description="Corrected and uncorrected host memory errors (EDAC) and CPU "
                                  "machine checks per minute, highest in each interval, "
                                  "reset-aware.")


def _sel() -> Json:
    query = select(SEL, [q(SEL.field("code"))], variables=NODE_VARS, bucket=False,
                   tail="ORDER BY time DESC LIMIT 200")
    return table("BMC event log entries", [target(query, table=True)], w=12, h=7,
                 overrides=[override("byName", "code", mappings=value_map(
                     {1: ("warning", "yellow"), 2: ("critical", "red")}),
                     custom__cellOptions={"type": "color-text"})],
                 description="New entries of the BMC's event log (SEL), newest first, by "
                             "severity.")


def _pcie(title: str, current: str, maximum: str, fn: str, description: str) -> Json:
    now = select(GPU, [col(fn, GPU.field(_f(current, Scope.GPU)))], variables=GPU_VARS,
                 by=["gpu"])
    top = select(GPU, [col("max", GPU.field(_f(maximum, Scope.GPU)), "maximum")],
                 variables=GPU_VARS)
    return timeseries(title, [target(now, alias="gpu$tag_gpu"), target(top, "B", alias="$col")],
                      unit="short", w=12, h=7, minimum=0,
                      overrides=[_dashed("maximum", "green")], description=description)


def _aer() -> Json:
    fields = ("pcie_aer_correctable_total", "pcie_aer_nonfatal_total", "pcie_aer_fatal_total")
    query = select(GPU_RATE, [col("max", GPU_RATE.field(_f(f, Scope.GPU)), scale=60.0)
                              for f in fields], variables=GPU_VARS, by=["gpu"])
    return timeseries("PCIe AER errors", [target(query, alias="gpu$tag_gpu $col")], unit="short",
                      w=12, h=7, minimum=0,
                      description="PCIe Advanced Error Reporting counts per minute "
                                  "(correctable, non-fatal, fatal), highest in each interval; "
                                  "a correctable burst often comes before a width drop.")


def _unreadable() -> Json:
    query = select(GPU, [col("max", GPU.field(_f("gpu_unreadable", Scope.GPU)))],
                   variables=GPU_VARS, by=["gpu"])
    return state_timeline("GPU readability", [target(query, alias="gpu$tag_gpu")],
                          steps=[(None, "green"), (1, "red")], mappings=UNREADABLE_MAP, w=12,
                          h=7, description="Red while nvidia-smi or NVML cannot read the GPU "
                                           "(Unknown Error, requires reset, lost, timed out, "
                                           "not found): GpuFailureRisk.")


def panels() -> list[Json]:
    return [
        row("Power and cooling"),
        _psu_states("Power supply health", "psu_health", HEALTH_MAP,
                    [(None, "green"), (1, "yellow"), (2, "red")],
                    "Each supply's health as its BMC reports it (Redfish Status.Health, IPMI "
                    "sensor state)."),
        _psu_states("Power supply state", "psu_state", PSU_STATE_MAP,
                    [(None, "green"), (1, "blue"), (2, "text"), (3, "red")],
                    "Delivering, a spare in standby by design, absent, or not delivering "
                    "(PsuFailureRisk)."),
        _psu_series("Power supply output", "psu_output_w", "mean", "watt",
                    "Watts each supply delivers; a supply at 0 W that is not a spare has "
                    "failed."),
        _psu_series("Power supply input voltage", "psu_input_v", "min", "volt",
                    "Lowest line input voltage of each supply in each interval."),
        _fans(),
        _fan_health(),
        _air(),
        _redundancy(),
        _host_errors(),
        _sel(),
        row("PCIe links"),
        _pcie("GPU PCIe link width vs maximum", "pcie_link_width", "pcie_link_width_max", "min",
              "Lanes each GPU's link trained at, lowest in each interval; dashed green: the "
              "widest the GPUs support. A link narrower than its maximum is a fault."),
        _pcie("GPU PCIe generation vs maximum", "pcie_link_gen", "pcie_link_gen_max", "mean",
              "PCIe generation per GPU; GPUs lower it at idle to save power, so a drop here "
              "with the width intact is not a fault."),
        _aer(),
        _unreadable(),
    ]
