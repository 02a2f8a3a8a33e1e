import numpy as np
import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, EventFrame, Frame
from service.stages.ingest import EventLog, Ingestor
from service.stages.windows import WindowStore
from tests.pipeline.builders import T0

GPU = Scope.GPU
COLS = CATALOG.columns(GPU)


def _col(name: str) -> int:
    return CATALOG.column(GPU, name)


def _frame(table: EntityTable, rows: list[int], ts: list[float], **metrics: list[float]) -> Frame:
    v = np.full((len(rows), len(COLS)), np.nan)
    for name, vals in metrics.items():
        v[:, _col(name)] = vals
    return Frame(table, np.array(rows, np.int32), np.array(ts, float), v)


def _setup() -> tuple[WindowStore, Ingestor, EntityTable]:
    store = WindowStore()
    table = EntityTable(GPU, [Entity.gpu("n0", 0), Entity.gpu("n0", 1)])
    return store, Ingestor(store, EventLog()), table


def _ingest(ing: Ingestor, frame: Frame, now: float = T0 + 3600) -> tuple[int, int, list[str]]:
    b = Batch()
    b.add(frame)
    r = ing.ingest(b, now)
    return r.accepted, r.rejected, [str(x) for x in r.rejections]


def test_nan_cells_are_missing_and_infinities_are_refused_cell_by_cell() -> None:
    store, ing, t = _setup()
    acc, rej, why = _ingest(ing, _frame(t, [0, 1], [T0, T0], gpu_temp=[np.inf, 50.0],
                                        power_draw=[300.0, np.nan]))
    assert (acc, rej) == (2, 1)
    assert "gpu_temp value inf is outside its valid range [-40, 200] degC" in why[0]
    assert "n0:gpu0" in why[0] and "gpu_temp" in why[0]
    assert store[GPU].latest("power_draw")[0] == 300
    assert np.isnan(store[GPU].latest("gpu_temp")[0])


def test_negative_counters_are_refused_and_decreasing_persistent_ones_held_back() -> None:
    store, ing, t = _setup()
    _ingest(ing, _frame(t, [0, 1], [T0, T0], ecc_sbe_aggregate=[10.0, 5.0]))
    b = Batch()
    b.add(_frame(t, [0, 1], [T0 + 5, T0 + 5], ecc_sbe_aggregate=[4.0, -1.0],
                 gpu_temp=[50.0, 51.0]))
    r = ing.ingest(b, T0 + 3600)
    assert (r.accepted, r.rejected, r.counter_drops) == (3, 1, 1)
    assert any("ecc_sbe_aggregate value -1 is outside its valid range [0, 2^63)" in str(w)
               for w in r.rejections)
    # The lower reading is what the device said: the sinks get it ...
    (clean,) = r.clean.frames.values()
    assert clean.values[0, _col("ecc_sbe_aggregate")] == 4.0
    # ... but it does not move the counter's baseline: the next real value chains on.
    assert store[GPU].latest("ecc_sbe_aggregate").tolist() == [10, 5]


def test_volatile_counter_drop_is_a_reset_not_a_spike() -> None:
    store, ing, t = _setup()
    resets = []
    for i, v in enumerate([100.0, 103.0, 2.0, 4.0]):  # driver reload between 103 and 2
        b = Batch()
        b.add(_frame(t, [0], [T0 + 5 * i], ecc_sbe_volatile=[v]))
        r = ing.ingest(b, T0 + 3600)
        assert r.rejected == 0
        resets.append(r.resets)
    assert resets == [0, 0, 1, 0]
    deltas = store[GPU].window("ecc_sbe_volatile", 4)[0]
    assert np.isnan(deltas[0]) and deltas[1:].tolist() == [3, 2, 2]


def test_out_of_order_rows_are_stored_not_scored_and_duplicates_merge_last_write_wins(
        ) -> None:
    store, ing, t = _setup()
    b = Batch()
    b.add(_frame(t, [0, 0, 0, 1, 0], [T0 + 10, T0 + 10, T0 + 5, T0, T0 + 15],
                 gpu_temp=[50.0, 51.0, 52.0, 53.0, 54.0]))
    r = ing.ingest(b, T0 + 3600)
    assert (r.accepted, r.rejected, r.late) == (5, 0, 1)
    # The late row reaches the sinks as read; the window keeps only what it can place.
    (clean,) = r.clean.frames.values()
    assert sorted(set(clean.ts.tolist())) == [T0, T0 + 5, T0 + 10, T0 + 15]
    late = clean.values[clean.ts == T0 + 5, _col("gpu_temp")]
    assert late.tolist() == [52.0]
    # The second row of T0+10 overwrote the first, as InfluxDB overwrites a point.
    assert store[GPU].window("gpu_temp", 2)[0].tolist() == [51, 54]
    # Across batches too: an older sample than the last accepted one is stored, not scored ...
    assert _ingest(ing, _frame(t, [0], [T0 + 12], gpu_temp=[1.0]))[:2] == (1, 0)
    assert store[GPU].window("gpu_temp", 2)[0].tolist() == [51, 54]
    # ... and one of the last step (a resend, or a point less than a step later) merges.
    assert _ingest(ing, _frame(t, [0], [T0 + 16], gpu_temp=[55.0]))[:2] == (1, 0)
    assert store[GPU].window("gpu_temp", 2)[0].tolist() == [51, 55]


def test_a_spool_drained_after_a_long_outage_reaches_the_sinks() -> None:
    store, ing, t = _setup()
    _ingest(ing, _frame(t, [1], [T0 + 3600], gpu_temp=[40.0]), now=T0 + 3600)
    b = Batch()  # gpu0's agent was cut off for an hour; its spool is older than the window
    b.add(_frame(t, [0, 0], [T0, T0 + 5], ecc_sbe_volatile=[3.0, -1.0], gpu_temp=[50, 51]))
    r = ing.ingest(b, T0 + 3605)
    # A negative counter is junk even in a late row: refused and counted, as on time.
    assert (r.late, r.rejected) == (2, 1)
    assert "ecc_sbe_volatile value -1 is outside" in str(r.rejections[0])
    (clean,) = r.clean.frames.values()
    assert clean.values[:, _col("gpu_temp")].tolist() == [50, 51]
    assert np.isnan(clean.values[1, _col("ecc_sbe_volatile")])
    gpu0 = store[GPU].slot(Entity.gpu("n0", 0))
    assert gpu0 is not None and np.isnan(store[GPU].latest("gpu_temp")[gpu0])


def test_a_resent_counter_adds_nothing_and_a_later_reading_in_the_step_adds_its_increase(
        ) -> None:
    store, ing, t = _setup()
    for ts, v in ((T0, 10.0), (T0 + 5, 12.0), (T0 + 5, 12.0), (T0 + 6, 15.0)):
        acc, rej, _ = _ingest(ing, _frame(t, [0], [ts], ecc_sbe_volatile=[v], gpu_temp=[40.0]))
        assert (acc, rej) == (2, 0)
    deltas = store[GPU].window("ecc_sbe_volatile", 2)[0]
    assert deltas.tolist() == [pytest.approx(np.nan, nan_ok=True), 5.0]
    assert store[GPU].latest("ecc_sbe_volatile")[0] == 15.0


def test_bad_timestamps_are_refused() -> None:
    _store, ing, t = _setup()
    acc, rej, why = _ingest(ing, _frame(t, [0, 1], [np.nan, T0 + 99999], gpu_temp=[1.0, 2.0]),
                            now=T0)
    assert acc == 0 and rej == 2
    assert "not a finite number" in why[0] and "future" in why[1]


def test_oversized_batches_keep_what_fits() -> None:
    store = WindowStore()
    ing = Ingestor(store, EventLog(), max_samples=len(COLS) * 3)
    table = EntityTable(GPU, [Entity.gpu("n0", g) for g in range(5)])
    v = np.full((5, len(COLS)), 1.0)
    for name in ("gpu_slowdown_temp", "gpu_shutdown_temp", "mem_max_temp"):
        v[:, _col(name)] = 90.0  # a limit of 1 degC is out of range
    b = Batch()
    b.add(Frame(table, np.arange(5, dtype=np.int32), np.full(5, T0), v))
    r = ing.ingest(b, T0)
    assert r.accepted == 3 * len(COLS)
    assert "batch too large" in str(r.rejections[0])
    assert len(r.clean.frames[GPU]) == 3


def test_events_are_validated() -> None:
    _store, ing, _ = _setup()
    ev = EventFrame()
    ev.add("n0:gpu1", T0, "xid", 79)
    ev.add("n0:gpu1", T0, "xid", 1.5)
    ev.add("n0:gpu1:nvlink0", T0, "xid", 79)
    ev.add("n0:gpu1", T0, "gpu_temp", 79)
    ev.add("n0::", T0, "xid", 79)
    r = ing.ingest(Batch(events=ev), T0)
    assert r.accepted == 1 and r.rejected == 4
    reasons = " | ".join(str(x) for x in r.rejections)
    assert "non-negative integer" in reasons and "belong to gpu" in reasons
    assert "unknown event metric" in reasons and "not an entity key" in reasons
    assert [e.value for e in ing.events.since(0)] == [79]


def test_ib_ber_is_derived_from_symbol_errors_and_rate() -> None:
    store = WindowStore()
    ing = Ingestor(store, EventLog())
    table = EntityTable(Scope.IB_PORT, [Entity.ib_port("n0", "mlx5_0", 1)])
    cols = CATALOG.columns(Scope.IB_PORT)
    for i, sym in enumerate([0.0, 4.0]):
        v = np.full((1, len(cols)), np.nan)
        v[0, CATALOG.column(Scope.IB_PORT, "ib_symbol_error")] = sym
        v[0, CATALOG.column(Scope.IB_PORT, "ib_rate")] = 400
        b = Batch()
        b.add(Frame(table, np.array([0], np.int32), np.array([T0 + 5 * i]), v))
        ing.ingest(b, T0 + 60)
    ber = store[Scope.IB_PORT].latest("ib_ber")[0]
    assert ber == 4 / (400e9 * 5)


def test_a_persistent_counter_that_stays_lower_is_a_new_device() -> None:
    store, ing, t = _setup()
    readings = [500.0, 3.0, 4.0, 4.0, 6.0]  # GPU swapped after the first reading
    held, rebased = [], []
    for i, v in enumerate(readings):
        b = Batch()
        b.add(_frame(t, [0], [T0 + 5 * i], ecc_sbe_aggregate=[v]))
        r = ing.ingest(b, T0 + 3600)
        assert r.rejected == 0
        held.append(r.counter_drops)
        rebased.append(r.rebased)
    assert held == [0, 1, 1, 0, 0] and rebased == [0, 0, 0, 1, 0]
    assert store[GPU].latest("ecc_sbe_aggregate")[0] == 6
    deltas = store[GPU].window("ecc_sbe_aggregate", 5)[0]
    assert np.isnan(deltas[:4]).all() and deltas[4] == 2
