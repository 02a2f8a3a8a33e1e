"""The NVLink rules' hour-resolution work (the 48-h growth fit, the hours with errors) reads the
links a range of slots at a time (`SLOT_CHUNK` in models/detectors/dynamic/nvlink.py), so an
hour's first tick holds one range's temporaries instead of the whole scope's: at 180,000 links
those were about 270 MB, the service's peak. The numbers must not move: the computation before,
kept here as the reference, is compared with the sliced one bit for bit over randomized stores
(NaN samples, whole missing steps, links joining, going quiet and compacted away), at slice
sizes that leave ranges of one slot, and through a view that cannot read part of its scope."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity
from models.detectors.dynamic import HOUR, DynamicThresholds, nvlink
from models.detectors.dynamic.nvlink import NVL_ALL, active_hours
from models.detectors.findings import Finding
from models.detectors.growth import assess
from models.detectors.view import EventView, ScopeView, recent, slot_ranges
from service.stages.windows import ScopeWindows, TierSpec, WindowConfig, WindowStore
from tests.pipeline.builders import T0

F64 = npt.NDArray[np.float64]
# A 10-min step keeps 60 hours of data quick to write. The first store reads the 48 h from the
# hour tier (one bucket an hour); the second from a 30-min tier (two buckets folded an hour).
HOURS_TIER = WindowConfig(step_s=600.0, raw_length=12, tiers=(TierSpec("1h", 3600.0, 72),),
                          nvlink_raw_length=12, nvlink_tiers=(TierSpec("1h", 3600.0, 72),))
HALF_HOURS = (TierSpec("30m", 1800.0, 100), TierSpec("1h", 3600.0, 72))
HALF_HOURS_TIER = WindowConfig(step_s=600.0, raw_length=12, tiers=HALF_HOURS,
                               nvlink_raw_length=12, nvlink_tiers=HALF_HOURS)


# ---- the computation before, verbatim -----------------------------------------------------------
def _old_hourly(view: ScopeView, metric: str, hours: int) -> F64:
    win, res = recent(view, metric, hours * HOUR)
    step = view.step_s if res == "raw" else next(
        t.step_s for t in view.tier_specs if t.name == res)
    per = max(1, round(HOUR / step))
    flat: F64 = np.nan_to_num(win[:, -hours * per:]).astype(np.float64)
    if flat.shape[1] < hours * per:
        flat = np.pad(flat, ((0, 0), (hours * per - flat.shape[1], 0)))
    out: F64 = flat.reshape(len(flat), hours, per).sum(axis=2)
    return out


def _old_growth(det: DynamicThresholds, nvl: ScopeView) -> tuple[F64, F64, object]:
    hours = det.c.growth.block_h * det.c.growth.blocks
    per_hour: F64 = sum((_old_hourly(nvl, m, hours) for m in NVL_ALL),
                        np.zeros((len(nvl), hours)))
    rate, ttf, days = assess(per_hour, det.c.growth)
    return rate, ttf, days if det.c.fitted_days_keep_watch else None


def _old_active_hours(nvl: ScopeView, hours: int) -> npt.NDArray[np.int64]:
    out: npt.NDArray[np.int64] = np.sum(sum(_old_hourly(nvl, m, hours) for m in NVL_ALL) > 0,
                                        axis=1)
    return out


# ---- views -------------------------------------------------------------------------------------
class Whole:
    """A scope that cannot read part of its entities (no `window_slots`)."""

    def __init__(self, w: ScopeWindows) -> None:
        self._w = w

    def __getattr__(self, name: str) -> object:
        if name in ("window_slots", "tier_version"):
            raise AttributeError(name)
        return getattr(self._w, name)

    def __len__(self) -> int:
        return len(self._w)


class Spy:
    """Records how many slots each window read of the scope returned."""

    def __init__(self, w: ScopeWindows) -> None:
        self._w = w
        self.widest = 0

    def __getattr__(self, name: str) -> object:
        if name == "tier_version":
            raise AttributeError(name)  # no memo: every call reads
        return getattr(self._w, name)

    def __len__(self) -> int:
        return len(self._w)

    def window(self, metric: str, n: int, tier: str | None = None, stat: str = "agg"
               ) -> npt.NDArray[np.float32]:
        out = self._w.window(metric, n, tier, stat)
        self.widest = max(self.widest, len(out))
        return out

    def window_slots(self, metric: str, n: int, slots: slice, tier: str | None = None,
                     stat: str = "agg") -> npt.NDArray[np.float32]:
        out = self._w.window_slots(metric, n, slots, tier, stat)
        self.widest = max(self.widest, len(out))
        return out


class View:
    def __init__(self, store: WindowStore) -> None:
        self.store = store

    def scope(self, scope: Scope) -> ScopeView:
        return self.store.scopes[scope]  # type: ignore[return-value]

    def events_since(self, ts: float) -> Sequence[EventView]:
        return []


def _same(a: object, b: object, where: str) -> None:
    if a is None or b is None:
        assert a is None and b is None, where
        return
    assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), where
    assert a.dtype == b.dtype and a.shape == b.shape, where
    assert np.array_equal(a, b, equal_nan=True), where


def _same_findings(a: list[Finding], b: list[Finding], where: str) -> None:
    assert [f.rule for f in a] == [f.rule for f in b], where
    for x, y in zip(a, b, strict=True):
        for p, q in ((x.risk, y.risk), (x.value, y.value), (x.ttf_h, y.ttf_h),
                     (x.growth, y.growth)):
            _same(p, q, f"{where}: {x.rule}")


def _links(nodes: Sequence[int]) -> list[Entity]:
    return [Entity.nvlink(f"n{n}", g, lk) for n in nodes for g in range(2) for lk in range(3)]


def _run(config: WindowConfig, seed: int, check: object) -> None:
    """60 hours of NVLink counters: some links' errors grow, some are steady carriers, most
    trickle or are silent; NaN samples, missing steps, nodes joining and leaving, and a
    compaction. `check(view, i)` runs every hour and at a few odd steps."""
    rng = np.random.default_rng(seed)
    store = WindowStore(config)
    view = View(store)
    k0 = int(store.step_of(np.array([T0]))[0])
    per_h = int(HOUR / config.step_s)
    compact = per_h * 40 + 2
    for i in range(per_h * 60):
        k, now = k0 + i, T0 + config.step_s * i
        store.advance(k)
        nodes = [0, 1, 2, 3] + ([4] if 10 * per_h <= i < 30 * per_h else []) \
            + ([5, 6] if i >= compact else [])
        if i == compact:
            done = store.forget(now + store[Scope.NVLINK].horizon_s - 5 * HOUR)
            assert done is not None and len(done.dropped[Scope.NVLINK]) > 0
        if rng.random() < 0.04:  # a whole missed step
            continue
        w = store[Scope.NVLINK]
        ents = _links(nodes)
        slots = np.array([w.slots_for_entity(e, store.registry, now) for e in ents], np.int32)
        v = np.full((len(w.metrics), len(ents)), np.nan, np.float32)
        node = np.array([int(e.node[1:]) for e in ents])
        growing = 0.002 * np.exp(i / (6.0 * per_h))  # e-folds every 6 h
        lam = np.where(node == 0, growing, np.where(node == 1, 0.3, 0.003))
        for j in range(len(w.metrics)):
            if w.is_counter[j]:
                v[j] = rng.poisson(lam) * rng.choice([1.0, 0.5, 1e6], len(ents),
                                                     p=[0.8, 0.15, 0.05])
            else:
                v[j] = 1.0
            v[j, rng.random(len(ents)) < 0.05] = np.nan
            if w.is_counter[j]:  # what hour sums and float widening must not change
                v[j, rng.random(len(ents)) < 0.03] = -0.0
                v[j, rng.random(len(ents)) < 0.002] = 3e38  # near float32's largest
        w.write(slots, np.full(len(ents), k, np.int64), v)
        if i % per_h == 0 or i % 37 == 0:
            check(view, i)  # type: ignore[operator]


@pytest.mark.slow
@pytest.mark.parametrize("config", [HOURS_TIER, HALF_HOURS_TIER], ids=["1h", "30m"])
def test_sliced_growth_and_hours_are_the_whole_ones(config: WindowConfig,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    det = DynamicThresholds()
    seen = {"rated": 0, "days": 0, "active": 0, "checks": 0}

    def check(view: View, i: int) -> None:
        w = view.store[Scope.NVLINK]
        want = _old_growth(det, w)  # type: ignore[arg-type]
        want_h = _old_active_hours(w, 6)  # type: ignore[arg-type]
        for chunk, v in ((1, w), (4, w), (7, w), (1 << 20, w), (4, Whole(w))):
            monkeypatch.setattr(nvlink, "SLOT_CHUNK", chunk)
            got = det.nvlink.growth(v)  # type: ignore[arg-type]
            for a, b, name in zip(got, want, ("rate", "ttf", "days"), strict=True):
                _same(a, b, f"step {i}, slices of {chunk}: {name}")
            _same(active_hours(v, 6), want_h, f"step {i}, slices of {chunk}: hours")  # type: ignore[arg-type]
        seen["rated"] += int(np.isfinite(want[0]).sum())
        seen["days"] += int(np.sum(want[2])) if want[2] is not None else 0  # type: ignore[call-overload]
        seen["active"] += int(np.sum(want_h > 0))
        seen["checks"] += 1

    _run(config, 11, check)
    # The data exercised what is compared: fitted growths, streams read as days, error hours.
    assert seen["checks"] > 60 and seen["rated"] > 0 and seen["days"] > 0 and seen["active"] > 0


def test_sliced_findings_are_the_whole_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """The NVLink findings made minute by minute with slices of 3 slots equal those made
    with the whole scope at once, through hour boundaries, churn and a compaction."""
    sliced, whole = DynamicThresholds(), DynamicThresholds()
    found = {"fired": 0}

    def check(view: View, i: int) -> None:
        nvl = view.scope(Scope.NVLINK)
        monkeypatch.setattr(nvlink, "SLOT_CHUNK", 3)
        a = sliced.nvlink.findings(nvl)
        monkeypatch.setattr(nvlink, "SLOT_CHUNK", 1 << 20)
        b = whole.nvlink.findings(nvl)
        _same_findings(a, b, f"step {i}")
        found["fired"] += int(np.sum(a[0].risk > 0))

    _run(HOURS_TIER, 5, check)
    assert found["fired"] > 0


def test_the_growth_fit_reads_a_slice_of_links_at_a_time(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setattr(nvlink, "SLOT_CHUNK", 4)
    spies: list[Spy] = []

    def check(view: View, i: int) -> None:
        spy = Spy(view.store[Scope.NVLINK])
        DynamicThresholds().nvlink.growth(spy)  # type: ignore[arg-type]
        active_hours(spy, 6)  # type: ignore[arg-type]
        spies.append(spy)

    _run(HOURS_TIER, 2, check)
    assert max(len(s) for s in spies) > 4
    assert max(s.widest for s in spies) <= 4


def test_slot_ranges() -> None:
    store = WindowStore(HOURS_TIER)
    w = store[Scope.NVLINK]
    for e in _links([0, 1]):
        w.slots_for_entity(e, store.registry, T0)
    assert slot_ranges(w, 5) == [slice(0, 5), slice(5, 10), slice(10, 12)]
    assert slot_ranges(w, 12) == [slice(0, 12)]
    assert slot_ranges(Whole(w), 5) == [slice(0, 12)]  # type: ignore[arg-type]
