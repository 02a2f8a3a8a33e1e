"""GPU identities through the relay: many agents' pushes (line protocol or Arrow, with samples
or alone, split, resent) joined into its bodies field by field, newer on top; a refused value
named to its agent; bounded like any name; kept for a target that reads no Arrow."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from collectors import identity
from collectors.agent.push import Pusher
from collectors.agent.relay import SPOOL_SUFFIX, Relay
from collectors.agent.relay_batch import Push, bodies, lines_body, only_nodes, read_arrow
from collectors.agent.relay_roster import RosterLimits, bound_push
from collectors.agent.spool import Spool
from collectors.frames import Batch
from collectors.identity import GpuIdentity
from collectors.schema import SchemaMapper

pa = pytest.importorskip("pyarrow")

T = 1_750_000_000
ARROW = {"content-type": "application/vnd.apache.arrow.stream"}


def _relay(tmp_path: Path) -> tuple[Relay, Spool]:
    spool = Spool(tmp_path / "relay-spool", 64 << 20, suffix=SPOOL_SUFFIX)
    return Relay(spool, Pusher("http://127.0.0.1:9/write"), wall=lambda: T), spool


def _lp(node: str, ts: int, **said: str) -> bytes:
    ns = ts * 10**9
    text = f"gpu,host={node},gpu=0 gpu_temp=40 {ns}\n" if "alone" not in said else ""
    fields = ",".join(f'{k}="{v}"' for k, v in said.items() if k != "alone")
    if fields:
        text += f"gpu_info,host={node},gpu=0 {fields} {ns}\n"
    return text.encode()


def _arrow(batch: Batch) -> bytes:
    from collectors.arrow_batch import encode

    return encode(batch)


def _spooled(spool: Spool) -> list[Batch]:
    return [read_arrow(body).batch for _, body in spool.first(100)]


def test_pushes_identities_join_newer_on_top_alone_split_and_resent(tmp_path: Path) -> None:
    relay, spool = _relay(tmp_path)
    for body, headers in [
        (_lp("n1", T, uuid="GPU-a", serial="S1"), {}),
        # the same GPU's driver, later, in a push of its own with no sample
        (_lp("n1", T + 5, alone="1", driver="550.54.15"), {}),
        # another agent's identity alone, as Arrow
        (_arrow(Batch(identity={"n2:gpu0": GpuIdentity(uuid="GPU-b", at=T)})), ARROW),
        # a late resend of n1's older round: an older serial
        (_lp("n1", T - 5, uuid="GPU-a", serial="OLD"), {}),
    ]:
        assert relay.answer("/write", "", headers, body).status == 204
    assert relay.flush() == 2  # n1's resend names n1's GPU again: a body after the first
    first, second = _spooled(spool)
    assert first.identity == {
        "n1:gpu0": GpuIdentity(uuid="GPU-a", serial="S1", driver="550.54.15"),
        "n2:gpu0": GpuIdentity(uuid="GPU-b")}
    assert first.identity["n1:gpu0"].at == T + 5
    assert second.identity == {"n1:gpu0": GpuIdentity(uuid="GPU-a", serial="OLD")}
    # The service joins the bodies as they come (identity.merge_into): the resend undoes
    # nothing, its time being older.
    seen: dict[str, GpuIdentity] = {}
    for b in (first, second):
        identity.merge_into(seen, b.identity)
    assert seen["n1:gpu0"].serial == "S1"


def test_an_identity_only_push_is_held_and_forwarded(tmp_path: Path) -> None:
    relay, spool = _relay(tmp_path)
    assert relay.answer("/write", "", {}, _lp("n3", T, alone="1", serial="S3")).status == 204
    assert relay.flush() == 1
    (got,) = _spooled(spool)
    assert got.identity == {"n3:gpu0": GpuIdentity(serial="S3")} and got.samples == 0


def test_a_refused_value_in_an_arrow_push_is_named_and_the_rest_kept(tmp_path: Path) -> None:
    import pyarrow.ipc as ipc

    from collectors.arrow_batch import IDENTITY, META_FORMAT

    cols = {"entity": ["n1:gpu0"], "at": [float(T)], "uuid": ["GPU-a"], "serial": ["a=b"],
            "pci_bus_id": [""], "model": [""], "vbios": [""], "driver": [""]}
    rows = pa.StructArray.from_arrays(
        [pa.array(v, pa.float64() if k == "at" else pa.string()) for k, v in cols.items()],
        names=list(cols))
    col = pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), rows)
    schema = pa.schema([pa.field(IDENTITY, col.type)], metadata={META_FORMAT: b"3"})
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, schema) as w:
        w.write_batch(pa.RecordBatch.from_arrays([col], schema=schema))
    relay, spool = _relay(tmp_path)
    ans = relay.answer("/write", "", ARROW, bytes(sink.getvalue()))
    assert ans.status == 400 and ans.body is not None
    listed = ans.body["rejections"]
    assert isinstance(listed, list)
    assert [(r["entity"], r["metric"]) for r in listed] == [("n1:gpu0", "serial")]
    assert relay.flush() == 1
    assert _spooled(spool)[0].identity == {"n1:gpu0": GpuIdentity(uuid="GPU-a")}


def test_a_narrowed_resend_keeps_only_the_pending_nodes_identities() -> None:
    b = SchemaMapper().parse(_lp("n1", T, uuid="GPU-a") + _lp("n2", T, uuid="GPU-b"))
    got = only_nodes(Push(b), ["n2"]).batch
    assert got.identity == {"n2:gpu0": GpuIdentity(uuid="GPU-b")}


def test_identities_are_names_within_one_pushs_bounds() -> None:
    b = SchemaMapper().parse(_lp("n1", T, uuid="GPU-a"))  # a sample of n1:gpu0 and its identity
    b.identity.update({f"m{i}:gpu0": GpuIdentity(uuid=f"GPU-{i}") for i in range(3)})
    refused = bound_push(b, RosterLimits(nodes_per_push=2))
    # n1's GPU is named by its samples already; of the other nodes one more fits
    assert set(b.identity) == {"n1:gpu0", "m0:gpu0"}
    assert sorted(r.entity or "" for r in refused) == ["m1:gpu0", "m2:gpu0"]
    assert all("more than 2 nodes" in r.reason for r in refused)


def test_a_target_without_arrow_gets_the_identities_as_gpu_info_lines() -> None:
    pushes = [Push(SchemaMapper().parse(_lp("n1", T, uuid="GPU-a", serial="S1"))),
              Push(Batch(identity={"n2:gpu0": GpuIdentity(model="Tesla T4", at=T)}))]
    (body,) = bodies(pushes, 1000)
    back = SchemaMapper().parse(gzip.decompress(lines_body(body)))
    assert not back.rejected
    assert back.identity == {"n1:gpu0": GpuIdentity(uuid="GPU-a", serial="S1"),
                             "n2:gpu0": GpuIdentity(model="Tesla T4")}
