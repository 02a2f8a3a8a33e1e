"""Hostile Arrow bodies for the fuzz benchmark (issue 29): what an attacker with a write token
(or none, on loopback by default) can post as `application/vnd.apache.arrow.stream`.

    for kind, body, content_type in itertools.islice(hostile_arrow_bodies(rng), n): ...

Every body is at most a few MB, uncompressed (send it as it is, with its content type). The
service must answer each with a 204 or a 4xx, never a 5xx, and neither stall nor keep memory
for it: a dictionary of hundreds of thousands of keys behind one row (refused past what the
store can hold, else decoded for its row alone), over-long keys, huge schema metadata, too
many columns, batches or dictionaries, deep nesting, delta dictionaries, lengths and buffers
claimed past the body, truncation and garbage; `arrow-valid` bodies (a node agent's round)
must be taken (204). Keys and node names are fresh per body, so no cache absorbs a repeat.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.ipc as ipc

from collectors.arrow_batch import (
    FORMAT_VERSION,
    MEDIA_TYPE,
    META_FORMAT,
    META_METRICS,
    _field,
    _ref,
    encode,
)
from collectors.schema import SchemaMapper

Body = tuple[str, bytes, str]
# Formats 1 and 2 (a stream per kind, named in this key) are no longer read; bodies in them
# stay here as hostile input: a stream's messages are counted before its format is read.
OLD_KIND = b"gpuhealth.kind"
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")


def hostile_arrow_bodies(rng: random.Random) -> Iterator[Body]:
    """An endless stream of (kind, body, content type), kinds drawn at random (each about
    equally often; `KINDS` names them). Deterministic for a seeded `rng`."""
    n = 0
    while True:
        kind = rng.choice(KINDS)
        n += 1
        yield kind, _MAKERS[kind](rng, f"fa{rng.randrange(16**6):06x}{n}"), MEDIA_TYPE


def _format3(kinds: dict[str, pa.Array], metadata: dict[bytes, bytes] | None = None,
             field_meta: dict[str, dict[bytes, bytes]] | None = None) -> bytes:
    """One format-3 stream: each kind a list<struct> column of one list holding `kinds[k]`."""
    fields, arrays = [], []
    for name, rows in kinds.items():
        fields.append(pa.field(name, pa.list_(rows.type), nullable=False,
                               metadata=(field_meta or {}).get(name)))
        arrays.append(pa.ListArray.from_arrays(pa.array([0, len(rows)], pa.int32()), rows))
    schema = pa.schema(fields, metadata={META_FORMAT: FORMAT_VERSION.encode(),
                                         **(metadata or {})})
    out = pa.BufferOutputStream()
    with ipc.new_stream(out, schema) as w:
        w.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
    return bytes(out.getvalue())


def _gpu_rows(keys: pa.Array, indices: list[int]) -> pa.StructArray:
    ent = pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), keys)
    ts = pa.array([time.time()] * len(indices), pa.float64())
    return pa.StructArray.from_arrays([ent, ts], names=["entity", "ts"])


def _no_metrics(scope: str = "gpu") -> dict[str, dict[bytes, bytes]]:
    return {scope: {META_METRICS: b""}}


def dict_flood(rng: random.Random, tag: str) -> bytes:
    """One row, 20,000 to 600,000 distinct keys in its dictionary (issue 29: 500,000)."""
    n = rng.choice([20_000, 100_000, 300_000, 500_000, 600_000])
    keys = pa.array([f"{tag}x{i}:gpu{i % 8}" for i in range(n)], pa.string())
    return _format3({"gpu": _gpu_rows(keys, [rng.randrange(n)])}, field_meta=_no_metrics())


def dict_roster(rng: random.Random, tag: str) -> bytes:
    """A relay's shape gone wrong: a 5,000-key roster, a handful of rows naming it."""
    keys = pa.array([f"{tag}r{i // 8}:gpu{i % 8}" for i in range(5_000)], pa.string())
    return _format3({"gpu": _gpu_rows(keys, [rng.randrange(5_000) for _ in range(4)])},
                    field_meta=_no_metrics())


def long_key(rng: random.Random, tag: str) -> bytes:
    """A row naming a key of 100 KB to 4 MB."""
    size = rng.choice([100_000, 1_000_000, 4_000_000])
    keys = pa.array([tag + "a" * size + ":gpu0"], pa.string())
    return _format3({"gpu": _gpu_rows(keys, [0])}, field_meta=_no_metrics())


def schema_metadata(rng: random.Random, tag: str) -> bytes:
    """Schema metadata of 1 to 4 MB (many keys, or one long value)."""
    if rng.random() < 0.5:
        meta = {f"{tag}{i}".encode(): b"v" * 16 for i in range(rng.choice([50_000, 150_000]))}
    else:
        meta = {b"x": b"v" * rng.choice([1_000_000, 4_000_000])}
    keys = pa.array([f"{tag}:gpu0"], pa.string())
    return _format3({"gpu": _gpu_rows(keys, [0])}, metadata=meta, field_meta=_no_metrics())


def many_columns(rng: random.Random, tag: str) -> bytes:
    """1,000 to 20,000 columns: float64 columns of a stream in the retired format 1, or
    fields of a scope's struct."""
    n = rng.choice([1_000, 5_000, 20_000])
    cols = {f"c{i}": pa.array([1.0]) for i in range(n)}
    if rng.random() < 0.5:
        table = pa.table(cols).replace_schema_metadata({META_FORMAT: b"1", OLD_KIND: b"gpu"})
        out = pa.BufferOutputStream()
        with ipc.new_stream(out, table.schema) as w:
            w.write_table(table)
        return bytes(out.getvalue())
    rows = pa.StructArray.from_arrays(list(cols.values()), names=list(cols))
    return _format3({"gpu": rows})


def nested(rng: random.Random, tag: str) -> bytes:
    """A column nested 30 to 60 lists deep (past 64 Arrow will not write it)."""
    arr: pa.Array = pa.array([1.0])
    for _ in range(rng.choice([30, 60])):
        arr = pa.ListArray.from_arrays(pa.array([0, len(arr)], pa.int32()), arr)
    rows = pa.StructArray.from_arrays([arr], names=["deep"])
    return _format3({"gpu": rows})


def many_batches(rng: random.Random, tag: str) -> bytes:
    """A stream of 1,000 to 20,000 one-row record batches (in the retired format 2: its
    batches are counted before its format is read)."""
    keys = pa.array([f"{tag}:gpu0"], pa.string())
    schema = pa.schema([pa.field("entity", pa.dictionary(pa.int32(), pa.string())),
                        pa.field("ts", pa.float64())],
                       metadata={META_FORMAT: b"2", OLD_KIND: b"gpu", META_METRICS: b""})
    batch = pa.RecordBatch.from_arrays(
        [pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), keys),
         pa.array([time.time()])], schema=schema)
    out = pa.BufferOutputStream()
    with ipc.new_stream(out, schema) as w:
        for _ in range(rng.choice([1_000, 20_000])):
            w.write_batch(batch)
    return bytes(out.getvalue())


def dictionaries(rng: random.Random, tag: str) -> bytes:
    """A stream whose dictionary changes every batch: as deltas (each joined to the
    dictionary so far, 200 to 2,000 times) or as replacements (20 to 200 times), 200 keys
    each (in the retired format 2: its dictionaries are counted, and deltas refused, before
    its format is read)."""
    delta = rng.random() < 0.5
    schema = pa.schema([pa.field("entity", pa.dictionary(pa.int32(), pa.string())),
                        pa.field("ts", pa.float64())],
                       metadata={META_FORMAT: b"2", OLD_KIND: b"gpu", META_METRICS: b""})
    n = rng.choice([200, 2_000] if delta else [20, 200])
    every = pa.array([f"{tag}d{j}n{i}:gpu0" for j in range(n) for i in range(200)], pa.string())
    out = pa.BufferOutputStream()
    opts = ipc.IpcWriteOptions(emit_dictionary_deltas=delta)
    with ipc.new_stream(out, schema, options=opts) as w:
        for j in range(n):  # a delta's dictionary extends the last (slices: nothing copied)
            keys = every.slice(0, 200 * (j + 1)) if delta else every.slice(200 * j, 200)
            ent = pa.DictionaryArray.from_arrays(pa.array([len(keys) - 1], pa.int32()), keys)
            w.write_batch(pa.RecordBatch.from_arrays([ent, pa.array([time.time()])],
                                                     schema=schema))
            if out.tell() > 4_000_000:
                break
    return bytes(out.getvalue())


def claimed_length(rng: random.Random, tag: str) -> bytes:
    """A valid body whose record batch (or one of its buffers) claims up to 2**62 rows or
    bytes it does not carry."""
    raw = valid(rng, tag)
    body = bytearray(raw)
    for _pos, meta_at, mtype in _messages(raw):
        if mtype != 3:  # record batch
            continue
        msg = meta_at + struct.unpack_from("<I", raw, meta_at)[0]
        header = _ref(raw, _field(raw, msg, 2))
        big = rng.choice([2**31, 2**40, 2**62])
        if rng.random() < 0.5:
            at = _field(raw, header, 0)  # RecordBatch.length
        else:  # RecordBatch.buffers[k].length: a vector of {offset, length} structs
            vec = _ref(raw, _field(raw, header, 2))
            count = _I32.unpack_from(raw, vec)[0]
            at = vec + 4 + 16 * rng.randrange(max(1, count)) + 8
        if at is not None:
            _I64.pack_into(body, at, big)
        break
    return bytes(body)


def truncated(rng: random.Random, tag: str) -> bytes:
    body = valid(rng, tag)
    return body[: rng.randrange(1, len(body) - 1)]


def garbage(rng: random.Random, tag: str) -> bytes:
    """Random bytes, or a valid body with bytes flipped."""
    if rng.random() < 0.3:
        return rng.randbytes(rng.choice([16, 1_000, 100_000]))
    body = bytearray(valid(rng, tag))
    for _ in range(rng.randint(1, 20)):
        body[rng.randrange(len(body))] = rng.randrange(256)
    return bytes(body)


def valid(rng: random.Random, tag: str) -> bytes:
    """A node agent's round: 8 GPUs of a fresh node, a temperature each."""
    ns = int(time.time() * 1e9)
    text = "".join(f"gpu,host={tag},gpu={g} gpu_temp={rng.uniform(30, 80):.1f} {ns}\n"
                   for g in range(8))
    return encode(SchemaMapper().parse(text))


def identities(rng: random.Random, tag: str) -> bytes:
    """GPU identity rows (the `identity` kind): up to 100,000 of fresh GPUs, values 4 KB long
    or holding quotes and newlines, a node's or a link's key, `at` not finite."""
    from collectors.identity import FIELDS

    how = rng.choice(["flood", "values", "key", "at"])
    n = rng.choice([1, 100] if how == "values" else [1, 10_000, 100_000])  # a few MB at most
    keys = [f"{tag}i{i // 8}:gpu{i % 8}" for i in range(n)]
    if how == "key":
        keys[rng.randrange(n)] = rng.choice([f"{tag}n", f"{tag}n:gpu0:nvlink1", "-x:gpu0"])
    value = {"flood": "GPU-0000", "values": rng.choice(["a" * 4096, 'x"\n,=y', "\u0000"])}
    cols: dict[str, pa.Array] = {
        "entity": pa.array(keys, pa.string()),
        "at": pa.array([float("nan") if how == "at" else time.time()] * n, pa.float64())}
    for f in FIELDS:
        cols[f] = pa.array([value.get(how, "")] * n, pa.string())
    rows = pa.StructArray.from_arrays(list(cols.values()), names=list(cols))
    return _format3({"identity": rows})


def _messages(body: bytes) -> Iterator[tuple[int, int, int]]:
    """(position, metadata position, header type) of each IPC message of one stream."""
    pos = 0
    while pos + 8 <= len(body):
        size = _I32.unpack_from(body, pos + 4)[0]
        if size <= 0:
            return
        meta_at = pos + 8
        msg = meta_at + struct.unpack_from("<I", body, meta_at)[0]
        htype_at = _field(body, msg, 1)
        length_at = _field(body, msg, 3)  # Message.bodyLength
        body_len = _I64.unpack_from(body, length_at)[0] if length_at is not None else 0
        yield pos, meta_at, body[htype_at] if htype_at is not None else 0
        pos = meta_at + size + body_len


_MAKERS: dict[str, Callable[[random.Random, str], bytes]] = {
    "arrow-dict-flood": dict_flood,
    "arrow-dict-roster": dict_roster,
    "arrow-long-key": long_key,
    "arrow-schema-metadata": schema_metadata,
    "arrow-many-columns": many_columns,
    "arrow-nested": nested,
    "arrow-many-batches": many_batches,
    "arrow-dictionaries": dictionaries,
    "arrow-claimed-length": claimed_length,
    "arrow-truncated": truncated,
    "arrow-garbage": garbage,
    "arrow-identity": identities,
    "arrow-valid": valid,
}
KINDS: tuple[str, ...] = tuple(_MAKERS)
