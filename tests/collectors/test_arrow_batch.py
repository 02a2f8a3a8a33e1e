"""collectors.arrow_batch: Batch -> Arrow IPC -> Batch is exact, and hostile payloads (and the
retired formats 1 and 2) are refused whole with a message naming the problem."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from collectors.arrow_batch import (
    FORMAT_VERSION,
    META_FORMAT,
    META_METRICS,
    ArrowPayloadError,
    Decoder,
    encode,
)
from collectors.catalog import CATALOG, Scope
from collectors.collector_status import CollectorReport
from collectors.frames import Batch, Entity, EntityTable, Frame
from collectors.schema import SchemaMapper

T = 1_750_000_000.0
# Our own capture in the agent's shape: two GPUs (one with a metric missing, one counter
# NaN), a link, an IB port and an Xid.
LINES = f"""gpu,host=n1,gpu=0 gpu_temp=41.5,ecc_sbe_volatile=3i,power_draw=301.25 {int(T * 1e9)}
gpu,host=n1,gpu=1 gpu_temp=40 {int(T * 1e9)}
gpu,host=n1,gpu=0 gpu_temp=42 {int((T + 5) * 1e9)}
nvlink,host=n1,gpu=0,link=3 nvlink_crc_flit=7i {int(T * 1e9)}
ib_port,host=n1,device=mlx5_0,port=1 ib_symbol_error=2i {int(T * 1e9)}
xid,host=n1,gpu=1 code=79i {int(T * 1e9)}
"""


def _batch() -> Batch:
    b = SchemaMapper().parse(LINES)
    assert not b.rejected, b.rejected
    return b


def _same(a: Batch, b: Batch) -> None:
    assert set(a.frames) == set(b.frames)
    for scope, fa in a.frames.items():
        fb = b.frames[scope]
        assert [fa.entities[i] for i in fa.rows] == [fb.entities[i] for i in fb.rows]
        assert np.array_equal(fa.ts, fb.ts)
        assert np.array_equal(fa.values, fb.values, equal_nan=True)
    assert a.events == b.events


def test_round_trip_is_exact_with_nan_missing_events_and_scopes() -> None:
    b = _batch()
    gpu = b.frames[Scope.GPU]
    gpu.values[0, 0] = np.nan  # a reported-as-missing value among present ones
    report = CollectorReport("n1", "nvml", False, 0.25, 0, "NVML is gone", T)
    got = Decoder().decode(encode(b, [report]))
    _same(b, got.batch)
    assert got.reports == [report]
    assert len(b.frames) == 3 and len(b.events) == 1


def test_a_fleet_round_and_a_table_with_unused_entities() -> None:
    ents = [Entity.gpu("n2", i) for i in range(4)]
    cols = len(CATALOG.columns(Scope.GPU))
    vals = np.full((2, cols), np.nan)
    vals[0, 1] = 1e300
    vals[1, 2] = -0.0
    f = Frame(EntityTable(Scope.GPU, ents), np.array([3, 1], np.int32), np.array([T, T]), vals)
    b = Batch()
    b.add(f)
    got = Decoder().decode(encode(b)).batch.frames[Scope.GPU]
    assert [got.entities[i] for i in got.rows] == [ents[3], ents[1]]
    assert np.array_equal(got.values, vals, equal_nan=True)
    assert np.signbit(got.values[1, 2])


def test_the_same_dictionary_gives_the_same_entity_table() -> None:
    d = Decoder()
    body = encode(_batch())
    t1 = d.decode(body).batch.frames[Scope.NVLINK].entities
    assert d.decode(body).batch.frames[Scope.NVLINK].entities is t1


def _body(rows: pa.Table, metrics: bytes | None = b"", kind: str = "gpu",
          meta: dict[bytes, bytes] | None = None,
          options: ipc.IpcWriteOptions | None = None) -> bytes:
    """A body as the agent writes it: one stream, a `kind` column whose one list holds
    `rows`' rows, `metrics` in its field metadata (None: none), `meta` as schema metadata."""
    struct = pa.StructArray.from_arrays([c.combine_chunks() for c in rows.columns],
                                        fields=list(rows.schema))
    field = pa.field(kind, pa.list_(struct.type), nullable=False,
                     metadata=None if metrics is None else {META_METRICS: metrics})
    schema = pa.schema([field], metadata={META_FORMAT: b"3"} if meta is None else meta)
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, schema, options=options) as w:
        w.write_batch(pa.RecordBatch.from_arrays(
            [pa.ListArray.from_arrays(pa.array([0, len(struct)], pa.int32()), struct)],
            schema=schema))
    return bytes(sink.getvalue())


def _gpu(keys: list[str], **cols: pa.Array) -> pa.Table:
    ent = pa.DictionaryArray.from_arrays(pa.array(range(len(keys)), pa.int32()),
                                         pa.array(keys, pa.string()))
    return pa.table({"entity": ent, "ts": pa.array([T] * len(keys)), **cols})


def _lists(rows: list[list[float | None]], size: int, t: pa.DataType | None = None
           ) -> pa.Array:
    items = pa.array([v for r in rows for v in r], t or pa.float64())
    return pa.FixedSizeListArray.from_arrays(items, size)


def _gpus(keys: list[str], metrics: bytes | None, values: pa.Array | None,
          **cols: pa.Array) -> bytes:
    """A body of gpu rows: the metrics named in the column's metadata, one list per row."""
    extra = {"values": values} if values is not None else {}
    return _body(_gpu(keys, **extra, **cols), metrics)


GOOD = _gpus(["n1:gpu0"], b"gpu_temp", _lists([[40.0]], 1))

# Formats 1 and 2 (a stream per kind, its kind in this schema metadata), written by no release
# and no longer read.
OLD_KIND = b"gpuhealth.kind"


def _old_stream(table: pa.Table, meta: dict[bytes, bytes]) -> bytes:
    sink = pa.BufferOutputStream()
    schema = table.schema.with_metadata(meta)
    with ipc.new_stream(sink, schema) as w:
        w.write_table(table.replace_schema_metadata(meta))
    return bytes(sink.getvalue())


V1 = _old_stream(_gpu(["n1:gpu0", "n1:gpu1"], gpu_temp=pa.array([40.0, None]),
                      power_draw=pa.array([300.0, 310.0])), {META_FORMAT: b"1", OLD_KIND: b"gpu"})
V2 = _old_stream(_gpu(["n1:gpu0", "n1:gpu1"], values=_lists([[40.0, 300.0], [None, 310.0]], 2)),
                 {META_FORMAT: b"2", OLD_KIND: b"gpu", META_METRICS: b"gpu_temp,power_draw"})


@pytest.mark.parametrize("body", [V1, V2, V2 + V1, V2 + GOOD], ids=["format 1", "format 2",
                                                                    "formats 2 and 1",
                                                                    "format 2 then 3"])
def test_formats_1_and_2_are_refused_whole_naming_format_3(body: bytes) -> None:
    """Bodies the decoder read before format 3 (valid ones, as agents of that time wrote
    them) are refused whole: nothing decoded, no entity table kept."""
    d = Decoder()
    with pytest.raises(ArrowPayloadError,
                       match=r"'gpuhealth.format' must be '3' .*no longer read.*got b'[12]'"):
        d.decode(body)
    assert d.table_bytes == 0
    assert d.decode(GOOD).batch.frames[Scope.GPU].values[0, 0] == 40.0


def test_the_encoder_writes_one_stream_a_list_of_structs_per_kind() -> None:
    body = encode(_batch())
    reader = ipc.open_stream(body)
    assert reader.schema.metadata[META_FORMAT] == FORMAT_VERSION.encode() == b"3"
    assert reader.schema.names == ["gpu", "nvlink", "ib_port", "events"]
    assert reader.schema.field("gpu").type.value_type.names == ["entity", "ts", "values"]


def _temp_nan_ts() -> pa.Table:
    return pa.table({"entity": pa.array(["n1:gpu0"]).dictionary_encode(),
                     "ts": pa.array([float("nan")])})


_HOSTILE: list[tuple[str, bytes, str]] = [
    ("no metric list", _gpus(["n1:gpu0"], None, _lists([[1.0]], 1)), "gpuhealth.metrics"),
    ("unknown metric", _gpus(["n1:gpu0"], b"weather", _lists([[1.0]], 1)),
     "'weather' is not a gpu metric"),
    ("metric twice", _gpus(["n1:gpu0"], b"gpu_temp,gpu_temp", _lists([[1.0, 2.0]], 2)),
     "repeated"),
    ("list size", _gpus(["n1:gpu0"], b"gpu_temp", _lists([[1.0, 2.0]], 2)), r"\[1\]"),
    ("integer items", _gpus(["n1:gpu0"], b"gpu_temp", _lists([[1]], 1, pa.int64())),
     "fixed_size_list<float64>"),
    ("text items", _gpus(["n1:gpu0"], b"gpu_temp", pa.FixedSizeListArray.from_arrays(
        pa.array(["hot"]), 1)), "fixed_size_list<float64>"),
    ("a column per metric", _gpus(["n1:gpu0"], b"gpu_temp", None, gpu_temp=pa.array([1.0])),
     "the columns must be"),
    ("an unknown column", _gpus(["n1:gpu0"], b"", None, weather=pa.array([1.0])),
     "the columns must be"),
    ("a null list", _gpus(["n1:gpu0", "n1:gpu1"], b"gpu_temp", pa.array(
        [[1.0], None], pa.list_(pa.float64(), 1))), "null list"),
    ("unknown format", _body(_gpu(["n1:gpu0"]), meta={META_FORMAT: b"9"}),
     "'gpuhealth.format' must be '3'"),
    ("no format", _body(_gpu(["n1:gpu0"]), meta={}), "'gpuhealth.format' must be '3'"),
    ("truncated", GOOD[:-20], "truncated"),
    ("cut in the schema", GOOD[:-8][:120], "truncated"),
    ("no end marker", GOOD[:-8], "truncated"),
    ("not arrow", b"gpu,host=n1,gpu=0 gpu_temp=40 1\n", "stream 1"),
    ("key of another scope", _gpus(["n1:gpu0:nvlink3"], b"gpu_temp", _lists([[1.0]], 1)),
     "is a nvlink key, not a gpu one"),
    ("bad host", _gpus(["-rf:gpu0"], b"gpu_temp", _lists([[1.0]], 1)), "starts with '-'"),
    ("nan ts", _body(_temp_nan_ts()), "not finite"),
    ("compressed", _body(_gpu(["n1:gpu0"], values=_lists([[40.0]], 1)), b"gpu_temp",
                         options=ipc.IpcWriteOptions(compression="zstd")), "compressed"),
]


@pytest.mark.parametrize(("name", "body", "says"), _HOSTILE, ids=[c[0] for c in _HOSTILE])
def test_hostile_payloads_are_refused_naming_the_problem(name: str, body: bytes,
                                                         says: str) -> None:
    with pytest.raises(ArrowPayloadError, match=says):
        Decoder().decode(body)


def test_huge_declared_lengths_do_not_allocate() -> None:
    body = bytearray(GOOD)
    # the second message's length prefix (after the schema): claim 2 GiB of metadata
    at = 8 + int.from_bytes(body[4:8], "little")
    body[at + 4:at + 8] = (0x7FFFFFF0).to_bytes(4, "little")
    with pytest.raises(ArrowPayloadError):
        Decoder().decode(bytes(body))


def test_values_land_in_their_catalog_columns_in_any_order() -> None:
    """Our agent lists a scope's metrics in catalog order, end to end (assigned as one
    slice); any other order or subset still puts each value in its own column."""
    names = [m.name for m in CATALOG.columns(Scope.GPU)]
    for order in (names[:4], names[2:5], [names[3], names[0]], [names[1], names[4], names[2]]):
        values = pa.FixedSizeListArray.from_arrays(
            pa.array([float(i) for i in range(len(order))]), len(order))
        body = _gpus(["n1:gpu0"], ",".join(order).encode(), values)
        frame = Decoder().decode(body).batch.frames[Scope.GPU]
        got = {names[j]: v for j, v in enumerate(frame.values[0].tolist()) if v == v}
        assert got == {m: float(i) for i, m in enumerate(order)}, order


def test_entity_tables_are_found_by_their_keys_not_their_text() -> None:
    """The decoder finds a table by its dictionary's bytes (offsets and text): the same keys
    in another body (or another slice of a buffer) give the same table; keys whose text runs
    together alike but split otherwise are not mistaken for them."""
    from collectors.arrow_batch import _utf8_bytes

    assert _utf8_bytes(pa.array(["x", "n1:gpu0", "n1:gpu1"]).slice(1)) == \
        _utf8_bytes(pa.array(["n1:gpu0", "n1:gpu1"]))
    assert _utf8_bytes(pa.array(["n1:gpu1", "n11:gpu2"])) != \
        _utf8_bytes(pa.array(["n1:gpu1n1", "1:gpu2"]))
    d = Decoder()
    one = d.decode(_gpus(["n1:gpu1", "n11:gpu2"], b"gpu_temp", _lists([[1.0], [2.0]], 1)))
    again = d.decode(_gpus(["n1:gpu1", "n11:gpu2"], b"gpu_temp", _lists([[3.0], [4.0]], 1)))
    assert again.batch.frames[Scope.GPU].entities is one.batch.frames[Scope.GPU].entities
    with pytest.raises(ArrowPayloadError, match="n1:gpu1n1"):
        d.decode(_gpus(["n1:gpu1n1", "1:gpu2"], b"gpu_temp", _lists([[1.0], [2.0]], 1)))


def test_values_of_a_sliced_batch_are_its_own_rows() -> None:
    from collectors.arrow_batch import _values

    table = _gpu(["n1:gpu0", "n1:gpu1", "n1:gpu2"], values=_lists([[1.0], [None], [3.0]], 1))
    batch = table.to_batches()[0].slice(1)
    got = _values(Scope.GPU, batch.schema.names, b"gpu_temp", batch)
    temp = [m.name for m in CATALOG.columns(Scope.GPU)].index("gpu_temp")
    assert np.isnan(got[0, temp]) and got[1, temp] == 3.0 and got.shape[0] == 2


def test_message_headers_are_remembered_bounded_and_still_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import collectors.arrow_batch as ab
    from collectors.byte_budget import ByteBudgetCache

    monkeypatch.setattr(ab, "_HEADERS", ByteBudgetCache(ab.MAX_HEADER_BYTES, 2))
    for n in range(1, 5):  # four shapes of record batch: four distinct headers
        Decoder().decode(_gpus([f"n1:gpu{i}" for i in range(n)], b"gpu_temp",
                             _lists([[float(i)] for i in range(n)], 1)))
        assert len(ab._HEADERS) <= 2
    compressed = _body(_gpu(["n1:gpu0"], values=_lists([[40.0]], 1)), b"gpu_temp",
                       options=ipc.IpcWriteOptions(compression="zstd"))
    for _ in range(2):  # refused each time, remembered or not
        with pytest.raises(ArrowPayloadError, match="compressed"):
            Decoder().decode(compressed)
