import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity
from service.stages.windows import TierSpec, WindowConfig, WindowStore
from tests.pipeline.builders import T0


def _store(**kw: object) -> WindowStore:
    return WindowStore(WindowConfig(**kw))  # type: ignore[arg-type]


def _write(store: WindowStore, ts: float, temp: float, sbe_delta: float) -> None:
    w = store[Scope.GPU]
    s = w.slots_for_entity(Entity.gpu("n0", 0), store.registry)
    k = int(store.step_of(np.array([ts]))[0])
    store.advance(k)
    vals = np.full((len(w.metrics), 1), np.nan, np.float32)
    vals[w.col("gpu_temp"), 0] = temp
    vals[w.col("ecc_sbe_volatile"), 0] = sbe_delta
    w.write(np.array([s], np.int32), np.array([k]), vals)


def test_rollups_hold_mean_max_min_for_gauges_and_sums_for_counters() -> None:
    store = _store(ranges=None)  # every gauge keeps both (tests/pipeline/test_window_ranges.py)
    for i in range(12 * 3 + 2):  # three full minutes and a bit
        _write(store, T0 + 5 * i, temp=float(i), sbe_delta=1.0)
    w = store[Scope.GPU]
    mean = w.window("gpu_temp", 3, tier="1m")[0]
    assert mean.tolist() == pytest.approx([5.5, 17.5, 29.5])
    assert w.window("gpu_temp", 3, tier="1m", stat="hi")[0].tolist() == [11, 23, 35]
    assert w.window("gpu_temp", 3, tier="1m", stat="lo")[0].tolist() == [0, 12, 24]
    assert w.window("ecc_sbe_volatile", 3, tier="1m")[0].tolist() == [12, 12, 12]
    # A counter has no range of its own: asking for its max gives the bucket sum.
    assert w.window("ecc_sbe_volatile", 1, tier="1m", stat="hi")[0].tolist() == [12]


def test_missing_data_stays_missing_through_the_tiers() -> None:
    store = _store()
    _write(store, T0, temp=50, sbe_delta=0)
    _write(store, T0 + 300, temp=50, sbe_delta=0)  # a 5-minute gap
    w = store[Scope.GPU]
    raw = w.window("gpu_temp", 61)[0]
    assert raw[0] == 50 and raw[-1] == 50 and np.isnan(raw[1:-1]).all()
    minutes = w.window("gpu_temp", 5, tier="1m")[0]
    assert minutes[0] == 50 and np.isnan(minutes[1:]).all()


def test_a_jump_beyond_the_raw_window_clears_it() -> None:
    store = _store(raw_length=10)
    _write(store, T0, temp=50, sbe_delta=0)
    _write(store, T0 + 5 * 100, temp=60, sbe_delta=0)
    raw = store[Scope.GPU].window("gpu_temp", 10)[0]
    assert raw[-1] == 60 and np.isnan(raw[:-1]).all()


def test_a_gap_longer_than_every_ring_keeps_what_came_before_it_in_the_tiers() -> None:
    """The store's clock moves only when data arrives: after a silence of hours the raw rows
    are reused, and what they held must reach the minute and hour tiers first."""
    store = _store(tiers=(TierSpec("1m", 60, 120), TierSpec("1h", 3600, 24)))
    for i in range(18):  # a minute and a half, then three hours of silence
        _write(store, T0 + 5 * i, temp=40 + i, sbe_delta=1)
    _write(store, T0 + 3 * 3600 + 30, temp=90, sbe_delta=0)
    w = store[Scope.GPU]
    hours = w.window("gpu_temp", 3, tier="1h")[0]
    assert hours[0] == pytest.approx((45.5 + 54.5) / 2)  # the mean of its minutes' means
    assert np.isnan(hours[1:]).all()
    assert w.window("ecc_sbe_volatile", 3, tier="1h")[0][0] == 18
    # A gap inside one hour closes the minutes only: the hour goes on filling.
    store = _store(tiers=(TierSpec("1m", 60, 120), TierSpec("1h", 3600, 24)))
    _write(store, T0, temp=40, sbe_delta=1)
    _write(store, T0 + 1800, temp=60, sbe_delta=1)
    _write(store, T0 + 3600 + 120, temp=0, sbe_delta=0)
    assert store[Scope.GPU].window("gpu_temp", 1, tier="1h")[0].tolist() == [50]
    assert store[Scope.GPU].window("ecc_sbe_volatile", 1, tier="1h")[0].tolist() == [2]


def test_hour_tier_rolls_up_from_minutes() -> None:
    store = _store(tiers=(TierSpec("1m", 60, 120), TierSpec("1h", 3600, 24)))
    for i in range(12 * 60 * 2 + 24):
        _write(store, T0 + 5 * i, temp=40 + (i // 720) * 10, sbe_delta=1)
    w = store[Scope.GPU]
    assert w.window("gpu_temp", 2, tier="1h")[0].tolist() == pytest.approx([40, 50])
    assert w.window("ecc_sbe_volatile", 2, tier="1h")[0].tolist() == [720, 720]


def test_tier_steps_must_divide() -> None:
    with pytest.raises(ValueError, match="not a multiple"):
        _store(tiers=(TierSpec("7s", 7, 10),))


def test_links_find_their_gpu_and_node() -> None:
    store = _store()
    nvl = store[Scope.NVLINK]
    s = nvl.slots_for_entity(Entity.nvlink("n7", 3, 5), store.registry)
    gpu_slot = nvl.gpu_of[s]
    assert store[Scope.GPU].entities[gpu_slot] == Entity.gpu("n7", 3)
    assert store.registry.nodes[nvl.node_of[s]] == "n7"


def test_growth_keeps_data() -> None:
    store = _store()
    w = store[Scope.GPU]
    _write(store, T0, temp=42, sbe_delta=0)
    for g in range(1, 300):
        w.slots_for_entity(Entity.gpu("n1", g), store.registry)
    assert w.capacity >= 300
    assert w.window("gpu_temp", 1)[0, 0] == 42
