"""The literature baselines (`models.detectors.baselines`) rule by rule on the in-memory fleet:
the static vendor thresholds, the EWMA z-score with its warm-up and hold, and the random
score's hold."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pytest

from collectors.catalog import Scope
from models.detectors.baselines import (
    EWMA_METRICS,
    NVLINK_ERRORS,
    EwmaConfig,
    EwmaZScore,
    RandomConfig,
    RandomScore,
    StaticConfig,
    StaticThresholds,
)
from models.detectors.findings import Finding
from tests.detectors.view import STEP_S, T0, Event, FakeFleet, finding, healthy

S = StaticConfig()
Setup = Callable[[FakeFleet], None]


def latest(metric: str, value: float) -> Setup:
    return lambda f: f.gpu.set_latest(metric, value, slot=0)


def last_step(scope: Scope, metric: str, value: float) -> Setup:
    return lambda f: f.scope(scope).put(metric, 0, [value])


def ber(value: float) -> Setup:
    return lambda f: f.ib.put("ib_ber", 0, [value] * round(S.ber_window_s / STEP_S))


def ib_state(states: list[float]) -> Setup:
    return lambda f: f.ib.put("ib_state", 0, states)


IB_STEPS = math.ceil(S.ib_down_s / STEP_S)

STATIC = {
    "static_remap (pending)": ("static_remap", latest("remapped_rows_pending", 1),
                               latest("remapped_rows_pending", 0)),
    "static_remap (failure)": ("static_remap", latest("remapped_rows_failure", 1),
                               latest("remapped_rows_failure", 0)),
    "static_retired": ("static_retired", latest("retired_pages_sbe", S.retired_pages + 1),
                       latest("retired_pages_sbe", S.retired_pages)),  # more than the limit
    "static_dbe (volatile)": ("static_dbe", latest("ecc_dbe_volatile", 1),
                              latest("ecc_dbe_volatile", 0)),
    "static_dbe (aggregate step)": ("static_dbe", last_step(Scope.GPU, "ecc_dbe_aggregate", 1),
                                    last_step(Scope.GPU, "ecc_dbe_aggregate", 0)),
    **{f"static_nvlink ({m})": ("static_nvlink", last_step(Scope.NVLINK, m, 1),
                                last_step(Scope.NVLINK, m, 0)) for m in NVLINK_ERRORS},
    "static_ber": ("static_ber", ber(S.ber_limit * 1.01), ber(S.ber_limit * 0.99)),
    "static_ib_down": ("static_ib_down", ib_state([1.0] * IB_STEPS),
                       ib_state([4.0] + [1.0] * (IB_STEPS - 1))),
    # Unlike the hard rule, the static check has no gap tolerance: a gap in the window passes.
    "static_ib_down (gap)": ("static_ib_down", ib_state([1.0] * IB_STEPS),
                             ib_state([1.0, math.nan] * (IB_STEPS // 2))),
}


@pytest.mark.parametrize(("rule", "fire", "below"), STATIC.values(), ids=STATIC.keys())
def test_static_threshold(rule: str, fire: Setup, below: Setup) -> None:
    f = healthy()
    fire(f)
    got = finding(StaticThresholds().detect(f, T0), rule)
    assert got.risk[0] == 1.0 and got.hard
    assert not got.risk[1:].any()

    f = healthy()
    below(f)
    assert not finding(StaticThresholds().detect(f, T0), rule).risk.any()


@pytest.mark.parametrize(("code", "age_s", "risk"), [
    (48, 0.0, 1.0),
    (48, S.xid_hold_s, 1.0),
    (48, S.xid_hold_s + 1, 0.0),  # hold expired: reset
    (9, 0.0, 0.0),  # only critical codes fail the static check
])
def test_static_xid(code: int, age_s: float, risk: float) -> None:
    f = healthy()
    f.events.append(Event(T0 - age_s, "n0:gpu0", "xid", float(code)))
    got = finding(StaticThresholds().detect(f, T0), "static_xid")
    assert got.risk[0] == risk and got.hard
    assert not got.risk[1:].any()


# ---- EWMA z-score --------------------------------------------------------------------------------

E = dataclasses.replace(EwmaConfig(), warmup_s=4 * STEP_S)  # a four-step warm-up keeps it short
WARM = round(E.warmup_s / STEP_S)


def ewma_fleet() -> FakeFleet:
    f = FakeFleet()
    for scope, metrics in EWMA_METRICS.items():
        for m in metrics:
            f.scope(scope).fill(m, 0.0)
    f.gpu.fill("gpu_temp", 55.0)
    return f


def tick(det: EwmaZScore, f: FakeFleet, t: float, temp0: float = 55.0) -> Finding:
    """One new raw step in which GPU 0 read temp0."""
    f.step()
    f.gpu.put("gpu_temp", 0, [temp0])
    return finding(det.detect(f, t), "ewma_gpu")


def warmed() -> tuple[EwmaZScore, FakeFleet, float]:
    det, f = EwmaZScore(E), ewma_fleet()
    t = T0
    for _ in range(WARM):
        tick(det, f, t)
        t += STEP_S
    return det, f, t


@pytest.mark.parametrize(("z", "risk"), [
    (E.z[0], E.risk[0]), (E.z[0] - 0.1, 0.0),
    (E.z[1], E.risk[1]), (E.z[1] - 0.1, E.risk[0]),
    (E.z[2], E.risk[2]), (E.z[2] - 0.1, E.risk[1]),
])
def test_ewma_levels(z: float, risk: float) -> None:
    det, f, t = warmed()
    # A constant history has no variance: the floor (1 degC) is the yardstick.
    got = tick(det, f, t, 55.0 + z * E.sd_floor)
    assert got.risk[0] == pytest.approx(risk)
    assert got.value[0] == pytest.approx(z, rel=1e-5)
    assert not got.risk[1:].any()


def test_ewma_judges_nothing_before_its_warm_up() -> None:
    det, f = EwmaZScore(E), ewma_fleet()
    for k in range(WARM - 1):
        tick(det, f, T0 + k * STEP_S)
    assert not tick(det, f, T0 + WARM * STEP_S, 55.0 + 2 * E.z[2]).risk.any()
    assert tick(det, f, T0 + (WARM + 1) * STEP_S, 55.0 + 2 * E.z[2]).risk[0] > 0


def test_ewma_holds_a_spike_then_resets() -> None:
    det, f, t = warmed()
    assert tick(det, f, t, 55.0 + E.z[1]).risk[0] == pytest.approx(E.risk[1])
    assert tick(det, f, t + E.hold_s).risk[0] == pytest.approx(E.risk[1])  # held
    assert tick(det, f, t + E.hold_s + STEP_S).risk[0] == 0.0


def test_ewma_learns_each_step_once() -> None:
    """Ticks without a new raw step do not count toward the warm-up."""
    det, f = EwmaZScore(E), ewma_fleet()
    for k in range(3 * WARM):
        det.detect(f, T0 + k)  # the same head every time: one step learned
    assert not tick(det, f, T0 + 60, 55.0 + 2 * E.z[2]).risk.any()


# ---- random --------------------------------------------------------------------------------------

def test_random_score_holds_then_resets() -> None:
    """A rate high enough to alert on the first tick; then no further alerts arrive (the
    configuration is swapped for a silent one) and the drawn risks last exactly hold_s."""
    det, f = RandomScore(RandomConfig(alerts_per_node_day=1e7)), healthy()
    fired = [g for g in det.detect(f, T0) if g.risk.any()]
    assert fired and all(g.hard for g in fired)
    levels = np.concatenate([g.risk[g.risk > 0] for g in fired])
    assert set(levels.tolist()) <= {float(np.float32(r)) for r in (0.35, 0.65, 1.0)}
    det.c = RandomConfig(alerts_per_node_day=0.0)
    hold = RandomConfig().hold_s
    assert any(g.risk.any() for g in det.detect(f, T0 + hold - 1))
    assert not any(g.risk.any() for g in det.detect(f, T0 + hold))


def test_random_score_at_rate_zero_is_silent() -> None:
    det, f = RandomScore(RandomConfig(alerts_per_node_day=0.0)), healthy()
    for k in range(10):
        assert not any(g.risk.any() for g in det.detect(f, T0 + k * 3600))
