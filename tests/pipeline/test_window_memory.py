"""What the window store holds, and no more. The rollup tiers keep a gauge's max or min only
where a reader asks for it (`WindowConfig.ranges`): what is kept is bit for bit what the layout
keeping every gauge's range gives (NaNs, gaps, late rows, compaction), the predictor's hourly
inputs are the same, and a read of a range not kept is an error rather than a silent mean. A
bucket's close re-reads its rows a chunk of slots at a time, with the numbers of one pass."""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt
import pytest

from collectors.catalog import CATALOG, Kind, Scope
from collectors.frames import Entity
from models.predictor.features import HOURLY
from service.stages.windows import RANGES, TierSpec, WindowConfig, WindowStore
from tests.models.test_peer_baseline import Fleet
from tests.pipeline.builders import T0, Rounds

TIERS = (TierSpec("1m", 60, 12), TierSpec("5m", 300, 6))
LEAN = WindowConfig(raw_length=30, tiers=TIERS, nvlink_raw_length=24, nvlink_tiers=TIERS)
FULL = dataclasses.replace(LEAN, ranges=None)


def test_the_default_keeps_only_the_ranges_a_reader_asks_for() -> None:
    store = WindowStore()
    gpu, ib, nvl = store[Scope.GPU], store[Scope.IB_PORT], store[Scope.NVLINK]
    assert [gpu.metrics[c].name for c in gpu.hi_cols] == ["gpu_temp", "mem_temp"]
    assert [gpu.metrics[c].name for c in gpu.lo_cols] == ["gpu_temp_margin"]
    for t in gpu.tiers:
        assert t.hi is not None and t.hi.shape[0] == 2
        assert t.lo is not None and t.lo.shape[0] == 1
    for t in (*ib.tiers, *nvl.tiers):
        assert t.hi is None and t.lo is None
    full = WindowStore(dataclasses.replace(WindowConfig(), ranges=None))[Scope.GPU]
    gauges = [m.name for m in full.metrics if m.kind is Kind.GAUGE]
    assert [full.metrics[c].name for c in full.hi_cols] == gauges
    assert [full.metrics[c].name for c in full.lo_cols] == gauges


def _one_gpu(store: WindowStore, minutes: int) -> None:
    w = store[Scope.GPU]
    s = w.slots_for_entity(Entity.gpu("n0", 0), store.registry)
    k0 = int(store.step_of(np.array([T0]))[0])
    for i in range(12 * minutes + 2):
        store.advance(k0 + i)
        vals = np.full((len(w.metrics), 1), float(i), np.float32)
        w.write(np.array([s], np.int32), np.array([k0 + i]), vals)


def test_a_read_of_a_range_not_kept_is_an_error() -> None:
    store = WindowStore(LEAN)
    _one_gpu(store, 2)
    w = store[Scope.GPU]
    assert w.window("gpu_temp", 1, tier="1m", stat="hi")[0].tolist() == [23]
    assert w.window("gpu_temp_margin", 1, tier="1m", stat="lo")[0].tolist() == [12]
    for metric, stat in (("gpu_temp", "lo"), ("power_draw", "hi"), ("gpu_temp_margin", "hi")):
        with pytest.raises(KeyError, match=r"WindowConfig\.ranges"):
            w.window(metric, 1, tier="1m", stat=stat)
    # A counter's or a state's bucket is its own range, and a raw sample its own max and min:
    # those read agg as before.
    assert w.window("ecc_sbe_volatile", 1, tier="1m", stat="hi")[0].tolist() == [
        float(sum(range(12, 24)))]
    assert w.window("power_draw", 1, stat="lo")[0].tolist() == [25]
    with pytest.raises(ValueError, match="unknown stat"):
        w.window("gpu_temp", 1, tier="1m", stat="max")


@pytest.mark.parametrize("ranges", [(("gpu_temperature", "hi"),), (("ecc_sbe_volatile", "hi"),),
                                    (("gpu_temp", "max"),)])
def test_a_range_that_is_no_gauge_stat_is_refused(ranges: tuple[tuple[str, str], ...]) -> None:
    with pytest.raises(ValueError, match="window ranges"):
        WindowConfig(ranges=ranges)


def test_every_default_range_is_a_catalog_gauge() -> None:
    gauges = {m.name for m in CATALOG if m.kind is Kind.GAUGE}
    assert {m for m, _ in RANGES} <= gauges


def _values(rng: np.random.Generator, m: int, n: int) -> npt.NDArray[np.float32]:
    v = rng.normal(50, 30, (m, n)).astype(np.float32)
    v[rng.random((m, n)) < 0.3] = np.nan
    v[rng.random((m, n)) < 0.02] = np.float32(1e37)  # large: sums of a bucket stay finite
    return v


@pytest.mark.parametrize("seed", range(3))
def test_kept_ranges_equal_the_layout_that_kept_every_range(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lean, full = WindowStore(LEAN), WindowStore(FULL)
    names = [f"n{i}" for i in range(10)]
    k0 = int(lean.step_of(np.array([T0]))[0])
    k = k0
    for step in range(700):
        r = rng.random()
        k += 1 if r < 0.9 else int(rng.integers(2, 15)) if r < 0.99 else 40
        now = T0 + 5.0 * (k - k0)
        for store in (lean, full):
            store.advance(k)
        for sc in (Scope.GPU, Scope.IB_PORT):
            active = [x for x in names if rng.random() < 0.7]
            ents = [Entity.gpu(x, 0) if sc is Scope.GPU else Entity.ib_port(x, "mlx5_0", 1)
                    for x in active]
            for back in (0, int(rng.integers(0, 8))):  # this step, and a late or resent row
                pick = [e for e in ents if rng.random() < (0.9 if back == 0 else 0.15)]
                if not pick:
                    continue
                ks = np.full(len(pick), k - back, np.int64)
                vals = _values(rng, len(lean[sc].metrics), len(pick))
                for store in (lean, full):
                    w = store[sc]
                    slots = np.array([w.slots_for_entity(e, store.registry, now) for e in pick],
                                     np.int32)
                    w.write(slots, ks, vals)
        if step % 7 == 0:
            at = now + lean[Scope.GPU].horizon_s - float(rng.uniform(0, 60))
            for store in (lean, full):
                store.forget(at)
        if step % 5 == 0:
            _same(lean, full)
    _same(lean, full)


def _same(lean: WindowStore, full: WindowStore) -> None:
    for sc in (Scope.GPU, Scope.IB_PORT):
        a, b = lean[sc], full[sc]
        assert a.entities == b.entities
        for i, (ta, tb) in enumerate(zip(a.tiers, b.tiers, strict=True)):
            assert np.array_equal(ta.agg, tb.agg, equal_nan=True)
            for mine, theirs, cols, all_of in ((ta.hi, tb.hi, a.hi_cols, b.hi_cols),
                                               (ta.lo, tb.lo, a.lo_cols, b.lo_cols)):
                if not len(cols):
                    assert mine is None
                    continue
                assert mine is not None and theirs is not None
                want = theirs[np.searchsorted(all_of, cols)]
                assert np.array_equal(mine, want, equal_nan=True), f"{sc} tier {i}"
        for metric, stat in RANGES:
            if metric in a._col:
                for t in a.tier_specs:
                    np.testing.assert_array_equal(a.window(metric, t.length, t.name, stat),
                                                  b.window(metric, t.length, t.name, stat))


def test_the_predictors_hourly_inputs_are_the_same_as_with_every_range_kept() -> None:
    """The features read the hour tier's peaks and least margin (built from a finer tier's):
    the same numbers from the lean layout as from the one keeping every range."""
    tiers = (TierSpec("10m", 600, 12), TierSpec("1h", 3600, 24))
    lean_cfg = WindowConfig(step_s=60.0, raw_length=30, tiers=tiers, nvlink_raw_length=30,
                            nvlink_tiers=tiers)
    fleets = [Fleet(Rounds(nodes=3, gpus=4, links=2, ports=2), step=60.0, seed=5, config=c)
              for c in (lean_cfg, dataclasses.replace(lean_cfg, ranges=None))]
    for k in range(int(5 * 3600 / 60)):
        t = T0 + 60.0 * k
        for f in fleets:
            f._noise(t)
            gone = ("n0:gpu1",) if k % 9 == 0 else ()
            f.ingest.ingest(f.r.batch(t, missing=gone), now=t)
    for scope, hourly in HOURLY.items():
        lean, full = (hourly(f.view, 4) for f in fleets)
        assert np.isfinite(lean).any()
        np.testing.assert_array_equal(lean, full, err_msg=str(scope))


@pytest.mark.parametrize("limit", ["ROLLUP_CHUNK", "ROLLUP_BYTES"])
def test_a_bucket_closed_a_few_slots_at_a_time_equals_one_closed_whole(
        monkeypatch: pytest.MonkeyPatch, limit: str) -> None:
    """The re-read close works through the slots in chunks (it bounds the hour's temporaries):
    chunks of 3 slots give the tiers one chunk gives, NaNs and the IB and NVLink scopes too;
    so do chunks bounded by bytes (one slot's rows of every metric, here: one slot)."""
    import service.stages.windows as windows

    rng = np.random.default_rng(7)
    whole, chunked = WindowStore(FULL), WindowStore(FULL)
    for store in (whole, chunked):
        for w in store.scopes.values():
            w.reread_rollups = True  # every bucket from its rows, the first tier's too
    k0 = int(whole.step_of(np.array([T0]))[0])
    ents = {Scope.GPU: [Entity.gpu(f"n{i}", 0) for i in range(10)],
            Scope.NVLINK: [Entity.nvlink(f"n{i}", 0, j) for i in range(10) for j in range(2)],
            Scope.IB_PORT: [Entity.ib_port(f"n{i}", "mlx5_0", 1) for i in range(10)]}
    vals = {sc: _values(rng, len(whole[sc].metrics), len(e) * 12 * 40)
            for sc, e in ents.items()}
    for store, chunk in ((whole, 1 << 40), (chunked, 3 if limit == "ROLLUP_CHUNK" else 1)):
        monkeypatch.setattr(windows, limit, chunk)
        for i in range(12 * 40):
            store.advance(k0 + i)
            for sc, es in ents.items():
                w = store[sc]
                slots = np.array([w.slots_for_entity(e, store.registry) for e in es], np.int32)
                v = vals[sc][:, i * len(es):(i + 1) * len(es)]
                w.write(slots, np.full(len(es), k0 + i, np.int64), v)
    assert chunked[Scope.NVLINK].capacity > 3
    for sc in ents:
        for ta, tb in zip(whole[sc].tiers, chunked[sc].tiers, strict=True):
            assert np.array_equal(ta.held, tb.held)
            for x, y in ((ta.agg, tb.agg), (ta.hi, tb.hi), (ta.lo, tb.lo)):
                assert (x is None) == (y is None)
                if x is not None and y is not None:
                    assert np.array_equal(x, y, equal_nan=True), sc
