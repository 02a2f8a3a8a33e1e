"""GPU identities across a sharded service's seams: a relay's Arrow body split by the owner of
each identity's node (a refused value going to its owner as sent, refused there again), and a
shard keeping only its own nodes' identities at ingest (another's dropped silently)."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from collectors.identity import GpuIdentity
from service.api.shard_split import Owners
from service.cluster.ownership import Ownership
from service.cluster.shard_map import Shard, ShardMap

MAP = ShardMap([Shard("a", "http://a"), Shard("b", "http://b")], "a")
N1, N2 = (next(f"n{i}" for i in range(999) if MAP.owner(f"n{i}").id == s) for s in "ab")
N3 = next(f"m{i}" for i in range(999) if MAP.owner(f"m{i}").id == "b")  # b's, another
T = 1_750_000_000.0


def _owners() -> Owners:
    return Owners(lambda h: MAP.owner(h).id, "a")


def test_an_arrow_bodys_identities_go_to_their_nodes_owners() -> None:
    pytest.importorskip("pyarrow")
    from collectors.arrow_batch import Decoder, encode
    from collectors.schema import SchemaMapper
    from service.api.shard_split import ArrowSplitter

    ns = int(T * 1e9)
    batch = SchemaMapper().parse(f"gpu,host={N1},gpu=0 gpu_temp=40 {ns}\n"
                                 f"gpu,host={N2},gpu=0 gpu_temp=50 {ns}\n")
    batch.identity = {f"{N1}:gpu0": GpuIdentity(uuid="GPU-1", at=T),
                      f"{N2}:gpu0": GpuIdentity(uuid="GPU-2", serial="S2", at=T),
                      # a node with no sample in this body: its identity alone
                      f"{N3}:gpu5": GpuIdentity(model="Tesla T4", at=T)}
    parts = ArrowSplitter(10_000).split(encode(batch), _owners())
    assert parts.nodes == {"a": {N1}, "b": {N2, N3}}
    assert parts.local is not None
    d = Decoder()
    mine, theirs = d.decode(parts.local).batch, d.decode(gzip.decompress(parts.foreign["b"])).batch
    assert mine.identity == {f"{N1}:gpu0": GpuIdentity(uuid="GPU-1")}
    assert theirs.identity == {f"{N2}:gpu0": GpuIdentity(uuid="GPU-2", serial="S2"),
                               f"{N3}:gpu5": GpuIdentity(model="Tesla T4")}
    assert theirs.identity[f"{N3}:gpu5"].at == T


def test_a_refused_identity_value_is_named_by_its_nodes_owner() -> None:
    pytest.importorskip("pyarrow")
    from collectors.arrow_batch import Decoder, encode
    from service.api.shard_split import ArrowSplitter

    # A body whose identity value a decode refuses: made as the relay would hand one on.
    body = encode(Batch(identity={f"{N1}:gpu0": GpuIdentity(uuid="GPU-1", at=T)}),
                  raw_identity={f"{N2}:gpu1": {"serial": "a,b=c"}})
    parts = ArrowSplitter(10_000).split(body, _owners())
    assert parts.nodes == {"a": {N1}, "b": {N2}}
    theirs = Decoder().decode(gzip.decompress(parts.foreign["b"])).batch
    assert theirs.identity == {}
    assert [(r.entity, r.metric) for r in theirs.rejected] == [(f"{N2}:gpu1", "serial")]
    assert parts.local is not None and not Decoder().decode(parts.local).batch.rejected


def _frame(nodes: list[str]) -> Frame:
    table = EntityTable(Scope.GPU, [Entity.gpu(n, 0) for n in nodes])
    width = len(CATALOG.columns(Scope.GPU))
    v = np.full((len(nodes), width), np.nan)
    v[:, 0] = 1.0
    return Frame(table, np.arange(len(nodes), dtype=np.int32), np.full(len(nodes), T), v)


def test_a_shard_keeps_its_own_nodes_identities_and_drops_anothers_silently() -> None:
    o = Ownership(MAP)
    b = Batch()
    b.add(_frame([N1, N2]))
    b.identity = {f"{N1}:gpu0": GpuIdentity(uuid="GPU-1"), f"{N2}:gpu0": GpuIdentity(uuid="GPU-2")}
    kept, refused = o.keep_owned(b)
    assert kept.identity == {f"{N1}:gpu0": GpuIdentity(uuid="GPU-1")}
    # N2's samples are refused with the reason; its identity adds no refusal of its own
    assert [r.entity for r in refused] == [f"{N2}:gpu0"]


def test_identities_alone_or_all_owned_are_kept_as_they_are() -> None:
    o = Ownership(MAP)
    mine = Batch(identity={f"{N1}:gpu0": GpuIdentity(uuid="GPU-1")})
    assert o.keep_owned(mine) == (mine, [])
    foreign = Batch(identity={f"{N2}:gpu0": GpuIdentity(uuid="GPU-2")})
    kept, refused = o.keep_owned(foreign)
    assert kept.identity == {} and refused == []
    # samples all owned, identities partly: the samples kept, the foreign identity gone
    b = Batch(identity={f"{N1}:gpu0": GpuIdentity(uuid="GPU-1"),
                        f"{N3}:gpu0": GpuIdentity(uuid="GPU-3")})
    b.add(_frame([N1]))
    kept, refused = o.keep_owned(b)
    assert kept.frames[Scope.GPU] is b.frames[Scope.GPU] and refused == []
    assert list(kept.identity) == [f"{N1}:gpu0"]
    # a sample refused, every identity owned: the identities stay
    c = Batch(identity={f"{N1}:gpu0": GpuIdentity(uuid="GPU-1")})
    c.add(_frame([N1, N2]))
    kept, _ = o.keep_owned(c)
    assert kept.identity == c.identity
    assert Ownership(None).keep_owned(c) == (c, [])
