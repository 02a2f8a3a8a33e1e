"""The chassis frames a BMC reports (issue 31): supplies, fans and the node's own sensors and
host error counters (docs/simulator.md, `chassis`).

Supplies share the node's draw (its GPUs at the job load plus the rest of the server) equally
among those delivering, and run warmer with the watts they deliver; fans follow the BMC's fan
curve, idle to load speed with the node's load (so every fan of a node changes speed together);
the inlet is the GPUs' inlet air, the exhaust warmer with load. Out of band, the BMC keeps
reporting while the node's in-band agent is down: a telemetry gap or reboot leaves these rows
alone; the host error counters (in band) reset when the node reboots.
"""

from __future__ import annotations

import numpy as np

from collectors.catalog import CATALOG, Kind, Scope
from models.simulator.config import BASE_STEP_S, SimConfig
from models.simulator.plan import ROW, ScopePlan
from models.simulator.render_common import (
    F64,
    Window,
    apply_intervals,
    drop_random,
    row_nan,
    stepped_counters,
)
from models.simulator.topology import Topology, rng_for

STREAM_CHASSIS = 700


def _cols(scope: Scope) -> dict[str, int]:
    return {m.name: i for i, m in enumerate(CATALOG.columns(scope))}


PSU, FAN, NODE = _cols(Scope.PSU), _cols(Scope.FAN), _cols(Scope.NODE)
NODE_COUNTERS = [i for i, m in enumerate(CATALOG.columns(Scope.NODE)) if m.kind is Kind.COUNTER]


class ChassisRenderer:
    def __init__(self, cfg: SimConfig, topo: Topology, plans: dict[Scope, ScopePlan],
                 inlet_off: F64) -> None:
        self.cfg, self.topo, self.plans = cfg, topo, plans
        self.inlet_off = inlet_off  # per node, the GPUs' (render_gpu)
        rng = rng_for(cfg.seed, STREAM_CHASSIS)
        self.fan_f = rng.uniform(0.97, 1.03, topo.size(Scope.FAN))  # unit-to-unit spread
        self.state = {j: np.zeros(topo.nodes) for j in NODE_COUNTERS}

    def render(self, bufs: dict[Scope, F64], load: F64, inlet: F64, win: Window,
               rng: np.random.Generator) -> None:
        """load: [T, nodes] mean node load; inlet: [T, nodes] inlet air in degC."""
        c, t_n = self.cfg.chassis, len(win.times)
        nf = 1.0 / np.sqrt(win.step / BASE_STEP_S)
        drop = self.cfg.benign.missing_sample_frac if self.cfg.benign.enabled else 0.0
        spec = self.cfg.fleet.spec

        n3 = bufs[Scope.NODE].reshape(len(NODE), t_n, self.topo.nodes)
        ivs = self.plans[Scope.NODE].intervals
        np.copyto(n3[NODE["inlet_temp_c"]], inlet)
        ex = n3[NODE["exhaust_temp_c"]]
        np.add(inlet, c.exhaust_rise_c, out=ex)
        ex += c.exhaust_load_rise_c * load
        for name in ("psu_redundant", "fan_redundant", "bmc_reachable"):
            n3[NODE[name]] = 1.0
            apply_intervals(n3[NODE[name]], ivs.get(name), win)
        stepped_counters(n3, self.plans[Scope.NODE], NODE_COUNTERS, self.state, win)
        row_nan(n3, ivs.get(ROW), win)
        drop_random(n3, drop, rng)

        per = self.topo.psus_per_node
        p3 = bufs[Scope.PSU].reshape(len(PSU), t_n, self.topo.size(Scope.PSU))
        ivs = self.plans[Scope.PSU].intervals
        for name in ("psu_health", "psu_state"):
            p3[PSU[name]] = 0.0
            apply_intervals(p3[PSU[name]], ivs.get(name), win)
        delivers = (p3[PSU["psu_state"]] == 0) & (p3[PSU["psu_health"]] < 2)
        count = delivers.reshape(t_n, self.topo.nodes, per).sum(axis=2)
        node_w = c.base_w + self.topo.gpus_per_node * (spec.idle_w + load * (
            spec.tdp_w - spec.idle_w))
        share = np.repeat(node_w / np.maximum(count, 1), per, axis=1)
        out_w = p3[PSU["psu_output_w"]]
        np.multiply(share, delivers, out=out_w)
        volts = p3[PSU["psu_input_v"]]
        volts[:] = c.input_v
        volts += rng.standard_normal(volts.shape) * (c.input_sd_v * nf)
        temp = p3[PSU["psu_temp_c"]]
        np.add(np.repeat(inlet, per, axis=1), c.psu_rise_c, out=temp)
        temp += c.psu_load_rise_c * out_w
        temp += rng.standard_normal(temp.shape) * (c.psu_temp_sd_c * nf)
        for name in ("psu_output_w", "psu_temp_c"):
            apply_intervals(p3[PSU[name]], ivs.get(name), win)
        row_nan(p3, ivs.get(ROW), win)
        drop_random(p3, drop, rng)

        per = self.topo.fans_per_node
        f3 = bufs[Scope.FAN].reshape(len(FAN), t_n, self.topo.size(Scope.FAN))
        ivs = self.plans[Scope.FAN].intervals
        rpm = f3[FAN["fan_rpm"]]
        np.multiply(np.repeat(load, per, axis=1), c.fan_load_rpm - c.fan_idle_rpm, out=rpm)
        rpm += c.fan_idle_rpm
        rpm *= self.fan_f
        rpm += rng.standard_normal(rpm.shape) * (c.fan_sd_rpm * nf)
        apply_intervals(rpm, ivs.get("fan_rpm"), win)
        np.clip(rpm, 0.0, c.fan_max_rpm, out=rpm)
        np.round(rpm, out=rpm)
        np.multiply(rpm, 100.0 / c.fan_max_rpm, out=f3[FAN["fan_pct"]])
        f3[FAN["fan_health"]] = 0.0
        apply_intervals(f3[FAN["fan_health"]], ivs.get("fan_health"), win)
        f3[FAN["fan_rpm_lower_critical"]] = c.fan_lower_critical_rpm
        row_nan(f3, ivs.get(ROW), win)
        drop_random(f3, drop, rng)
