"""collectors.arrow_batch format 3 (one IPC stream per body, a list<struct> column per kind):
what the agent writes, decoded to the batch it was made of, refused whole when malformed."""

from __future__ import annotations

import gzip

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from collectors.arrow_batch import (
    META_FORMAT,
    META_METRICS,
    ArrowPayloadError,
    Decoder,
    Limits,
    encode,
)
from collectors.catalog import Scope
from collectors.collector_status import CollectorReport
from collectors.frames import Batch
from collectors.schema import SchemaMapper

T = 1_750_000_000.0
NS = int(T * 1e9)
# Our own capture in the agent's shape: two GPUs, two links, an IB port, the node, an Xid and
# a collector's status line.
LINES = f"""gpu,host=n3,gpu=0 gpu_temp=41.5,ecc_sbe_volatile=3i,power_draw=301.25 {NS}
gpu,host=n3,gpu=1 gpu_temp=40 {NS}
nvlink,host=n3,gpu=0,link=0 nvlink_crc_flit=7i {NS}
nvlink,host=n3,gpu=0,link=1 nvlink_crc_flit=0i {NS}
ib_port,host=n3,device=mlx5_0,port=1 ib_symbol_error=2i {NS}
xid,host=n3,gpu=1 code=79i {NS}
"""


def _parsed() -> tuple[Batch, list[CollectorReport]]:
    mapper = SchemaMapper()
    b = mapper.parse(LINES)
    assert not b.rejected, b.rejected
    return b, [CollectorReport("n3", "nvml", True, 0.25, 12, "", T)]


def _body(columns: dict[str, pa.Array], meta: dict[bytes, bytes] | None = None,
          fields: list[pa.Field] | None = None) -> bytes:
    schema = pa.schema(fields or [pa.field(k, v.type) for k, v in columns.items()],
                       metadata={META_FORMAT: b"3"} if meta is None else meta)
    out = pa.BufferOutputStream()
    with ipc.new_stream(out, schema) as w:
        w.write_batch(pa.RecordBatch.from_arrays(list(columns.values()), schema=schema))
    return bytes(out.getvalue())


def _gpu_rows(keys: list[str], temps: list[float | None]) -> pa.Array:
    """One row's list of gpu rows: entity, ts, values (gpu_temp only)."""
    rows = pa.StructArray.from_arrays(
        [pa.DictionaryArray.from_arrays(pa.array(range(len(keys)), pa.int32()),
                                        pa.array(keys)),
         pa.array([T] * len(keys)),
         pa.FixedSizeListArray.from_arrays(pa.array(temps, pa.float64()), 1)],
        names=["entity", "ts", "values"])
    return pa.ListArray.from_arrays(pa.array([0, len(keys)], pa.int32()), rows)


def _gpu_field(arr: pa.Array) -> pa.Field:
    return pa.field("gpu", arr.type, metadata={META_METRICS: b"gpu_temp"})


def _one_gpu_body(keys: list[str], temps: list[float | None]) -> bytes:
    arr = _gpu_rows(keys, temps)
    return _body({"gpu": arr}, fields=[_gpu_field(arr)])


def test_one_stream_per_body_decodes_to_the_batch_it_was_made_of() -> None:
    b, reports = _parsed()
    body = encode(b, reports)
    reader = ipc.open_stream(body)
    assert reader.schema.metadata[META_FORMAT] == b"3"
    assert reader.schema.names == ["gpu", "nvlink", "ib_port", "events", "collectors"]
    assert reader.schema.field("gpu").metadata[META_METRICS].startswith(b"gpu_temp")
    assert [bt.num_rows for bt in reader] == [1]
    new = Decoder().decode(body)
    assert new.reports == reports
    assert new.batch.events == b.events
    assert set(new.batch.frames) == set(b.frames)
    for scope, f in b.frames.items():
        got = new.batch.frames[scope]
        assert [got.entities[i] for i in got.rows] == [f.entities[i] for i in f.rows]
        assert np.array_equal(got.ts, f.ts)
        assert np.array_equal(got.values, f.values, equal_nan=True)
    assert new.rows == sum(map(len, b.frames.values())) + 1 + 1


def test_an_empty_batch_is_an_empty_body() -> None:
    got = Decoder().decode(encode(Batch()))
    assert not got.batch.frames and not len(got.batch.events) and not got.reports
    assert got.rows == 0


def test_a_nodes_table_is_the_same_object_round_after_round() -> None:
    d = Decoder()
    b, _ = _parsed()
    first = d.decode(encode(b)).batch.frames[Scope.NVLINK].entities
    assert d.decode(encode(b)).batch.frames[Scope.NVLINK].entities is first


def test_null_temperatures_read_as_not_reported() -> None:
    f = Decoder().decode(_one_gpu_body(["n1:gpu0", "n1:gpu1"], [40.0, None])).batch
    temps = f.frames[Scope.GPU].values[:, 0]
    assert temps[0] == 40.0 and np.isnan(temps[1])


def _two_batches() -> bytes:
    arr = _gpu_rows(["n1:gpu0"], [1.0])
    schema = pa.schema([_gpu_field(arr)], metadata={META_FORMAT: b"3"})
    out = pa.BufferOutputStream()
    with ipc.new_stream(out, schema) as w:
        for _ in range(2):
            w.write_batch(pa.RecordBatch.from_arrays([arr], schema=schema))
    return bytes(out.getvalue())


def _two_rows() -> bytes:
    rows = _gpu_rows(["n1:gpu0"], [1.0]).values
    arr = pa.ListArray.from_arrays(pa.array([0, 1, 1], pa.int32()), rows)
    return _body({"gpu": arr}, fields=[_gpu_field(arr)])


def _null_list() -> bytes:
    rows = _gpu_rows(["n1:gpu0"], [1.0]).values
    arr = pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), rows,
                                   mask=pa.array([True]))
    return _body({"gpu": arr}, fields=[_gpu_field(arr)])


def _null_row() -> bytes:
    good = _gpu_rows(["n1:gpu0", "n1:gpu1"], [1.0, 2.0]).values
    rows = pa.StructArray.from_arrays(good.flatten(), fields=list(good.type),
                                      mask=pa.array([False, True]))
    arr = pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()), rows)
    return _body({"gpu": arr}, fields=[_gpu_field(arr)])


def _twice() -> bytes:
    arr = _gpu_rows(["n1:gpu0"], [1.0])
    return _body({"a": arr, "b": arr}, fields=[_gpu_field(arr), _gpu_field(arr)])


HOSTILE: list[tuple[str, bytes, str]] = [
    ("another stream after it", encode(_parsed()[0]) + encode(_parsed()[0]),
     "one stream; more follows"),
    ("two record batches", _two_batches(), "one record batch of one row"),
    ("two rows", _two_rows(), "one record batch of one row"),
    ("a column that is no kind", _body({"fans": _gpu_rows(["n1:gpu0"], [1.0])}),
     "must be kinds"),
    ("a kind twice", _twice(), "each once"),
    ("not a list", _body({"gpu": pa.array([1.0])}), "list<struct>"),
    ("a null list", _null_list(), "its list is null"),
    ("a null row", _null_row(), "a null row"),
    ("no metric list", _body({"gpu": _gpu_rows(["n1:gpu0"], [1.0])}), "gpuhealth.metrics"),
    ("a key of another scope", _one_gpu_body(["n1:gpu0:nvlink1"], [1.0]),
     "is a nvlink key, not a gpu one"),
    ("truncated", encode(_parsed()[0])[:-30], "truncated"),
]


@pytest.mark.parametrize(("name", "body", "says"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_format_3_bodies_are_refused_naming_the_problem(name: str, body: bytes,
                                                                says: str) -> None:
    with pytest.raises(ArrowPayloadError, match=says):
        Decoder().decode(body)


def test_rows_are_counted_before_any_per_row_work() -> None:
    body = _one_gpu_body([f"n1:gpu{i}" for i in range(5)], [1.0] * 5)
    assert Decoder(Limits(max_rows=5)).decode(body).rows == 5
    with pytest.raises(ArrowPayloadError, match="more than 4 rows"):
        Decoder(Limits(max_rows=4)).decode(body)


def test_a_row_count_past_the_bodys_bytes_is_refused_not_allocated() -> None:
    body = bytearray(_one_gpu_body([f"n1:gpu{i}" for i in range(7)], [1.0] * 7))
    # The record batch's field node of the gpu rows (length 7, no nulls): claim 2**40 rows.
    node = (7).to_bytes(8, "little") + bytes(8)
    at = body.rindex(node)
    body[at:at + 8] = (1 << 40).to_bytes(8, "little")
    with pytest.raises(ArrowPayloadError):
        Decoder().decode(bytes(body))


def test_non_utf8_keys_are_refused() -> None:
    body = bytearray(_one_gpu_body(["n1:gpuX"], [1.0]))
    at = body.index(b"n1:gpuX")
    body[at + 6] = 0xFF
    with pytest.raises(ArrowPayloadError, match=r"(?i)utf-?8"):
        Decoder().decode(bytes(body))


def test_gzip_is_the_callers() -> None:
    with pytest.raises(ArrowPayloadError):
        Decoder().decode(gzip.compress(encode(_parsed()[0])))
