"""Every rule of `ChassisRules`, on the in-memory fleet: fires with the risk its level needs, stays
quiet just below, and clears when the condition clears; a spare in standby by design and an
empty slot never fire."""

from __future__ import annotations

import math

import numpy as np

from collectors.catalog import Scope
from collectors.diagnostics.classes import RULE_NAMES, FaultClass
from collectors.frames import Entity
from models.detectors.chassis import (
    LEVEL2_RISK,
    SXID_FATAL,
    ChassisRuleConfig,
    ChassisRules,
    sxid_risk,
)
from models.detectors.findings import Finding
from tests.detectors.view import STEP_S, T0, Event, FakeFleet, FakeScope, finding

C = ChassisRuleConfig()


class Chassis(FakeFleet):
    """Two nodes, each with `psus` supplies, `fans` fans and its own node entity."""

    def __init__(self, psus: int = 2, fans: int = 3) -> None:
        super().__init__(nodes=2)
        names = ["n0", "n1"]
        self.scopes[Scope.PSU] = FakeScope(Scope.PSU, [Entity.psu(n, str(i)) for n in names
                                                       for i in range(psus)])
        self.scopes[Scope.FAN] = FakeScope(Scope.FAN, [Entity.fan(n, str(i)) for n in names
                                                       for i in range(fans)])
        self.scopes[Scope.NODE] = FakeScope(Scope.NODE, [Entity(Scope.NODE, n) for n in names])
        self.psu.set_latest("psu_health", 0.0)
        self.psu.set_latest("psu_state", 0.0)
        self.fan.fill("fan_rpm", 9000.0)
        self.fan.fill("fan_health", 0.0)
        self.fan.set_latest("fan_rpm", 9000.0)
        self.fan.set_latest("fan_rpm_lower_critical", 1800.0)
        self.node.fill("inlet_temp_c", 24.0)
        self.node.set_latest("psu_redundant", 1.0)
        self.node.fill("edac_ue_total", 0.0)
        self.node.fill("edac_ue_total", 0.0, res="1m")

    @property
    def psu(self) -> FakeScope:
        return self.scopes[Scope.PSU]

    @property
    def fan(self) -> FakeScope:
        return self.scopes[Scope.FAN]

    @property
    def node(self) -> FakeScope:
        return self.scopes[Scope.NODE]


def run(f: Chassis, rule: str, now: float = T0) -> Finding:
    return finding(ChassisRules().detect(f, now), rule)


def warning(risk: float) -> bool:
    """The level-2 risk (findings hold float32)."""
    return math.isclose(risk, LEVEL2_RISK, rel_tol=1e-6)


def fired_at(found: Finding) -> list[int]:
    return np.flatnonzero(found.risk > 0).tolist()


# ---- power supplies ------------------------------------------------------------------------
def test_a_failed_supply_beside_a_delivering_one_is_a_warning() -> None:
    f = Chassis()
    f.psu.set_latest("psu_health", 2.0, slot=0)  # n0:psu0 Critical, n0:psu1 delivers
    got = run(f, "psu_failed")
    assert fired_at(got) == [0] and warning(got.risk[0])
    assert got.value[0] == 1  # one other supply still delivers
    assert 0.6 <= LEVEL2_RISK < 0.9  # level 2 of the alert policy, never a page


def test_the_last_delivering_supply_failing_pages() -> None:
    f = Chassis()
    f.psu.set_latest("psu_state", 3.0, slot=1)  # n0:psu1 off, not by design
    f.psu.set_latest("psu_health", 2.0, slot=0)  # ... and n0:psu0 Critical
    got = run(f, "psu_failed")
    assert fired_at(got) == [0, 1] and (got.risk[:2] == 1.0).all() and got.hard
    assert (got.risk[2:] == 0).all()  # n1 untouched


def test_a_spare_in_standby_by_design_or_an_empty_slot_never_alerts() -> None:
    f = Chassis(psus=3)
    f.psu.set_latest("psu_state", 1.0, slot=1)  # StandbySpare
    f.psu.set_latest("psu_health", 2.0, slot=1)  # even when its BMC calls it Critical
    f.psu.set_latest("psu_state", 2.0, slot=2)  # Absent
    f.psu.set_latest("psu_health", 2.0, slot=2)
    assert fired_at(run(f, "psu_failed")) == []
    # A standby spare is not a delivering supply: the one that does failing is the last.
    f.psu.set_latest("psu_health", 2.0, slot=0)
    got = run(f, "psu_failed")
    assert fired_at(got) == [0] and got.risk[0] == 1.0


def test_a_warning_health_is_quiet_and_a_repaired_supply_clears() -> None:
    f = Chassis()
    f.psu.set_latest("psu_health", 1.0, slot=0)  # Warning: just below Critical
    assert fired_at(run(f, "psu_failed")) == []
    f.psu.set_latest("psu_health", 2.0, slot=0)
    assert fired_at(run(f, "psu_failed")) == [0]
    f.psu.set_latest("psu_health", 0.0, slot=0)  # replaced
    assert fired_at(run(f, "psu_failed")) == []


def test_redundancy_lost_is_a_warning_on_the_node() -> None:
    f = Chassis()
    f.node.set_latest("psu_redundant", 0.0, slot=1)
    got = run(f, "psu_redundancy_lost")
    assert got.scope is Scope.NODE and fired_at(got) == [1]
    assert warning(got.risk[1])
    f.node.set_latest("psu_redundant", 1.0, slot=1)
    assert fired_at(run(f, "psu_redundancy_lost")) == []


# ---- fans --------------------------------------------------------------------------------------
def test_a_fan_below_its_lower_critical_for_two_readings_fires() -> None:
    f = Chassis()
    f.fan.put("fan_rpm", 0, [1700.0, 1700.0])
    got = run(f, "fan_failed")
    assert fired_at(got) == [0] and warning(got.risk[0])
    assert got.threshold == 1800.0


def test_one_slow_reading_or_one_at_the_threshold_is_quiet() -> None:
    f = Chassis()
    f.fan.put("fan_rpm", 0, [9000.0, 1700.0])  # one reading under it
    f.fan.put("fan_rpm", 1, [1800.0, 1800.0])  # at it: not below
    assert fired_at(run(f, "fan_failed")) == []


def test_readings_a_poll_apart_count_as_consecutive() -> None:
    """A BMC poller reads every minute: twelve raw steps between readings."""
    f = Chassis()
    f.fan.fill("fan_rpm", math.nan)
    f.fan.fill("fan_health", math.nan)
    gap = [math.nan] * 11
    f.fan.put("fan_rpm", 2, [9000.0, *gap, 1000.0, *gap, 1000.0])
    assert fired_at(run(f, "fan_failed")) == [2]
    f.fan.put("fan_rpm", 2, [1000.0, *gap, 1000.0, *gap, 9000.0])  # it spun up again
    assert fired_at(run(f, "fan_failed")) == []


def test_a_critical_fan_fires_and_clears() -> None:
    f = Chassis()
    f.fan.put("fan_health", 4, [2.0, 2.0])
    assert fired_at(run(f, "fan_failed")) == [4]
    f.fan.put("fan_health", 4, [2.0, 0.0])
    assert fired_at(run(f, "fan_failed")) == []


# ---- inlet temperature -------------------------------------------------------------------------
HOLD = math.ceil(C.inlet_hold_s / STEP_S)


def test_inlet_over_the_limit_for_the_hold_is_a_warning() -> None:
    f = Chassis()
    f.node.put("inlet_temp_c", 0, [C.inlet_limit_c + 0.5] * HOLD)
    f.node.set_latest("inlet_temp_c", C.inlet_limit_c + 0.5, slot=0)
    got = run(f, "inlet_temp_high")
    assert fired_at(got) == [0] and warning(got.risk[0])


def test_inlet_at_the_limit_or_over_it_briefly_is_quiet() -> None:
    f = Chassis()
    f.node.put("inlet_temp_c", 0, [C.inlet_limit_c] * HOLD)  # at 40: not over
    f.node.put("inlet_temp_c", 1, [C.inlet_limit_c + 5] * (HOLD // 3))  # a door opened
    assert fired_at(run(f, "inlet_temp_high")) == []


# ---- host memory and NVSwitch ------------------------------------------------------------------
def test_an_uncorrectable_host_memory_error_pages_for_its_hold() -> None:
    f = Chassis()
    f.node.put("edac_ue_total", 1, [0.0, 1.0, 0.0])  # one new UE (stored as an increase)
    got = run(f, "host_memory_ue")
    assert fired_at(got) == [1] and got.risk[1] == 1.0 and got.hard
    f.node.fill("edac_ue_total", 0.0)  # out of the raw window ...
    f.node.put("edac_ue_total", 1, [1.0, 0.0], res="1m")  # ... still in the hour
    assert fired_at(run(f, "host_memory_ue")) == [1]
    f.node.fill("edac_ue_total", 0.0, res="1m")  # an hour later
    assert fired_at(run(f, "host_memory_ue")) == []


def test_corrected_host_memory_errors_alone_are_quiet() -> None:
    f = Chassis()
    f.node.fill("edac_ce_total", 50.0)
    assert fired_at(run(f, "host_memory_ue")) == []


def test_sxid_levels_follow_the_fabric_manager_guide() -> None:
    assert {12020, 22003, 22011, 23001, 23017} <= SXID_FATAL
    assert sxid_risk(12020) == 1.0 and sxid_risk(11012) == 0.0  # fatal; corrected SBE
    assert sxid_risk(22013) == 0.0 and sxid_risk(11004) == LEVEL2_RISK
    f = Chassis()
    f.events = [Event(T0 - 60, "n0", "sxid", 11004.0), Event(T0 - 30, "n1", "sxid", 23001.0),
                Event(T0 - 10, "n0:gpu0", "xid", 79.0)]
    got = run(f, "sxid")
    assert warning(got.risk[0]) and got.risk[1] == 1.0 and got.value.tolist() == [11004, 23001]
    # Past its hold, an SXid lapses.
    assert fired_at(run(f, "sxid", now=T0 + C.sxid_hold_s)) == []


def test_a_failed_diagnostic_pages_naming_its_class_until_a_later_run_passes() -> None:
    f = Chassis()
    f.events = [Event(T0 - 600, "n0", "diag", float(FaultClass.MEMORY)),
                Event(T0 - 300, "n1", "diag", float(FaultClass.SOFTWARE)),
                Event(T0 - 200, "n0:gpu0", "xid", 79.0)]
    assert fired_at(run(f, "diag_memory")) == [0] and run(f, "diag_memory").risk[0] == 1.0
    assert warning(run(f, "diag_software").risk[1])  # the node's set-up, not its board
    assert fired_at(run(f, "diag_p2p_bandwidth")) == []
    # A later run that passed clears it; an older failure arriving late does not return.
    f.events += [Event(T0 - 100, "n0", "diag", float(FaultClass.PASSED)),
                 Event(T0 - 900, "n0", "diag", float(FaultClass.STRESS))]
    assert fired_at(run(f, "diag_memory")) == [] and fired_at(run(f, "diag_stress")) == []
    # Past its hold, a failure with no later run lapses.
    assert fired_at(run(f, "diag_software", now=T0 - 300 + C.diag_hold_s + 1)) == []


def test_a_healthy_chassis_is_quiet_everywhere() -> None:
    f = Chassis()
    found = ChassisRules().detect(f, T0)
    assert {x.rule for x in found} == {"psu_failed", "fan_failed", "inlet_temp_high",
                                       "psu_redundancy_lost", "host_memory_ue", "sxid",
                                       "fan_slowing", "psu_running_hot",
                                       *RULE_NAMES.values()}
    assert all(not (x.risk > 0).any() for x in found)


def test_no_chassis_entities_is_no_finding_and_no_error() -> None:
    f = Chassis(psus=0, fans=0)
    f.scopes[Scope.NODE] = FakeScope(Scope.NODE, [])
    assert all(len(x.risk) == 0 for x in ChassisRules().detect(f, T0))
