"""The store's running sums over a tier's last n buckets (`ScopeWindows.window_sum`) give the
re-sum of the window (`time_total(window(...))`) bit for bit: whole counts, fractions, huge
values, -0.0, NaNs, late rows, resends, jumps and gaps past the rings, entities that come and
go (slots renumbered, the store grown), and sums first asked for mid-run. The dynamic rules'
findings from them are the ones made from the re-sum, side by side."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity
from models.detectors.dynamic import DynamicThresholds
from models.detectors.findings import Finding
from models.detectors.view import EventView, ScopeView, time_total
from service.stages.tier_sums import WHOLE_LIMIT
from service.stages.windows import ScopeWindows, TierSpec, WindowConfig, WindowStore
from tests.pipeline.builders import T0

TIERS = (TierSpec("1m", 60, 12), TierSpec("5m", 300, 6))
CONFIG = WindowConfig(raw_length=24, tiers=TIERS, nvlink_raw_length=24, nvlink_tiers=TIERS)
SCOPES = (Scope.GPU, Scope.NVLINK, Scope.IB_PORT)


def _entity(sc: Scope, name: str) -> Entity:
    return (Entity.gpu(name, 0) if sc is Scope.GPU else Entity.nvlink(name, 0, 1)
            if sc is Scope.NVLINK else Entity.ib_port(name, "mlx5_0", 1))


def _values(rng: np.random.Generator, w: ScopeWindows, n: int,
            whole_only: bool) -> npt.NDArray[np.float32]:
    """Counters as whole counts (now and then a burst); unless whole_only, some fractions,
    huge values and -0.0 too. Gauges as they come. A share of NaNs everywhere."""
    v = rng.normal(50, 30, (len(w.metrics), n)).astype(np.float32)
    counts = rng.poisson(0.5, (len(w.metrics), n)) * (1 + 999 * (rng.random(
        (len(w.metrics), n)) < 0.05))
    v[w.is_counter] = counts[w.is_counter]
    if not whole_only:
        odd = rng.random(v.shape) < 0.04
        v[odd] = rng.choice(np.array([0.25, -0.0, 3 * WHOLE_LIMIT, 1e9 + 0.5], np.float32),
                            int(odd.sum()))
    v[rng.random(v.shape) < 0.2] = np.nan
    return v


def _drive(store: WindowStore, seed: int, steps: int, whole_only: bool = False
           ) -> Iterator[tuple[int, float]]:
    """Feed the store, yielding (step, time) after each round."""
    rng = np.random.default_rng(seed)
    names = [f"n{i}" for i in range(10)]
    k0 = int(store.step_of(np.array([T0]))[0])
    k = k0
    for step in range(steps):
        r = rng.random()
        # Mostly one step at a time, sometimes a jump, now and then a gap past the rings.
        k += 1 if r < 0.93 else int(rng.integers(2, 15)) if r < 0.99 else \
            int(rng.choice([30, 12 * 13, 12 * 40]))
        now = T0 + 5.0 * (k - k0)
        store.advance(k)
        if step == steps // 2:  # a fleet arrives at once: the store grows past its capacity
            names += [f"m{i}" for i in range(80)]
        for sc in SCOPES:
            w = store[sc]
            active = [x for x in names if rng.random() < 0.7]
            for kind in range(3):
                # 0: this step; 1: a lagging node's earlier step; 2: a resend into a step.
                pick = [x for x in active if rng.random() < (0.9 if kind == 0 else 0.15)]
                if not pick:
                    continue
                back = 0 if kind == 0 else int(rng.integers(0, 14))
                slots = np.array([w.slots_for_entity(_entity(sc, x), store.registry, now)
                                  for x in pick], np.int32)
                w.write(slots, np.full(len(pick), k - back, np.int64),
                        _values(rng, w, len(pick), whole_only))
        if step % 29 == 0:
            # Entities silent for the last few steps are forgotten: slots renumbered.
            store.forget(now + store[Scope.GPU].horizon_s - float(rng.uniform(0, 60)))
        yield step, now


def _same_bits(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64], where: str) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype, where
    nan = np.isnan(a)
    assert np.array_equal(nan, np.isnan(b)), where
    assert np.array_equal(a[~nan].view(np.int64), b[~nan].view(np.int64)), where


def _reads(w: ScopeWindows, late: bool) -> Iterator[tuple[str, int, str]]:
    counters = [m.name for m, c in zip(w.metrics, w.is_counter, strict=True) if c]
    others = [m.name for m, c in zip(w.metrics, w.is_counter, strict=True) if not c][:1]
    for spec in w.tier_specs:
        for n in ((1, 5, spec.length) if not late else (3,)):
            for metric in counters + others:
                yield metric, n, spec.name


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_running_sums_are_the_re_sum_bit_for_bit(seed: int) -> None:
    store = WindowStore(CONFIG)
    summed = 0
    big = odd = False
    for step, _ in _drive(store, seed, 700):
        if step % 5:
            continue
        for sc in SCOPES:
            w = store[sc]
            # Sums asked for from the start, and others first asked for half-way through.
            for metric, n, tier in _reads(w, late=False) if step < 350 else \
                    (*_reads(w, late=False), *_reads(w, late=True)):
                got = w.window_sum(metric, n, tier)
                _same_bits(got, time_total(w.window(metric, n, tier)),
                           f"seed {seed} step {step} {sc} {metric} {tier} n={n}")
                summed += int(np.count_nonzero(~np.isnan(got)))
            for sums in store[sc]._sums.values():  # what kinds of bucket this run met
                big |= int(sums.total.max()) > 1000
                odd |= int(sums.odd.max()) > 0
    gpu = store[Scope.GPU]
    assert gpu.forgotten_total > 0 and gpu.capacity > 64  # churn renumbered, the store grew
    assert gpu.finished("5m") > 6 and summed > 0
    # Every kind of bucket was met during the run (a gap past the rings at its end may have
    # emptied them all): whole ones summed as integers, others re-summed.
    assert big and odd


def test_whole_counts_are_summed_without_reading_the_rows() -> None:
    """Whole counts (the error counters) never take the re-sum: the figure comes from the
    running totals alone."""
    store = WindowStore(CONFIG)
    for _ in _drive(store, 7, 300, whole_only=True):
        pass
    w = store[Scope.NVLINK]
    want = time_total(w.window("nvlink_replay", 12, "1m"))
    w.window_sum("nvlink_replay", 12, "1m")
    s = w._sums[(0, 12, w.col("nvlink_replay"))]
    assert not s.odd.any()
    w.tiers[0].agg[:] = np.nan  # rows no longer read: the sums alone answer
    _same_bits(s.read(w.tiers[0].agg, w.tiers[0].held, w.finished("1m"), len(w)), want, "whole")
    assert np.nansum(want) > 0


def test_a_store_that_keeps_no_sums_re_sums() -> None:
    store = WindowStore(CONFIG)
    for _ in _drive(store, 1, 200):
        pass
    w = store[Scope.IB_PORT]
    w.running_sums = False
    got = w.window_sum("ib_symbol_error", 12, "1m")
    assert not w._sums
    _same_bits(got, time_total(w.window("ib_symbol_error", 12, "1m")), "off")
    # A window longer than the tier's ring is re-summed as well (rows would alias).
    w.running_sums = True
    _same_bits(w.window_sum("ib_symbol_error", 13, "1m"),
               time_total(w.window("ib_symbol_error", 13, "1m")), "long")
    assert not w._sums


# ---- the rules, side by side ----------------------------------------------------------------

class Resummed:
    """A scope that keeps no running sums: the rules re-sum every window, as before."""

    def __init__(self, w: ScopeWindows) -> None:
        self._w = w

    def __getattr__(self, name: str) -> object:
        if name == "window_sum":
            raise AttributeError(name)
        return getattr(self._w, name)

    def __len__(self) -> int:
        return len(self._w)


class View:
    def __init__(self, store: WindowStore, resum: bool) -> None:
        self.scopes = {s: Resummed(w) if resum else w for s, w in store.scopes.items()}

    def scope(self, scope: Scope) -> ScopeView:
        return self.scopes[scope]  # type: ignore[return-value]

    def events_since(self, ts: float) -> Sequence[EventView]:
        return []


def _same(a: list[Finding], b: list[Finding], where: str) -> None:
    assert [(f.rule, f.scope) for f in a] == [(f.rule, f.scope) for f in b], where
    for x, y in zip(a, b, strict=True):
        for p, q in ((x.risk, y.risk), (x.value, y.value), (x.ttf_h, y.ttf_h),
                     (x.growth, y.growth)):
            assert (p is None) == (q is None), where
            if p is not None:
                assert np.array_equal(p, q, equal_nan=True), f"{where}: {x.rule}"


@pytest.mark.slow
def test_the_rules_find_what_the_re_sum_found() -> None:
    config = WindowConfig(raw_length=24, tiers=(TierSpec("1m", 60, 60), TierSpec("1h", 3600, 10)),
                          nvlink_raw_length=24,
                          nvlink_tiers=(TierSpec("1m", 60, 60), TierSpec("1h", 3600, 10)))
    store = WindowStore(config)
    running, resummed = DynamicThresholds(), DynamicThresholds()
    real, plain = View(store, resum=False), View(store, resum=True)
    fired, generation = 0, 0
    for step, now in _drive(store, 5, 12 * 60 * 3, whole_only=True):
        for c in store.compactions_since(generation):  # slot-indexed state follows
            for det in (running, resummed):
                for sc, keep in c.keep.items():
                    det.forget(sc, keep)
        generation = store.generation
        if step % 12 == 0 or step % 97 == 0:
            got, want = running.detect(real, now), resummed.detect(plain, now)
            _same(got, want, f"step {step}")
            fired += sum(int(np.count_nonzero(f.risk > 0)) for f in got)
    assert store[Scope.NVLINK]._sums and fired > 0
