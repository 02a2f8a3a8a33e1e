"""Splitting multi-timestamp chunks into rounds."""

from __future__ import annotations

import numpy as np

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from models.evaluation.rounds import Rounder, split

TABLE = EntityTable(Scope.GPU, [Entity.gpu("n0", g) for g in range(2)])
WIDTH = len(CATALOG.columns(Scope.GPU))


def chunk(times: list[float], skew: float = 0.0) -> Batch:
    ts = np.repeat(np.array(times), 2)
    ts[1::2] += skew  # gpu1 runs a little late
    rows = np.tile(np.arange(2, dtype=np.int32), len(times))
    values = np.arange(len(ts) * WIDTH, dtype=np.float64).reshape(len(ts), WIDTH)
    b = Batch()
    b.add(Frame(TABLE, rows[::-1].copy(), ts[::-1].copy(), values[::-1].copy()))  # any order
    b.events.add("n0:gpu1", times[1] + 1, "xid", 79)
    return b


def test_split_gives_one_round_per_step_in_time_order() -> None:
    rounds = split(chunk([300.0, 600.0, 900.0], skew=4.0), 300.0)
    assert [r.step for r in rounds] == [1, 2, 3]
    assert all(len(r.batch.frames[Scope.GPU]) == 2 for r in rounds)
    assert [r.now for r in rounds] == [304.0, 604.0, 904.0]  # skewed rows stay in their round
    assert len(rounds[1].batch.events) == 1 and len(rounds[0].batch.events) == 0
    f = rounds[0].batch.frames[Scope.GPU]
    assert f.entities is TABLE and sorted(f.rows.tolist()) == [0, 1]


def test_a_round_cut_by_a_chunk_boundary_is_joined() -> None:
    first, second = chunk([300.0, 600.0]), chunk([900.0, 1200.0])
    cut = Batch()  # the second half of step 2's rows arrives with the next chunk
    f = first.frames[Scope.GPU]
    late = f.ts == 600.0
    cut.add(f.take(late))
    early = Batch()
    early.add(f.take(~late))
    early.events = first.events
    r = Rounder(300.0)
    out = list(r.feed(early)) + list(r.feed(cut)) + list(r.feed(second)) + list(r.close())
    assert [x.step for x in out] == [1, 2, 3, 4]
    assert len(out[1].batch.frames[Scope.GPU]) == 2


def test_identities_go_with_their_round_alone_or_joined_across_a_chunk_boundary() -> None:
    from collectors.identity import GpuIdentity

    b = chunk([300.0, 600.0])
    b.identity = {"n0:gpu0": GpuIdentity(uuid="GPU-a", at=300.0),
                  "n0:gpu1": GpuIdentity(uuid="GPU-b", at=1200.0)}  # a round of no sample
    rounds = split(b, 300.0)
    assert [r.step for r in rounds] == [1, 2, 4]
    assert [r.batch.identity for r in rounds] == [
        {"n0:gpu0": GpuIdentity(uuid="GPU-a")}, {}, {"n0:gpu1": GpuIdentity(uuid="GPU-b")}]
    assert rounds[2].now == 1200.0 and rounds[2].batch.samples == 0
    # one GPU's identity split over two chunks of the same step: joined, newer on top
    first, second = chunk([300.0, 600.0]), Batch()
    first.identity = {"n0:gpu0": GpuIdentity(uuid="GPU-a", serial="OLD", at=600.0)}
    late = first.frames[Scope.GPU].ts == 600.0
    second.add(first.frames[Scope.GPU].take(late))
    second.identity = {"n0:gpu0": GpuIdentity(serial="S1", driver="550", at=601.0)}
    r = Rounder(300.0)
    out = list(r.feed(first)) + list(r.feed(second)) + list(r.close())
    assert [x.step for x in out] == [1, 2]
    assert out[1].batch.identity == {
        "n0:gpu0": GpuIdentity(uuid="GPU-a", serial="S1", driver="550")}
