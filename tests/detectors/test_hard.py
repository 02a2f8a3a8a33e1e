"""Every rule of `HardRules`, on the in-memory fleet: fires at its threshold with the risk and
hard flag the rule sets, stays quiet just below, and clears when the condition clears."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from models.detectors.hard import HardRuleConfig, HardRules
from models.detectors.xid import CRITICAL_RISK, FATAL_RESET_RISK, OTHER_RISK
from tests.detectors.view import STEP_S, T0, Event, FakeFleet, finding, healthy

C = HardRuleConfig()
Setup = Callable[[FakeFleet], None]


def latest(metric: str, value: float) -> Setup:
    def set_it(f: FakeFleet) -> None:
        f.gpu.set_latest(metric, value, slot=0)
    return set_it


def both(*setups: Setup) -> Setup:
    def set_all(f: FakeFleet) -> None:
        for s in setups:
            s(f)
    return set_all


def hot_for(steps: int, metric: str = "gpu_temp", value: float = 87.0) -> Setup:
    """GPU 0 at `value` for the newest `steps` raw steps (its slowdown temperature is 87)."""
    def set_it(f: FakeFleet) -> None:
        f.gpu.put(metric, 0, [value] * steps)
        f.gpu.set_latest("gpu_temp", value if metric == "gpu_temp" else 55.0, slot=0)
    return set_it


def replays(per_step: list[float]) -> Setup:
    def set_it(f: FakeFleet) -> None:
        f.gpu.put("pcie_replay", 0, per_step)
    return set_it


HOLD = math.ceil(C.thermal_hold_s / STEP_S)  # raw steps the slowdown must persist
MINUTE = round(60 / STEP_S)


@dataclass(frozen=True)
class Case:
    rule: str
    fire: Setup  # at the threshold: fires
    below: Setup  # just below it: quiet
    risk: float
    hard: bool


CASES = {
    "dbe": Case("dbe", latest("ecc_dbe_volatile", 1), latest("ecc_dbe_volatile", 0), 1.0, True),
    "remap_failure": Case("remap_failure", latest("remapped_rows_failure", 1),
                          latest("remapped_rows_failure", 0), 1.0, True),
    "remap_pending (rows)": Case("remap_pending", latest("remapped_rows_pending", 1),
                                 latest("remapped_rows_pending", 0), C.pending_risk, False),
    "remap_pending (pages)": Case("remap_pending", latest("retired_pages_pending", 1),
                                  latest("retired_pages_pending", 0), C.pending_risk, False),
    "retired_pages_limit": Case("retired_pages_limit",
                                latest("retired_pages_sbe", C.retired_hard),
                                latest("retired_pages_sbe", C.retired_hard - 1), 1.0, True),
    "retired_pages_limit (sbe + dbe)": Case(
        "retired_pages_limit",
        both(latest("retired_pages_sbe", C.retired_hard - 3), latest("retired_pages_dbe", 3)),
        both(latest("retired_pages_sbe", C.retired_hard - 3), latest("retired_pages_dbe", 2)),
        1.0, True),
    "retired_pages_soft": Case("retired_pages_soft", latest("retired_pages_sbe", C.retired_soft),
                               latest("retired_pages_sbe", C.retired_soft - 1), 0.45, False),
    "thermal_slowdown (temperature)": Case("thermal_slowdown", hot_for(HOLD),
                                           hot_for(HOLD, value=86.0), 0.7, False),
    "thermal_slowdown (not held long enough)": Case(
        "thermal_slowdown", hot_for(HOLD), hot_for(HOLD - 1), 0.7, False),
    "thermal_slowdown (throttle flag)": Case(
        "thermal_slowdown", hot_for(HOLD, "throttle_thermal", 1.0),
        hot_for(HOLD - 1, "throttle_thermal", 1.0), 0.7, False),
    # Shutdown at 92: two degrees of margin or less is critical.
    "near_shutdown": Case("near_shutdown", latest("gpu_temp", 90.0), latest("gpu_temp", 89.5),
                          1.0, True),
    "pcie_replay_rate": Case("pcie_replay_rate",
                             replays([C.pcie_replays_per_min + 1] + [0] * (MINUTE - 1)),
                             replays([C.pcie_replays_per_min] + [0] * (MINUTE - 1)), 0.6, False),
    "pcie_replay_rate (older than a minute)": Case(
        "pcie_replay_rate", replays([C.pcie_replays_per_min + 1] + [0] * (MINUTE - 1)),
        replays([C.pcie_replays_per_min + 1] + [0] * MINUTE), 0.6, False),
}


def run(setup: Setup) -> tuple[FakeFleet, HardRules]:
    f = healthy()
    setup(f)
    return f, HardRules()


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_gpu_rule_fires_at_threshold_quiet_below(case: Case) -> None:
    f, rules = run(case.fire)
    got = finding(rules.detect(f, T0), case.rule)
    assert got.risk[0] == pytest.approx(case.risk)
    assert got.hard is case.hard
    assert not got.risk[1:].any(), "only the GPU with the condition"

    f, rules = run(case.below)
    assert not finding(rules.detect(f, T0), case.rule).risk.any()


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_gpu_rule_clears_with_the_condition(case: Case) -> None:
    f, rules = run(case.fire)
    assert finding(rules.detect(f, T0), case.rule).risk[0] > 0
    f.scopes = healthy().scopes  # the repair (a GPU reset) zeroes volatile counters and flags
    assert not finding(rules.detect(f, T0 + STEP_S), case.rule).risk.any()


def test_missing_data_never_fires() -> None:
    f = FakeFleet()  # nothing reported at all
    for got in HardRules().detect(f, T0):
        assert not got.risk.any(), got.rule


def test_thermal_slowdown_rides_out_sender_gaps() -> None:
    """A report missing at every other step still spans the hold (see `sustained`)."""
    f = healthy()
    f.gpu.put("gpu_temp", 0, [87.0, math.nan] * (HOLD // 2))
    f.gpu.put("throttle_thermal", 0, [0.0, math.nan] * (HOLD // 2))
    assert finding(HardRules().detect(f, T0), "thermal_slowdown").risk[0] == pytest.approx(0.7)


# ---- NVLink and InfiniBand ---------------------------------------------------------------------

IB_STEPS = math.ceil(C.ib_down_s / STEP_S)


@pytest.mark.parametrize(("state", "risk"), [(0.0, 1.0), (1.0, 0.0), (math.nan, 0.0)])
def test_nvlink_down(state: float, risk: float) -> None:
    f = healthy()
    f.nvlink.set_latest("nvlink_state", state, slot=0)
    got = finding(HardRules().detect(f, T0), "nvlink_down")
    assert got.risk[0] == risk and got.hard
    assert not got.risk[1:].any()


@pytest.mark.parametrize(("states", "risk"), [
    ([2.0] * IB_STEPS, 1.0),  # INIT for the whole outage window: down
    ([1.0] * IB_STEPS, 1.0),  # DOWN
    ([4.0] + [1.0] * (IB_STEPS - 1), 0.0),  # down one step short of the window
    ([1.0] * (IB_STEPS - 1) + [4.0], 0.0),  # active again: cleared
    ([1.0, math.nan] * (IB_STEPS // 2), 1.0),  # a sender's gaps do not hide an outage
    ([math.nan] * IB_STEPS, 0.0),  # silence is not an outage
])
def test_ib_port_down(states: list[float], risk: float) -> None:
    f = healthy()
    f.ib.put("ib_state", 0, states)
    f.ib.set_latest("ib_state", states[-1], slot=0)
    got = finding(HardRules().detect(f, T0), "ib_port_down")
    assert got.risk[0] == risk and got.hard
    assert not got.risk[1:].any()


# ---- Xid ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("code", "age_s", "risk"), [
    (48, 0.0, CRITICAL_RISK),  # double-bit ECC
    (79, C.xid_hold_s, CRITICAL_RISK),  # fallen off the bus, at the end of its hold
    (79, C.xid_hold_s + 1, 0.0),  # hold expired: reset
    (79, -1.0, 0.0),  # logged after `now`: not yet seen
    (9, 60.0, FATAL_RESET_RISK),
    (13, 60.0, 0.0),  # an application error says nothing of the hardware
    (63, 60.0, 0.0),  # row remap recorded: left to the remap rules
    (1000, 60.0, OTHER_RISK),  # an unknown code: recorded below every alert level
])
def test_xid_risk_and_hold(code: int, age_s: float, risk: float) -> None:
    f = healthy()
    f.events.append(Event(T0 - age_s, "n0:gpu1", "xid", float(code)))
    got = finding(HardRules().detect(f, T0), "xid")
    assert got.risk[1] == pytest.approx(risk) and got.hard
    if risk:
        assert got.value[1] == code
    assert not np.delete(got.risk, 1).any()


def test_xid_keeps_the_worst_code_and_ignores_other_events() -> None:
    f = healthy()
    f.events += [Event(T0 - 30, "n0:gpu2", "xid", 48.0), Event(T0 - 20, "n0:gpu2", "xid", 13.0),
                 Event(T0 - 10, "n0:gpu2", "pcie_replay", 48.0),
                 Event(T0 - 10, "n9:gpu0", "xid", 48.0)]  # an entity the scope does not hold
    got = finding(HardRules().detect(f, T0), "xid")
    assert got.risk.tolist() == [0.0, 0.0, CRITICAL_RISK, 0.0]
    assert got.value[2] == 48
    # The signal says what the Xid means and what to do, from the catalog (operator words).
    assert got.signal_of(2) == ("Xid 48 (Double Bit ECC Error): reboot the node; if it "
                                "recurs, inspect the hardware (logged in the last 60 min)")
    assert got.signal_of(0) == "Xid code logged in the last 60 min"
