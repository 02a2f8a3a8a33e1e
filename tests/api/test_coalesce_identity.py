"""The coalescer's merged ingest carries every request's GPU identities: joined field by
field, newer on top (a resend in the same window undoes nothing), a request of identities
alone merging with any group, and none of it counted as samples."""

from __future__ import annotations

import numpy as np

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from collectors.identity import GpuIdentity
from service.api.coalesce import Pending, groups, merge

T = 1_750_000_000.0


def _batch(node: str, **ids: GpuIdentity) -> Batch:
    table = EntityTable(Scope.GPU, [Entity.gpu(node, 0)])
    v = np.full((1, len(CATALOG.columns(Scope.GPU))), np.nan)
    v[0, CATALOG.column(Scope.GPU, "gpu_temp")] = 40.0
    b = Batch()
    b.add(Frame(table, np.zeros(1, np.int32), np.full(1, T), v))
    b.identity = dict(ids)
    return b


def test_a_merged_ingest_joins_its_requests_identities_newer_on_top() -> None:
    a = _batch("n1", **{"n1:gpu0": GpuIdentity(uuid="GPU-1", serial="S1", at=T)})
    b = _batch("n2", **{"n2:gpu0": GpuIdentity(uuid="GPU-2", at=T)})
    # n1's driver alone, later; then a late resend of an older serial for it
    c = Batch(identity={"n1:gpu0": GpuIdentity(driver="550.54.15", at=T + 5)})
    d = Batch(identity={"n1:gpu0": GpuIdentity(serial="OLD", at=T - 5)})
    m = merge([a, b, c, d])
    assert m.batch.identity == {
        "n1:gpu0": GpuIdentity(uuid="GPU-1", serial="S1", driver="550.54.15"),
        "n2:gpu0": GpuIdentity(uuid="GPU-2")}
    assert m.batch.identity["n1:gpu0"].at == T + 5
    assert m.batch.samples == a.samples + b.samples  # identities are no samples
    assert a.identity == {"n1:gpu0": GpuIdentity(uuid="GPU-1", serial="S1")}  # not changed


def test_a_request_of_identities_alone_goes_with_any_group() -> None:
    items = [Pending(b, frozenset(k for f in b.frames.values() for k in
                                  (f.entities[i].key for i in f.rows.tolist())),
                     b.samples, False, None)  # type: ignore[arg-type]
             for b in (_batch("n1"), Batch(identity={"n1:gpu0": GpuIdentity(uuid="GPU-1")}),
                       _batch("n2"))]
    assert [len(g) for g in groups(items)] == [3]
