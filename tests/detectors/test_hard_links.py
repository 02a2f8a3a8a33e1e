"""The hard rules for GPUs the tools cannot read and for PCIe links (issue 31): each fires at its
threshold with its level's risk, stays quiet just below, clears with the condition, and a PCIe
generation drop at idle never fires."""

from __future__ import annotations

import math

import numpy as np
import pytest

from collectors.labels import FailureMode
from models.detectors.failure_modes import mode_of
from models.detectors.hard import HardRuleConfig, HardRules
from tests.detectors.view import RAW_LENGTH, STEP_S, T0, FakeFleet, finding, healthy

C = HardRuleConfig()
ESCALATE = math.ceil(C.unreadable_escalate_s / STEP_S)  # raw steps of the escalation window
HOLD = math.ceil(C.pcie_width_hold_s / STEP_S)
BURST = math.ceil(C.aer_burst_s / STEP_S)
nan = math.nan


def detect(f: FakeFleet, rule: str) -> tuple[float, bool, np.ndarray]:
    got = finding(HardRules().detect(f, T0), rule)
    return float(got.risk[0]), got.hard, got.risk[1:]


# ---- gpu_unreadable ----------------------------------------------------------------------------

def unreadable(states: list[float]) -> FakeFleet:
    f = healthy()
    f.gpu.fill("gpu_unreadable", 0.0)
    f.gpu.put("gpu_unreadable", 0, states)
    return f


@pytest.mark.parametrize(("states", "risk"), [
    ([3.0, 3.0], 1.0),  # lost: level 3 at once
    ([2.0, 2.0], 1.0),  # requires reset
    ([5.0, 5.0], 1.0),  # no longer listed
    ([1.0, 1.0], 0.7),  # unknown error: level 2 first
    ([4.0, 4.0], 0.7),  # nvidia-smi timed out
    ([1.0, 3.0], 1.0),  # the worse state now decides
    ([0.0, 3.0], 0.0),  # one reading is a blip, not yet a state
    ([3.0, 0.0], 0.0),  # readable again: cleared
    ([3.0, nan, 3.0], 1.0),  # a sender's gap between two readings: still two in a row
    ([1.0] * ESCALATE, 1.0),  # an unknown error through the whole escalation window: level 3
    ([0.0] + [1.0] * (ESCALATE - 1), 0.7),  # one readable reading in it: still level 2
])
def test_gpu_unreadable(states: list[float], risk: float) -> None:
    got, hard, others = detect(unreadable(states), "gpu_unreadable")
    assert got == pytest.approx(risk) and hard
    assert not others.any()


def test_gpu_unreadable_value_is_the_latest_state() -> None:
    got = finding(HardRules().detect(unreadable([4.0, 4.0]), T0), "gpu_unreadable")
    assert got.value[0] == 4.0 and got.value[1] == 0.0


def test_escalation_window_fits_the_raw_window() -> None:
    assert ESCALATE <= RAW_LENGTH  # else the test above would read a tier it did not set


# ---- PCIe width ----------------------------------------------------------------------------------

def link(steps: int, width: float = 8.0, gen: float = 4.0, util: float = 0.0) -> FakeFleet:
    """GPU 0's link over the newest `steps` raw steps; every GPU x16 of x16, gen 4 of 4 before."""
    f = healthy()
    for metric, v in (("pcie_link_width", 16.0), ("pcie_link_width_max", 16.0),
                      ("pcie_link_gen", 4.0), ("pcie_link_gen_max", 4.0), ("gpu_util", 0.0)):
        f.gpu.fill(metric, v)
    f.gpu.put("pcie_link_width", 0, [width] * steps)
    f.gpu.put("pcie_link_gen", 0, [gen] * steps)
    f.gpu.put("gpu_util", 0, [util] * steps)
    f.gpu.set_latest("pcie_link_width", width, slot=0)
    return f


@pytest.mark.parametrize(("f", "risk"), [
    (link(HOLD), 0.7),  # x8 of x16 at full generation for the hold: level 2
    (link(HOLD - 1), 0.0),  # one step short of the hold
    (link(HOLD, width=16.0), 0.0),  # full width
    (link(HOLD, gen=1.0, util=97.0), 0.7),  # busy by utilization, generation dropped: counts
    (link(HOLD, width=16.0, gen=1.0), 0.0),  # the idle generation drop alone: never a fault
    (link(HOLD, gen=1.0), 0.0),  # narrow while idle at a low generation: power saving
])
def test_pcie_width_low(f: FakeFleet, risk: float) -> None:
    got, hard, others = detect(f, "pcie_width_low")
    assert got == pytest.approx(risk) and hard
    assert not others.any()


def test_idle_generation_drop_never_fires_however_long() -> None:
    f = link(RAW_LENGTH, width=16.0, gen=1.0)  # a whole raw window at gen 1 of 4, x16
    assert not finding(HardRules().detect(f, T0), "pcie_width_low").risk.any()


def test_pcie_width_low_clears_when_the_link_retrains() -> None:
    f = link(HOLD)
    assert detect(f, "pcie_width_low")[0] > 0
    f.gpu.put("pcie_link_width", 0, [16.0])
    assert detect(f, "pcie_width_low")[0] == 0


# ---- AER ---------------------------------------------------------------------------------------

def test_aer_fatal_fires_for_its_hold_then_lapses() -> None:
    f = healthy()
    buckets = math.ceil(C.aer_fatal_hold_s / 60)  # in the 1-minute tier
    f.gpu.put("pcie_aer_fatal_total", 0, [1.0] + [0.0] * (buckets - 1), res="1m")
    risk, hard, others = detect(f, "pcie_aer_fatal")
    assert risk == 1.0 and hard and not others.any()
    f.gpu.put("pcie_aer_fatal_total", 0, [1.0] + [0.0] * buckets, res="1m")  # an hour and more
    assert detect(f, "pcie_aer_fatal")[0] == 0
    f.gpu.fill("pcie_aer_fatal_total", 0.0, res="1m")
    assert detect(f, "pcie_aer_fatal")[0] == 0


@pytest.mark.parametrize(("errors", "risk"), [(C.aer_burst_errors, 0.35),
                                              (C.aer_burst_errors - 1, 0.0)])
def test_aer_correctable_burst_is_a_watch_level_precursor(errors: float, risk: float) -> None:
    f = healthy()
    f.gpu.put("pcie_aer_correctable_total", 0, [errors] + [0.0] * (BURST - 1))
    got, hard, _ = detect(f, "pcie_aer_correctable_burst")
    assert got == pytest.approx(risk) and not hard


# ---- HCA PCIe width ----------------------------------------------------------------------------

@pytest.mark.parametrize(("steps", "width", "risk"), [(HOLD, 8.0, 0.7), (HOLD - 1, 8.0, 0.0),
                                                     (HOLD, 16.0, 0.0)])
def test_nic_pcie_width_low(steps: int, width: float, risk: float) -> None:
    f = healthy()
    f.ib.fill("nic_pcie_link_width", 16.0)
    f.ib.fill("nic_pcie_link_width_max", 16.0)
    f.ib.put("nic_pcie_link_width", 0, [width] * steps)
    got = finding(HardRules().detect(f, T0), "nic_pcie_width_low")
    assert got.risk[0] == pytest.approx(risk) and got.hard and not got.risk[1:].any()


# ---- failure modes -------------------------------------------------------------------------------

@pytest.mark.parametrize(("rule", "value", "mode"), [
    ("gpu_unreadable", 3.0, FailureMode.M2_GPU_HARD),
    ("gpu_unreadable", 2.0, FailureMode.M2_GPU_HARD),
    ("gpu_unreadable", 5.0, FailureMode.M2_GPU_HARD),
    # An unknown error or a hung nvidia-smi is its own class (the rule pages on it once it
    # lasts; autolabel labels only at that risk).
    ("gpu_unreadable", 1.0, FailureMode.M12_GPU_UNREADABLE),
    ("gpu_unreadable", 4.0, FailureMode.M12_GPU_UNREADABLE),
    ("gpu_unreadable", 0.0, None),
    ("gpu_unreadable", nan, None),
    ("pcie_aer_fatal", 1.0, FailureMode.M2_GPU_HARD),
    ("pcie_width_low", 8.0, FailureMode.M10_PCIE_WIDTH),
    ("nic_pcie_width_low", 8.0, FailureMode.M11_NIC_SPEED),
    ("psu_failed", 1.0, FailureMode.M8_PSU),
    ("psu_redundancy_lost", 0.0, FailureMode.M8_PSU),
    ("fan_failed", 900.0, FailureMode.M9_FAN),
    ("host_memory_ue", 1.0, FailureMode.M13_HOST_HW),
    ("inlet_temp_high", 45.0, None),  # the room, not the node
    ("sxid", 10003.0, None),
    ("pcie_aer_correctable_burst", 500.0, None),  # a precursor
])
def test_failure_modes(rule: str, value: float, mode: FailureMode | None) -> None:
    assert mode_of(rule, value) is mode
