"""The first tier's running sums give the tiers the re-read of the raw rows gave, bit for bit:
NaNs, late rows, resends into a folded step, rows for a closed bucket, gaps, and entities that
come and go mid-minute (slots renumbered by a compaction)."""

from __future__ import annotations

import types

import numpy as np
import numpy.typing as npt
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity
from service.stages.windows import ScopeWindows, TierSpec, WindowConfig, WindowStore, _Ring
from tests.pipeline.builders import T0


def _old_rollup(self: ScopeWindows, parent: _Ring, tier: _Ring, bucket: int,
                ratio: int, slots: object = None) -> None:
    """The rollup as it was before the running sums (a re-read of every row), kept verbatim
    as the reference."""
    assert slots is None
    row = tier.open(bucket)
    rows, held = parent.rows(bucket * ratio + ratio - 1, ratio)
    if not held.any():
        return
    rows = rows[held]
    agg = parent.agg[:, rows, :]
    g = self.gauge_cols
    hi = parent.hi[:, rows, :] if parent.hi is not None else agg[g]
    lo = parent.lo[:, rows, :] if parent.lo is not None else agg[g]
    present = ~np.isnan(agg)
    cnt = present.sum(axis=1)
    total = np.where(present, agg, 0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / cnt
    mean[cnt == 0] = np.nan
    total[cnt == 0] = np.nan
    mx = np.fmax.reduce(agg, axis=1)
    res = np.where(self.is_counter[:, None], total, np.where(self.is_state[:, None], mx, mean))
    tier.agg[:, row, :] = res
    if tier.hi is not None and tier.lo is not None:
        tier.hi[:, row, :] = np.fmax.reduce(hi, axis=1)
        tier.lo[:, row, :] = np.fmin.reduce(lo, axis=1)


TIERS = (TierSpec("1m", 60, 12), TierSpec("5m", 300, 6))
# Every gauge keeps both ranges (ranges=None), as the reference re-read below does.
CONFIG = WindowConfig(raw_length=30, tiers=TIERS, nvlink_raw_length=24, nvlink_tiers=TIERS,
                      ranges=None)


def _pair() -> tuple[WindowStore, WindowStore]:
    """(running sums, the old re-read) over the same config."""
    new, old = WindowStore(CONFIG), WindowStore(CONFIG)
    for w in old.scopes.values():
        w.reread_rollups = True
        w._rollup = types.MethodType(_old_rollup, w)  # type: ignore[method-assign]
    assert all(w.running is not None for w in new.scopes.values())
    return new, old


def _same(new: WindowStore, old: WindowStore, where: str) -> None:
    for sc in new.scopes:
        a, b = new[sc], old[sc]
        assert a.entities == b.entities, where
        assert a._rolled == b._rolled, where
        n = len(a.entities)
        for i, (ta, tb) in enumerate(zip(a.tiers, b.tiers, strict=True)):
            assert np.array_equal(ta.held, tb.held), where
            for x, y in ((ta.agg, tb.agg), (ta.hi, tb.hi), (ta.lo, tb.lo)):
                if x is None or y is None:  # a scope without gauges keeps no range
                    assert x is None and y is None
                    continue
                assert np.array_equal(x[:, :, :n], y[:, :, :n], equal_nan=True), \
                    f"{where}: {sc} tier {i}"


def _values(rng: np.random.Generator, m: int, n: int) -> npt.NDArray[np.float32]:
    v = rng.normal(50, 30, (m, n)).astype(np.float32)
    v[rng.random((m, n)) < 0.3] = np.nan
    return v


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_running_sums_give_the_tiers_the_re_read_gave(seed: int) -> None:
    rng = np.random.default_rng(seed)
    new, old = _pair()
    names = [f"n{i}" for i in range(12)]
    rereads: list[int] = []  # dirty slots re-read at a close, per close that had any
    w_new = new[Scope.GPU]
    plain = w_new._rollup

    def counted(parent: _Ring, tier: _Ring, bucket: int, ratio: int,
                slots: npt.NDArray[np.intp] | None = None) -> None:
        if slots is not None:
            rereads.append(len(slots))
        plain(parent, tier, bucket, ratio, slots)

    w_new._rollup = counted  # type: ignore[method-assign]
    k0 = int(new.step_of(np.array([T0]))[0])
    k = k0
    for step in range(900):
        # Mostly one step at a time, sometimes a jump, now and then a gap past the raw ring.
        r = rng.random()
        k += 1 if r < 0.9 else int(rng.integers(2, 15)) if r < 0.99 else 40
        now = T0 + 5.0 * (k - k0)
        for store in (new, old):
            store.advance(k)
        for sc in (Scope.GPU, Scope.NVLINK):
            # Entities come and go: a random subset of names reports this step.
            active = [x for x in names if rng.random() < 0.7]
            ents = [Entity.gpu(x, 0) if sc is Scope.GPU else Entity.nvlink(x, 0, 1)
                    for x in active]
            for kind in range(3):
                # 0: this step; 1: a lagging node's previous step (not yet folded), or a
                # step already folded (a dirty slot), or a closed bucket's (raw ring only);
                # 2: a resend into a step already written.
                pick = [e for e in ents if rng.random() < (0.9 if kind == 0 else 0.15)]
                if not pick:
                    continue
                back = 0 if kind == 0 else int(rng.integers(0, 8))
                ks = np.full(len(pick), k - back, np.int64)
                vals = _values(rng, len(new[sc].metrics), len(pick))
                for store in (new, old):
                    w = store[sc]
                    slots = np.array([w.slots_for_entity(e, store.registry, now) for e in pick],
                                     np.int32)
                    w.write(slots, ks, vals)
        if step % 7 == 0:
            # Entities silent for the last few steps are forgotten mid-minute: churn.
            at = now + new[Scope.GPU].horizon_s - float(rng.uniform(0, 60))
            for store in (new, old):
                store.forget(at)
        _same(new, old, f"seed {seed} step {step}")
    assert new[Scope.GPU].forgotten_total > 0  # the churn did renumber slots
    assert new[Scope.GPU].finished("5m") > 0
    assert rereads  # some rows changed after their step was folded


def test_a_row_written_after_its_step_was_folded_still_counts() -> None:
    """A resend into a step the sums already hold: the slot is re-read when the minute closes,
    and its minute is what the rows say (the resend replaced the value)."""
    new, old = _pair()
    k0 = int(new.step_of(np.array([T0]))[0]) // 12 * 12  # a minute's first step
    for store in (new, old):
        w = store[Scope.GPU]
        s = w.slots_for_entity(Entity.gpu("n0", 0), store.registry)
        for k in range(k0, k0 + 12):
            store.advance(k)
            v = np.full((len(w.metrics), 1), 10.0, np.float32)
            w.write(np.array([s], np.int32), np.array([k]), v)
        v = np.full((len(w.metrics), 1), 70.0, np.float32)
        w.write(np.array([s], np.int32), np.array([k0 + 2]), v)  # folded already
        store.advance(k0 + 12)
    assert new[Scope.GPU].running is not None
    assert not new[Scope.GPU].running.dirty.any()  # cleared for the next minute
    temp = new[Scope.GPU].window("gpu_temp", 1, tier="1m")[0]
    assert temp.tolist() == pytest.approx([(11 * 10 + 70) / 12])
    assert new[Scope.GPU].window("gpu_temp", 1, tier="1m", stat="hi")[0].tolist() == [70]
    _same(new, old, "resend")


def test_a_row_for_a_closed_minute_reaches_the_raw_ring_only() -> None:
    new, old = _pair()
    k0 = int(new.step_of(np.array([T0]))[0]) // 12 * 12
    for store in (new, old):
        w = store[Scope.GPU]
        s = np.array([w.slots_for_entity(Entity.gpu("n0", 0), store.registry)], np.int32)
        store.advance(k0 + 11)
        w.write(s, np.array([k0 + 11]), np.full((len(w.metrics), 1), 10.0, np.float32))
        store.advance(k0 + 12)  # the minute closes
        w.write(s, np.array([k0 + 10]), np.full((len(w.metrics), 1), 99.0, np.float32))
        store.advance(k0 + 24)
    w = new[Scope.GPU]
    assert w.window("gpu_temp", 2, tier="1m")[0][0] == 10
    assert w.window("gpu_temp", 15)[0][0] == 99  # the raw ring has it
    _same(new, old, "closed")


def test_sums_stay_with_their_entity_when_slots_are_renumbered_mid_minute() -> None:
    new, old = _pair()
    k0 = int(new.step_of(np.array([T0]))[0]) // 12 * 12
    for store in (new, old):
        w = store[Scope.GPU]
        for k in range(k0, k0 + 6):
            store.advance(k)
            for unit, temp in ((0, 40.0), (1, 80.0)):
                now = T0 + 5.0 * (k - k0) if unit == 1 else T0 - 10_000
                s = w.slots_for_entity(Entity.gpu(f"n{unit}", unit), store.registry, now)
                v = np.full((len(w.metrics), 1), temp, np.float32)
                w.write(np.array([s], np.int32), np.array([k]), v)
        assert store.forget(T0 + 30) is not None  # n0 silent past the horizon: dropped
        assert w.slot(Entity.gpu("n1", 1)) == 0  # renumbered mid-minute
        store.advance(k0 + 12)
    assert new[Scope.GPU].window("gpu_temp", 1, tier="1m")[0].tolist() == [80]
    _same(new, old, "churn")


def test_a_store_too_short_for_its_first_tier_re_reads() -> None:
    store = WindowStore(WindowConfig(raw_length=6, tiers=(TierSpec("1m", 60, 4),)))
    assert store[Scope.GPU].running is None
