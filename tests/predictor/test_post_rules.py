"""The post-rule alone (models/predictor/post_rules.py): probabilities per horizon to risk, with
no model, window store or detector around it."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from collectors.catalog import Scope
from models.predictor.policy import PredictorConfig
from models.predictor.post_rules import PostRule

F32 = npt.NDArray[np.float32]
GPU = Scope.GPU


def _p(*values: float) -> F32:
    return np.array(values, np.float32)


def _held(rule: PostRule, hours: list[float]) -> list[float]:
    """One entity's risk over successive scored hours of one horizon's probabilities."""
    return [float(rule.risk(GPU, "M1_hbm", {1: _p(p)})[0]) for p in hours]


def test_each_horizon_is_capped_by_its_own_cap_and_the_largest_counts() -> None:
    rule = PostRule(PredictorConfig(caps={1: 1.0, 24: 0.85, 168: 0.5}, persist_h=1, floor=0.0))
    got = rule.risk(GPU, "M1_hbm", {1: _p(0.1, 0.2, 0.95, 0.0),
                                    24: _p(0.99, 0.2, 0.1, 0.0),
                                    168: _p(0.9, 0.7, 0.1, np.nan)})
    # a day's horizon stops at 0.85, a week's at 0.5; the hour's is uncapped; NaN is no risk
    assert got.tolist() == pytest.approx([0.85, 0.5, 0.95, 0.0])
    assert got.dtype == np.float32


def test_a_horizon_without_a_cap_is_uncapped() -> None:
    rule = PostRule(PredictorConfig(caps={24: 0.3}, persist_h=1, floor=0.0))
    got = rule.risk(GPU, "M1_hbm", {24: _p(0.9), 6: _p(0.8)})
    assert got.tolist() == pytest.approx([0.8])


def test_a_one_hour_spike_gives_no_risk_under_persistence() -> None:
    rule = PostRule(PredictorConfig(persist_h=2, floor=0.0))
    # the spikes at hours 1 and 3 each last one hour; from hour 4 on it holds (the minimum)
    assert _held(rule, [0.0, 0.9, 0.0, 0.9, 0.7, 0.8]) == pytest.approx(
        [0.0, 0.0, 0.0, 0.0, 0.7, 0.7])


def test_the_first_scored_hour_has_no_past_to_be_held_to() -> None:
    rule = PostRule(PredictorConfig(persist_h=2, floor=0.0))
    assert _held(rule, [0.9, 0.1]) == pytest.approx([0.9, 0.1])


def test_persistence_is_kept_per_scope_and_mode() -> None:
    rule = PostRule(PredictorConfig(persist_h=2, floor=0.0))
    for scope, mode in ((GPU, "M1_hbm"), (GPU, "M5_thermal"), (Scope.IB_PORT, "M4_ib_link")):
        rule.risk(scope, mode, {1: _p(0.0)})
    rule.risk(GPU, "M1_hbm", {1: _p(0.9)})
    # a spike of one mode and scope: the others' past hours are their own
    assert rule.risk(GPU, "M5_thermal", {1: _p(0.9)}).tolist() == [0.0]
    assert rule.risk(Scope.IB_PORT, "M4_ib_link", {1: _p(0.9)}).tolist() == [0.0]
    assert rule.risk(GPU, "M1_hbm", {1: _p(0.9)}).tolist() == pytest.approx([0.9])


def test_the_window_holds_persist_h_hours() -> None:
    rule = PostRule(PredictorConfig(persist_h=3, floor=0.0))
    got = _held(rule, [0.0, 0.2, 0.6, 0.6, 0.6])
    assert got == pytest.approx([0.0, 0.0, 0.0, 0.2, 0.6])  # hour 1's 0.2 left the window at 4
    assert len(rule.history[GPU, "M1_hbm"]) == 3


def test_the_floor_zeroes_small_risk_only() -> None:
    rule = PostRule(PredictorConfig(persist_h=1, floor=0.05))
    got = rule.risk(GPU, "M1_hbm", {1: _p(0.049, 0.05, 0.3)})
    assert got.tolist() == pytest.approx([0.0, 0.05, 0.3])


def test_the_floor_applies_after_persistence() -> None:
    rule = PostRule(PredictorConfig(persist_h=2, floor=0.5))
    # 0.4 then 0.9: the held minimum 0.4 is under the floor, though this hour's 0.9 is not
    assert _held(rule, [0.4, 0.9]) == [0.0, 0.0]


def test_forget_keeps_the_right_slots_of_its_scope_only() -> None:
    rule = PostRule(PredictorConfig(persist_h=2, floor=0.0))
    rule.risk(GPU, "M1_hbm", {1: _p(0.1, 0.9, 0.5)})
    rule.risk(Scope.IB_PORT, "M4_ib_link", {1: _p(0.3, 0.7)})
    rule.forget(GPU, np.array([1, 2], np.intp))  # slot 0 forgotten: 1 -> 0, 2 -> 1
    assert rule.history[GPU, "M1_hbm"][0].tolist() == pytest.approx([0.9, 0.5])
    assert rule.history[Scope.IB_PORT, "M4_ib_link"][0].tolist() == pytest.approx([0.3, 0.7])
    # each surviving entity is held to its own past hour, never to its slot's former owner
    got = rule.risk(GPU, "M1_hbm", {1: _p(0.8, 0.8)})
    assert got.tolist() == pytest.approx([0.8, 0.5])


def test_forget_of_slots_that_joined_after_a_past_hour() -> None:
    rule = PostRule(PredictorConfig(persist_h=2, floor=0.0))
    rule.risk(GPU, "M1_hbm", {1: _p(0.6, 0.7)})  # two slots then; four now
    rule.forget(GPU, np.array([1, 3], np.intp))
    assert rule.history[GPU, "M1_hbm"][0].tolist() == pytest.approx([0.7])  # a prefix
    got = rule.risk(GPU, "M1_hbm", {1: _p(0.9, 0.9)})
    assert got.tolist() == pytest.approx([0.7, 0.0])  # slot 3's entity had no hour before


def test_a_grown_slot_count_holds_new_slots_to_zero_until_they_persist() -> None:
    rule = PostRule(PredictorConfig(persist_h=2, floor=0.0))
    rule.risk(GPU, "M1_hbm", {1: _p(0.6, 0.7)})
    grown = rule.risk(GPU, "M1_hbm", {1: _p(0.8, 0.8, 0.9, 0.9)})
    assert grown.tolist() == pytest.approx([0.6, 0.7, 0.0, 0.0])
    again = rule.risk(GPU, "M1_hbm", {1: _p(0.8, 0.8, 0.9, 0.9)})
    assert again.tolist() == pytest.approx([0.8, 0.8, 0.9, 0.9])


def test_a_shrunk_slot_count_reads_the_past_hours_prefix() -> None:
    rule = PostRule(PredictorConfig(persist_h=2, floor=0.0))
    rule.risk(GPU, "M1_hbm", {1: _p(0.6, 0.7, 0.8)})
    assert rule.risk(GPU, "M1_hbm", {1: _p(0.9, 0.9)}).tolist() == pytest.approx([0.6, 0.7])
