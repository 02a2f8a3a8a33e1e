"""Splitting a body by owner: the node tag found as the mapper reads it, lines kept as sent."""

from __future__ import annotations

import gzip

import pytest

from service.api.shard_split import Owners, line_node, split_lines
from service.cluster.shard_map import Shard, ShardMap


@pytest.mark.parametrize("line,node", [
    (b"gpu,host=n1,gpu=0 gpu_temp=40 1", "n1"),
    (b"gpu,gpu=0,host=n1 gpu_temp=40", "n1"),
    (b"nvidia_smi,index=0,host=n7,Hostname=n8 temp=1", "n7"),  # Telegraf's host first
    (b"DCGM_FI_DEV_GPU_TEMP,Hostname=n8,gpu=0 gauge=1", "n8"),  # then dcgm-exporter's
    # an exporter's pod is no node: the line stays here, where the parser refuses it
    (b"prometheus,Hostname=nvidia-dcgm-exporter-7x2kq,gpu=0 DCGM_FI_DEV_GPU_TEMP=1", None),
    (b"prometheus,Hostname=nvidia-dcgm-exporter-7x2kq,gpu=0,host=n7 DCGM_FI_DEV_GPU_TEMP=1",
     "n7"),
    (b"gpu,host=n1", "n1"),
    (b"gpu,xhost=n1,gpu=0 f=1", None),
    (b"gpu\\,host=n1,gpu=0 f=1", None),  # an escaped comma: part of the measurement
    (b"gpu,gpu=0 note=\",host=n9 \" 1", None),  # a field value is not a tag
    (b"# gpu,host=n1 f=1", None),
    (b"gpu,host=a\\ b,gpu=0 f=1", None),  # escapes: never a valid host name
    (b"", None),
])
def test_the_node_of_a_line(line: bytes, node: str | None) -> None:
    assert line_node(line) == node


def test_lines_go_to_their_owner_as_sent_and_nameless_ones_stay() -> None:
    m = ShardMap([Shard("a", "http://a"), Shard("b", "http://b"), Shard("c", "http://c")], "a")
    n1, n2, n3 = (next(f"n{i}" for i in range(999) if m.owner(f"n{i}").id == s)
                  for s in ("a", "b", "c"))
    owners = Owners(lambda h: m.owner(h).id, "a")
    body = (f"gpu,host={n1},gpu=0 f=1 5\n\ngpu,host={n2},gpu=0 f=2 5\nbroken\n"
            f"gpu,host=-x,gpu=0 f=3\ngpu,host={n3},gpu=1 f=4 5").encode()
    parts = split_lines(body, owners)
    # a name no shard can own stays here, where the parser refuses it by line
    assert parts.local == f"gpu,host={n1},gpu=0 f=1 5\nbroken\ngpu,host=-x,gpu=0 f=3\n".encode()
    assert gzip.decompress(parts.foreign["b"]) == f"gpu,host={n2},gpu=0 f=2 5\n".encode()
    assert gzip.decompress(parts.foreign["c"]) == f"gpu,host={n3},gpu=1 f=4 5\n".encode()
    assert parts.nodes == {"a": {n1, "-x"}, "b": {n2}, "c": {n3}}


def test_an_arrow_body_is_split_by_node_into_format_3_parts() -> None:
    """Our agent's Arrow body split by owner: each part one format-3 stream holding its
    nodes' rows, events and reports."""
    import pyarrow.ipc as ipc

    from collectors.arrow_batch import META_FORMAT, Decoder, encode
    from collectors.collector_status import CollectorReport
    from collectors.schema import SchemaMapper
    from service.api.shard_split import ArrowSplitter

    m = ShardMap([Shard("a", "http://a"), Shard("b", "http://b")], "a")
    n1, n2 = (next(f"n{i}" for i in range(999) if m.owner(f"n{i}").id == s) for s in "ab")
    ns = 1_750_000_000 * 10**9
    text = "".join(f"gpu,host={n},gpu=0 gpu_temp={t} {ns}\n"
                   f"nvlink,host={n},gpu=0,link=2 nvlink_crc_flit=3i {ns}\n"
                   for n, t in ((n1, 40), (n2, 50))) + f"xid,host={n2},gpu=0 code=79i {ns}\n"
    batch = SchemaMapper().parse(text)
    reports = [CollectorReport(n2, "nvml", True, 0.1, 3, "", 1.75e9)]
    body = encode(batch, reports)
    parts = ArrowSplitter(10_000).split(body, Owners(lambda h: m.owner(h).id, "a"))
    assert parts.nodes == {"a": {n1}, "b": {n2}}
    assert parts.local is not None
    mine, theirs = parts.local, gzip.decompress(parts.foreign["b"])
    for part in (mine, theirs):
        assert ipc.open_stream(part).schema.metadata[META_FORMAT] == b"3"
    d = Decoder()
    got_a, got_b = d.decode(mine), d.decode(theirs)
    for got, node, temp in ((got_a, n1, 40.0), (got_b, n2, 50.0)):
        f = got.batch.frames[next(s for s in got.batch.frames if s.value == "gpu")]
        assert [f.entities[i].node for i in f.rows] == [node]
        assert temp in f.values[0].tolist()
        assert {f.entities[i].node for s, fr in got.batch.frames.items() for i in fr.rows} \
            == {node}
    assert len(got_a.batch.events) == 0 and got_b.batch.events.keys == [f"{n2}:gpu0"]
    assert got_a.reports == [] and got_b.reports == reports


def test_an_arrow_body_in_a_retired_format_is_refused_not_split() -> None:
    """A format-2 body (a stream per kind, written by no release) is refused whole: no part
    of it goes to any shard."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from collectors.arrow_batch import META_FORMAT, META_METRICS, ArrowPayloadError
    from service.api.shard_split import ArrowSplitter

    m = ShardMap([Shard("a", "http://a"), Shard("b", "http://b")], "a")
    table = pa.table({
        "entity": pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int32()),
                                                 pa.array(["n1:gpu0", "n2:gpu0"])),
        "ts": pa.array([1.75e9, 1.75e9]), "values": pa.FixedSizeListArray.from_arrays(
            pa.array([40.0, 50.0]), 1)})
    meta = {META_FORMAT: b"2", b"gpuhealth.kind": b"gpu", META_METRICS: b"gpu_temp"}
    out = pa.BufferOutputStream()
    with ipc.new_stream(out, table.schema.with_metadata(meta)) as w:
        w.write_table(table.replace_schema_metadata(meta))
    with pytest.raises(ArrowPayloadError, match=r"'gpuhealth\.format' must be '3'"):
        ArrowSplitter(10_000).split(bytes(out.getvalue()),
                                    Owners(lambda h: m.owner(h).id, "a"))
