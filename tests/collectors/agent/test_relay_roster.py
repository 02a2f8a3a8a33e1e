"""A relay's bodies share one entity table per scope (collectors.agent.relay_roster): whichever
nodes a flush holds, the service decodes the same table again, so its per-table caches hold
(issue 18: through 40 relays the service paid per entity for every body, as each body's
table listed only its own nodes). The samples are exactly the pushes'."""

from __future__ import annotations

import gzip

import numpy as np

from collectors.agent.relay_batch import Push, arrow_body, bodies, read_arrow
from collectors.agent.relay_roster import Roster
from collectors.arrow_batch import Decoder
from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame

T0 = 1.75e9
TEMP = CATALOG.column(Scope.GPU, "gpu_temp")


def _push(node: str, k: int, gpus: int = 2) -> Push:
    table = EntityTable(Scope.GPU, [Entity.gpu(node, g) for g in range(gpus)])
    v = np.full((gpus, len(CATALOG.columns(Scope.GPU))), np.nan)
    v[:, TEMP] = [40.0 + k + g / 10 for g in range(gpus)]
    b = Batch()
    b.add(Frame(table, np.arange(gpus, dtype=np.int32), np.full(gpus, T0 + 5 * k), v))
    return Push(b)


def _samples(push: Push) -> set[tuple[str, float, float]]:
    f = push.batch.frames[Scope.GPU]
    return {(f.entities[int(r)].key, float(t), float(v[TEMP]))
            for r, t, v in zip(f.rows, f.ts, f.values, strict=True)}


def _flush(pushes: list[Push], roster: Roster | None) -> bytes:
    got = list(bodies(pushes, 500_000, roster))
    assert len(got) == 1
    return gzip.decompress(arrow_body(got[0]))


def test_every_flush_of_a_relay_decodes_to_the_same_table() -> None:
    roster, service = Roster(), Decoder()
    # A name is shared from its second flush on; the first lists it in the same order.
    rounds = [["n1", "n2", "n3"], ["n1", "n2", "n3"], ["n2"], ["n3", "n1"], ["n1", "n2", "n3"]]
    tables = []
    for k, nodes in enumerate(rounds):
        pushes = [_push(n, k) for n in nodes]
        roster.prune()
        got = service.decode(_flush(pushes, roster)).batch
        tables.append(got.frames[Scope.GPU].entities)
        # exactly the pushes' samples, whatever else the table lists
        assert _samples(Push(got)) == set().union(*map(_samples, pushes))
    assert all(t is tables[0] for t in tables)
    assert roster.tables_made == 1


def test_without_the_roster_each_node_set_is_a_new_table() -> None:
    """What the service met before: a table per set of nodes a flush happened to hold."""
    service = Decoder()
    a = service.decode(_flush([_push("n1", 0), _push("n2", 0)], None)).batch
    b = service.decode(_flush([_push("n2", 1)], None)).batch
    assert a.frames[Scope.GPU].entities is not b.frames[Scope.GPU].entities


def test_a_node_joining_makes_one_new_table_listing_the_others_in_their_order() -> None:
    roster, service = Roster(), Decoder()
    for k in range(2):
        roster.prune()
        first = service.decode(_flush([_push("n1", k), _push("n2", k)], roster)).batch
    roster.prune()
    joined = service.decode(_flush([_push("n3", 2)], roster)).batch
    t0, t1 = first.frames[Scope.GPU].entities, joined.frames[Scope.GPU].entities
    assert [e.key for e in t1.entities] == [e.key for e in t0.entities] + ["n3:gpu0", "n3:gpu1"]
    for k in (3, 4):  # n3 shared from its second flush: the table its first body listed
        roster.prune()
        again = service.decode(_flush([_push("n3", k), _push("n1", k)], roster)).batch
        assert again.frames[Scope.GPU].entities is t1
    assert roster.tables_made == 2


def test_an_entity_named_by_no_body_for_idle_s_leaves_the_roster() -> None:
    now = [0.0]
    roster = Roster(idle_s=60.0, clock=lambda: now[0])
    for k in range(2):
        roster.prune()
        _flush([_push("n1", -k), _push("gone", -k)], roster)
    for k in range(1, 4):
        now[0] += 30.0
        roster.prune()
        body = read_arrow(gzip.compress(_flush([_push("n1", k)], roster)))
    keys = [e.key for e in body.batch.frames[Scope.GPU].entities.entities]
    assert keys == ["n1:gpu0", "n1:gpu1"]
    assert _samples(body) == _samples(_push("n1", 3))


def test_two_rounds_of_one_node_in_one_flush_stay_two_bodies_on_one_table() -> None:
    roster, service = Roster(), Decoder()
    got = [service.decode(gzip.decompress(arrow_body(b))).batch
           for b in bodies([_push("n1", 0), _push("n2", 0), _push("n1", 1)], 500_000, roster)]
    assert len(got) == 2
    assert got[0].frames[Scope.GPU].entities is got[1].frames[Scope.GPU].entities
    assert _samples(Push(got[1])) == _samples(_push("n1", 1))


def test_rounds_held_together_make_as_many_bodies_as_a_node_has_rounds() -> None:
    """A relay behind by a round holds two pushes of each node, interleaved: one body per
    round, each node's rounds in order, not a new body at every repeat."""
    pushes = [_push(n, k) for n, k in (("n1", 0), ("n2", 0), ("n1", 1), ("n3", 0), ("n2", 1),
                                       ("n3", 1), ("n1", 2))]
    got = bodies(pushes, 500_000, Roster())
    assert [_samples(b) for b in got] == [
        _samples(pushes[0]) | _samples(pushes[1]) | _samples(pushes[3]),
        _samples(pushes[2]) | _samples(pushes[4]) | _samples(pushes[5]),
        _samples(pushes[6])]


def test_a_body_full_of_rows_sends_the_push_to_a_later_body() -> None:
    rows = _push("n1", 0).rows
    got = bodies([_push("n1", 0), _push("n2", 0), _push("n1", 1), _push("n3", 0)], 2 * rows,
                 Roster())
    assert [_samples(b) for b in got] == [
        _samples(_push("n1", 0)) | _samples(_push("n2", 0)),
        _samples(_push("n1", 1)) | _samples(_push("n3", 0))]
