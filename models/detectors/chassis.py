"""Hard rules for the node's chassis and host: its power supplies and fans (from the BMC), its
inlet temperature, host memory and NVSwitch errors. Each fires on what the BMC or the kernel
says now and clears with the repair, as the GPU's hard rules do (models/detectors/hard.py).

Levels (the alert policy's enter thresholds, 0.3 / 0.6 / 0.9): a rule at risk 1.0 pages at
once (level 3); one at LEVEL2_RISK is a warning (level 2) once it holds for the policy's
for-duration: fix at the next job boundary, never a drain (service.remediation drains on level 3
only). What each rule says is in the runbooks (PsuFailureRisk, FanFailureRisk, NodeAtRisk)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from collectors.catalog import Scope
from collectors.kernel_log.sxid_catalog import SXID_CATALOG, Category
from models.detectors.chassis_trend import ChassisTrends
from models.detectors.diagnostic import diag_findings
from models.detectors.findings import F64, Finding, fired, sustained
from models.detectors.view import FleetView, ScopeView, recent_sum
from models.detectors.xid import FATAL_RESET_RISK

LEVEL2_RISK = FATAL_RESET_RISK  # 0.7: a warning, under the page's 0.9
# psu_state (collectors/catalog.py): 0 delivering, 1 standby by design, 2 absent, 3 not
# delivering and not by design. psu_health / fan_health: 0 OK, 1 Warning, 2 Critical.
ENABLED, STANDBY, ABSENT, OFF = 0, 1, 2, 3
CRITICAL = 2

# NVSwitch SXids, after NVIDIA's Fabric Manager user guide (DU-09883-001 v1.3, appendix D: the
# data is collectors/kernel_log/sxid_catalog.py) as GPUd lists it: "always fatal"
# (D.6: the whole fabric is down until the host restarts) and 10003 (D.7, "if it occurs, it is
# fatal to the fabric") page; the single-bit ECC errors the switch corrects itself and 22013
# ("can be safely ignored") say nothing; any other SXid (the potentially fatal ones of D.5, a
# stalled port) is a warning: reset the fabric at the next job boundary.
SXID_FATAL = frozenset({10003, *(c for c, e in SXID_CATALOG.items()
                              if e.category is Category.ALWAYS_FATAL)})
SXID_IGNORED = frozenset({11012, 11021, 11022, 11023, 12021, 12023, 15008, 15011, 19049, 19055,
                          19057, 19059, 19062, 19065, 19068, 19071, 24001, 24002, 24003, 22013})


def sxid_risk(code: int) -> float:
    if code in SXID_FATAL:
        return 1.0
    if code in SXID_IGNORED:
        return 0.0
    return LEVEL2_RISK


@dataclass(frozen=True, slots=True)
class ChassisRuleConfig:
    # ASHRAE TC 9.9 "Thermal Guidelines for Data Processing Environments" (5th ed., 2021):
    # class A2 equipment is rated for 10-35 degC inlet air (A3 to 40 degC); air at the node's
    # inlet sensor over 40 degC is beyond what any A2 server is specified for, 5 degC of margin
    # for sensors that read a little above the room.
    inlet_limit_c: float = 40.0
    inlet_hold_s: float = 120.0  # a door opened, a CRAC switching over: not a fault
    fan_readings: int = 2  # a fan under its threshold this many readings in a row
    ue_hold_s: float = 3600.0  # an uncorrectable host memory error holds its risk this long
    sxid_hold_s: float = 3600.0  # as an Xid (HardRuleConfig.xid_hold_s)
    # A failed diagnostic holds until a later run passes, or this long (a week: the node is
    # drained meanwhile, and a repair is followed by a gate run that clears it).
    diag_hold_s: float = 7 * 86400.0


class ChassisRules:
    name = "chassis"

    def __init__(self, config: ChassisRuleConfig | None = None) -> None:
        self.c = config or ChassisRuleConfig()
        self.trends = ChassisTrends()  # the predictive ones (models/detectors/chassis_trend.py)

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        psu, fan, node = view.scope(Scope.PSU), view.scope(Scope.FAN), view.scope(Scope.NODE)
        return [self._psu(psu), self._fan(fan), *self.trends.findings(psu, fan),
                *self._node(view, node, now)]

    def _psu(self, p: ScopeView) -> Finding:
        """A supply that failed (Critical health, or not delivering when it is no spare): a
        warning while another supply of its node delivers, a page when none does. A spare in
        standby by design and an empty slot never fire."""
        health, state = p.latest("psu_health"), p.latest("psu_state")
        with np.errstate(invalid="ignore"):
            by_design = (state == STANDBY) | (state == ABSENT)
            failed = ~by_design & ((health == CRITICAL) | (state == OFF))
            # Delivering: enabled and not Critical; a BMC that gives health alone is believed.
            delivers = ((state == ENABLED) | np.isnan(state)) & (health < CRITICAL)
        nodes = np.asarray(p.node_of[: len(p)], np.int64)
        ok = nodes >= 0
        width = int(nodes.max()) + 1 if ok.any() else 0
        per_node = np.bincount(nodes[ok], weights=delivers[ok], minlength=width)
        others = np.zeros(len(p))
        others[ok] = per_node[nodes[ok]] - delivers[ok]
        risk = np.where(failed, np.where(others > 0, LEVEL2_RISK, 1.0), 0.0).astype(np.float32)
        return Finding("psu_failed", Scope.PSU, risk, others, 1.0,
                       "power supply failed or not delivering (not a spare by design); value: "
                       "the node's other supplies still delivering (0: none, page)", hard=True)

    def _fan(self, f: ScopeView) -> Finding:
        """A fan Critical, or under its lower critical threshold, at each of its last
        `fan_readings` readings (a BMC reads every poll, not every step)."""
        k = self.c.fan_readings
        n = f.raw_length
        rpm = f.window("fan_rpm", n).astype(np.float64)
        health = f.window("fan_health", n).astype(np.float64)
        limit = f.latest("fan_rpm_lower_critical")
        with np.errstate(invalid="ignore"):
            bad = (health == CRITICAL) | (rpm < limit[:, None])
        seen = ~np.isnan(rpm) | ~np.isnan(health)
        # The newest k readings: the steps with a reading, counted from the newest back.
        back = np.cumsum(seen[:, ::-1], axis=1)[:, ::-1]
        last = seen & (back <= k)
        held = (last.sum(axis=1) >= k) & np.all(bad | ~last, axis=1)
        value = f.latest("fan_rpm")
        return Finding("fan_failed", Scope.FAN, np.where(held, LEVEL2_RISK, 0.0).astype(
                           np.float32), value, float(np.nanmedian(limit)) if np.isfinite(
                           limit).any() else math.nan,
                       f"fan Critical or below its lower critical speed (rpm) for {k} readings",
                       hard=True)

    def _node(self, view: FleetView, g: ScopeView, now: float) -> list[Finding]:
        c = self.c
        n = max(1, math.ceil(c.inlet_hold_s / g.step_s))
        inlet = g.window("inlet_temp_c", n).astype(np.float64)
        seen = ~np.isnan(inlet)
        with np.errstate(invalid="ignore"):
            hot = sustained((inlet > c.inlet_limit_c) & seen, seen)
            lost = g.latest("psu_redundant") == 0
        # Raw steps show a new error at once; the minute tier holds it for the hour.
        ue = np.fmax(recent_sum(g, "edac_ue_total", g.raw_length * g.step_s),
                     recent_sum(g, "edac_ue_total", c.ue_hold_s))
        return [
            Finding("inlet_temp_high", Scope.NODE, np.where(hot, LEVEL2_RISK, 0.0).astype(
                np.float32), g.latest("inlet_temp_c"), c.inlet_limit_c,
                    f"chassis inlet air over {c.inlet_limit_c:g} degC for "
                    f"{c.inlet_hold_s:g}s (ASHRAE A2 allows 35)"),
            Finding("psu_redundancy_lost", Scope.NODE, np.where(lost, LEVEL2_RISK, 0.0).astype(
                np.float32), g.latest("psu_redundant"), 1.0,
                    "power supply redundancy lost (1 = redundant): one more supply failure "
                    "takes the node down", hard=True),
            Finding("host_memory_ue", Scope.NODE, fired(ue, 1, 1.0), ue, 1.0,
                    f"uncorrectable host memory errors (EDAC) in the last "
                    f"{c.ue_hold_s / 60:g} min", hard=True),
            self._sxid(view, g, now),
            *diag_findings(view, g, now, c.diag_hold_s),
        ]

    def _sxid(self, view: FleetView, g: ScopeView, now: float) -> Finding:
        risk = np.zeros(len(g), np.float32)
        code: F64 = np.full(len(g), np.nan)
        recent = [e for e in view.events_since(now - self.c.sxid_hold_s)
                  if e.metric == "sxid" and e.ts <= now]
        index = {e.key: i for i, e in enumerate(g.entities)} if recent else {}
        for ev in recent:
            i = index.get(ev.entity)
            r = sxid_risk(int(ev.value))
            if i is not None and r >= risk[i]:
                risk[i], code[i] = r, ev.value
        return Finding("sxid", Scope.NODE, risk, code, math.nan,
                       f"NVSwitch SXid logged in the last {self.c.sxid_hold_s / 60:g} min",
                       hard=True)
