"""A Batch as Arrow IPC: the columnar payload our own node agent posts beside line protocol.

Line protocol costs the service about 4 µs of parsing per line; an agent's round is ~160 lines
per node, so 1,250 agents cost most of a core in parsing alone (`python -m bench.collectors`,
section 3). The same round as Arrow IPC is a few columns the service takes without a per-line
step. The format is Arrow's own (the IPC streaming format, `application/vnd.apache.arrow.stream`),
nothing home-made; what is ours is what the stream holds and what its columns mean:

- a body is ONE IPC stream, schema metadata `gpuhealth.format` = "3" (FORMAT_VERSION),
  holding one record batch of one row (none, or no row, for an empty body). Each column is
  one kind: named after it (a scope `gpu`, `nvlink`, `ib_port`, `node`, `psu`, `fan`, or
  `events`, `collectors`, `identity`; each at most once), of type list<struct<...>> whose
  one list holds that kind's rows, the struct's fields being the kind's columns below. One
  stream is scanned, opened and validated once per body. Formats 1 and 2 (a stream per kind,
  before any release) are refused whole, as any other `gpuhealth.format` is;
- a scope's rows: `entity` (dictionary<int32, utf8>: entity keys as Entity.key
  spells them), `ts` (float64 epoch seconds) and `values`, a fixed_size_list<float64>[k] whose
  k items are the metrics named, in order, by the column's field metadata `gpuhealth.metrics`
  (catalog metrics of the scope, comma-separated, none twice; a metric left out is not
  reported for any row; no metric at all: no `values` field and an empty list). One list for
  every metric: a request decodes in a handful of Arrow calls, not one per metric. Batch's
  NaN ("not reported") is written as a null item and read back as NaN, so Batch -> Arrow ->
  Batch is exact;
- `events`: `entity` (utf8 or dictionary), `ts` float64, `metric` (an event metric of the
  entity's scope), `value` float64;
- `collectors`: node agents' collector status (collectors.collector_status): `host`,
  `collector`, `error` (utf8), `up` (bool), `scrape_seconds` (float64), `samples` (int64), `ts`;
- `identity` (optional: only a batch with identities writes it): what the sources said of each
  GPU's identity (collectors.identity): `entity` (utf8 or dictionary: a GPU's entity key),
  `at` (float64: the sender's round time), and one utf8 column per identity.FIELDS (`uuid`,
  `serial`, `pci_bus_id`, `model`, `vbios`, `driver`; "" or null = not said). A key given
  twice is joined field by field, newer on top (identity.merge_into). Each value passes
  identity.clean: one it refuses is named in the batch's rejections (entity, field) and the
  rest of the body, that GPU's other values included, is kept; a key that is not a GPU's, a
  column missing or of another type, or a `at` not finite refuses the body whole, as for the
  other kinds.

The format stays "3" with `identity`: no reader of an older format-3 body misreads it. A
reader from before the kind refuses a body holding it whole (its columns must be kinds it
knows), answering `arrow-payload-refused`, and our agent and relay (collectors.agent.push)
then send that segment again as line protocol, whose `gpu_info` lines such a service reads or
names; a body without identities, every body of an agent whose GPUs' identities were already
sent, is the same bytes as before. Bodies without the kind decode as always.

Decoding is strict and refuses the whole body (ArrowPayloadError, naming the problem) before
anything is handed on: this format is only ever written by our agent, which can resend the
segment whole (or as line protocol). Work and memory are bounded before decoding: the body is
read in place from its own buffer (a declared length past it is an error, not an allocation),
compressed Arrow buffers are refused (their declared sizes would allocate; gzip the body
instead), and the stream's messages, record batches and dictionaries are counted from their
metadata first; its columns and rows (list items) are counted from the record batch read in
place and checked cheaply against its own buffers (`validate()`: each array's declared length
must fit the body's bytes), before any per-row work. The record batch is then fully
validated (offsets, UTF-8, dictionary indices). What a sender chooses the size of
is bounded before it costs: each message's metadata (MAX_META_BYTES: fields, nesting, schema
metadata), dictionaries (count, no deltas, and the body's keys and bytes: `Limits`), entity
keys' length; an entity dictionary's keys become entities only where rows name them (or the
rows name enough of it: WHOLE_KEYS), and entity tables are kept within a byte budget.
Value ranges are the ingest stage's to check, as for line protocol.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import field

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from collectors import identity
from collectors.byte_budget import ByteBudgetCache
from collectors.catalog import CATALOG, Kind, Scope
from collectors.collector_status import CollectorReport, read_report
from collectors.compat import dataclass, zip_strict
from collectors.frames import (
    Batch,
    Entity,
    EntityTable,
    EventFrame,
    Frame,
    Rejection,
    name_problem,
)
from collectors.lineprotocol import Point

MEDIA_TYPE = "application/vnd.apache.arrow.stream"
FORMAT_VERSION = "3"
META_FORMAT = b"gpuhealth.format"
META_METRICS = b"gpuhealth.metrics"
VALUES = "values"
EVENTS = "events"
COLLECTORS = "collectors"
IDENTITY = "identity"
KINDS = frozenset([s.value for s in Scope] + [EVENTS, COLLECTORS, IDENTITY])
MAX_BATCHES = 64  # record batches in a body's stream; an agent writes one
MAX_DICTIONARIES = 64  # dictionary messages in it; an agent writes one per dictionary
# A message's flatbuffer metadata (schema: fields, their types and metadata; a batch: its
# nodes and buffers). Ours are under 3 KiB (a schema listing every metric); anything
# a schema can say that costs time or memory to open (fields, nesting, metadata, names) grows
# with it, so it is bounded before Arrow reads it.
MAX_META_BYTES = 64 * 1024
# Entity dictionaries: a key no row names is not turned into an Entity (about 300 bytes and
# 20 us of name checks each) unless the dictionary is at most this many keys, or at most
# KEYS_PER_ROW times the keys its rows name (a relay's roster table, written whole so its
# bytes are the same body after body: collectors.agent.relay_roster; a relay flushing every
# second a roster of agents that push every 5 s names about a fifth of it). Otherwise only
# the keys rows name are decoded, as a table of their own.
WHOLE_KEYS = 256
KEYS_PER_ROW = 16
ENTRY_BYTES = 320  # an Entity and its strings, as a cached table holds them (measured ~280)
_F64_ID = pa.float64().id
_STR_ID = pa.string().id
_COLUMN_AT = {s: {m.name: j for j, m in enumerate(CATALOG.columns(s))} for s in Scope}
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_REPORT_TYPES = {"host": pa.string(), "collector": pa.string(), "error": pa.string(),
                 "up": pa.bool_(), "scrape_seconds": pa.float64(), "samples": pa.int64(),
                 "ts": pa.float64()}
_IDENTITY_TYPES: dict[str, pa.DataType | None] = {
    "entity": None, "at": pa.float64(), **{f: pa.string() for f in identity.FIELDS}}


class ArrowPayloadError(ValueError):
    """The body is not a payload this module writes; the message names what is wrong."""


class OverBudget(Exception):
    """A decode would make more new entities than its caller allowed (`decode(max_new=)`):
    nothing is wrong with the body, it costs more than that caller can spend here."""


@dataclass(slots=True)
class Decoded:
    batch: Batch
    reports: list[CollectorReport] = field(default_factory=list)
    rows: int = 0
    keys: int = 0  # entity dictionary keys the body listed
    parsed: int = 0  # of them, turned into entities by this decode (not found cached)
    max_new: int | None = None  # Decoder.decode's budget for `parsed`
    # The identity values refused (and named in batch.rejected), as sent, by GPU key and
    # field: a body split by shard (service.api.shard_split) hands them on to their owner,
    # which names them in its own answer.
    refused_identity: dict[str, dict[str, str]] = field(default_factory=dict)


# ---- writing ----------------------------------------------------------------------------------

def encode(batch: Batch, reports: Sequence[CollectorReport] = (), whole: bool = False,
           raw_identity: Mapping[str, Mapping[str, str]] | None = None) -> bytes:
    """The batch's frames, events, identities and collector reports as one format-3 body: one
    IPC stream, one record batch of one row, a list<struct> column per kind (parse rejections
    are not data: a caller with rejections sends line protocol, whose lines the service
    names). A frame's `entity` dictionary holds the entities its rows name, or with `whole`
    its entity table as it is (a relay's, shared by its bodies:
    collectors.agent.relay_roster). `raw_identity`: values a decode refused, written as
    they came (Decoded.refused_identity), so the body's reader refuses and names them."""
    fields: list[pa.Field] = []
    arrays: list[pa.Array] = []
    for kind, table, metrics in _kinds(batch, reports, whole, raw_identity or {}):
        rows = pa.StructArray.from_arrays([c.combine_chunks() for c in table.columns],
                                          fields=list(table.schema))
        fields.append(pa.field(kind, pa.list_(rows.type), nullable=False,
                               metadata=None if metrics is None else {META_METRICS: metrics}))
        arrays.append(pa.ListArray.from_arrays(pa.array([0, len(rows)], pa.int32()), rows))
    schema = pa.schema(fields, metadata={META_FORMAT: FORMAT_VERSION})
    out = pa.BufferOutputStream()
    with ipc.new_stream(out, schema) as w:
        w.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
    return bytes(out.getvalue())


def _kinds(batch: Batch, reports: Sequence[CollectorReport], whole: bool = False,
           raw_identity: Mapping[str, Mapping[str, str]] | None = None
           ) -> Iterator[tuple[str, pa.Table, bytes | None]]:
    """Each kind the batch holds: its name, its columns, its metric names (scopes only)."""
    for scope, frame in batch.frames.items():
        if len(frame):
            yield (scope.value, *_frame_table(frame, whole))
    if len(batch.events):
        ev = batch.events
        yield EVENTS, pa.table({
            "entity": pa.array(ev.keys, pa.string()).dictionary_encode(),
            "ts": pa.array(ev.ts, pa.float64()),
            "metric": pa.array(ev.metrics, pa.string()).dictionary_encode(),
            "value": pa.array(ev.values, pa.float64())}), None
    if reports:
        yield COLLECTORS, pa.table(
            {name: pa.array([getattr(r, name) for r in reports], t)
             for name, t in _REPORT_TYPES.items()}), None
    if batch.identity or raw_identity:
        yield IDENTITY, _identity_table(batch.identity, raw_identity or {}), None


def _identity_table(idents: Mapping[str, identity.GpuIdentity],
                    raw: Mapping[str, Mapping[str, str]]) -> pa.Table:
    """One row per GPU: its identity, then (refused values to hand on) a row per key of
    `raw` holding those values as they came; a reader joins a key's rows."""
    keys = list(idents) + list(raw)
    cols: dict[str, pa.Array] = {
        "entity": pa.array(keys, pa.string()),
        "at": pa.array([i.at for i in idents.values()] + [0.0] * len(raw), pa.float64())}
    for name in identity.FIELDS:
        cols[name] = pa.array([getattr(i, name) for i in idents.values()]
                              + [r.get(name, "") for r in raw.values()], pa.string())
    return pa.table(cols)


def _frame_table(frame: Frame, whole: bool = False) -> tuple[pa.Table, bytes]:
    """The frame's columns, and the metric names its `values` lists hold."""
    ents = frame.entities.entities
    if whole:
        idx: np.ndarray = frame.rows
        keys = _keys_of(frame.entities)
    else:
        used, idx = np.unique(frame.rows, return_inverse=True)  # only the entities rows name
        keys = pa.array([ents[i].key for i in used.tolist()], pa.string())
    cols: dict[str, pa.Array] = {
        "entity": pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32)), keys),
        "ts": pa.array(frame.ts, pa.float64())}
    reported = np.flatnonzero(~np.isnan(frame.values).all(axis=0))
    if len(reported):
        flat = np.ascontiguousarray(frame.values[:, reported]).ravel()
        cols[VALUES] = pa.FixedSizeListArray.from_arrays(
            pa.array(flat, pa.float64(), mask=np.isnan(flat)), len(reported))
    metrics = CATALOG.columns(frame.scope)
    return pa.table(cols), ",".join(metrics[j].name for j in reported.tolist()).encode()


_KEYS: dict[int, tuple[EntityTable, pa.Array]] = {}


def _keys_of(table: EntityTable) -> pa.Array:
    """A whole table's keys as Arrow, kept per table (a relay writes one table again and
    again: collectors.agent.relay_roster)."""
    got = _KEYS.get(id(table))
    if got is None or got[0] is not table:
        if len(_KEYS) >= 256:
            _KEYS.clear()
        got = _KEYS[id(table)] = (table, pa.array([e.key for e in table.entities], pa.string()))
    return got[1]


# ---- reading ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Limits:
    max_rows: int = 1_000_000  # rows of all kinds together (as lines per request)
    max_columns: int = 256
    # Dictionary entries of all a body's dictionaries together, and their bytes as sent,
    # counted from the messages' metadata before Arrow reads them (the service sets these
    # to what its window store can hold: a body listing more is refused whole, 400).
    max_keys: int = 4_000_000
    max_key_bytes: int = 256 * 2**20
    max_key_length: int = 512  # bytes of one entity key (a host name is at most 253)


class Decoder:
    """Reads bodies into Batches. Entity tables are kept per dictionary (a node's agent sends
    the same keys every round), so the window store meets the same table object again and
    its slot lookup is cached; bounded by their estimated bytes (`max_table_bytes`) and
    count, least recently used first out. Safe from many threads at once: nothing but the
    cache is shared between decodes, and its lock is held only to look up or keep a table."""

    def __init__(self, limits: Limits = Limits(), max_tables: int = 16_384,
                 max_table_bytes: int = 256 * 2**20) -> None:
        self.limits = limits
        self.max_tables = max_tables
        self._tables: ByteBudgetCache[tuple[Scope, bytes], EntityTable] = ByteBudgetCache(
            max_table_bytes, max_tables)

    @property
    def table_bytes(self) -> int:
        """The estimated bytes of the entity tables kept."""
        return self._tables.bytes

    def forget(self) -> None:
        self._tables.clear()

    def decode(self, body: bytes, max_new: int | None = None) -> Decoded:
        """`max_new`: raise OverBudget before making more new entities than this (keys not
        met before cost tens of µs each: the event loop decodes only bodies of known ones)."""
        buf = pa.py_buffer(body)
        src = pa.BufferReader(buf)
        out = Decoded(Batch(), max_new=max_new)
        if not buf.size:
            return out
        _, rows = _scan(src, 1, _Tally(self.limits))
        if rows > self.limits.max_rows:
            raise ArrowPayloadError(f"more than {self.limits.max_rows} rows")
        try:
            stream = ipc.open_stream(buf.slice(0, src.tell()))
        except (pa.ArrowException, ValueError, OSError) as exc:
            raise ArrowPayloadError(f"stream 1 does not open: {exc}") from None
        fmt = (stream.schema.metadata or {}).get(META_FORMAT)
        if fmt != FORMAT_VERSION.encode():
            raise ArrowPayloadError(f"schema metadata {META_FORMAT.decode()!r} must be "
                                    f"{FORMAT_VERSION!r} (formats '1' and '2', a stream per "
                                    f"kind, are no longer read), got {fmt!r}")
        if src.tell() < buf.size:
            raise ArrowPayloadError(f"a format-{FORMAT_VERSION} body is one stream; "
                                    "more follows it")
        self._one_stream(stream, out)
        return out

    def _one_stream(self, stream: ipc.RecordBatchStreamReader, out: Decoded) -> None:
        """Each column one kind, its rows the items of the batch's one list."""
        schema = stream.schema
        kinds = schema.names
        if len(set(kinds)) != len(kinds) or not set(kinds) <= KINDS:
            raise ArrowPayloadError(f"the columns must be kinds of {sorted(KINDS)}, each once, "
                                    f"got {kinds[:20]}")
        for f in schema:
            t = f.type
            if not pa.types.is_list(t) or not pa.types.is_struct(t.value_type):
                raise ArrowPayloadError(f"column {f.name!r} must be list<struct>, got {t}")
            if t.value_type.num_fields > self.limits.max_columns:
                raise ArrowPayloadError(f"column {f.name!r} has more than "
                                        f"{self.limits.max_columns} fields")
        try:
            batches = list(stream)
        except (pa.ArrowException, ValueError, OSError) as exc:
            raise ArrowPayloadError(f"the body does not decode: {exc}") from None
        if len(batches) != 1 or batches[0].num_rows != (1 if kinds else 0):
            raise ArrowPayloadError(f"a format-{FORMAT_VERSION} body holds one record batch of "
                                    f"one row, got {len(batches)} batches of "
                                    f"{[b.num_rows for b in batches][:4]} rows")
        batch = batches[0]
        try:  # cheap: each array's declared length fits its buffers (so the body's bytes)
            batch.validate()
        except pa.ArrowException as exc:
            raise ArrowPayloadError(f"the body is malformed: {exc}") from None
        lists = batch.columns
        # Its rows are the lists' items (the values of its one row, or more)
        out.rows = sum(len(col.values) for col in lists)
        if out.rows > self.limits.max_rows:
            raise ArrowPayloadError(f"more than {self.limits.max_rows} rows")
        try:
            batch.validate(full=True)
        except pa.ArrowException as exc:  # offsets out of bounds, non-UTF-8 text...
            raise ArrowPayloadError(f"the body is malformed: {exc}") from None
        for f, col in zip_strict(schema, lists):
            if col.null_count:
                raise ArrowPayloadError(f"column {f.name!r}: its list is null")
            offsets = np.frombuffer(col.buffers()[1], np.int32, 2, col.offset * 4)  # validated
            start, end = int(offsets[0]), int(offsets[1])
            rows = col.values.slice(start, end - start)
            if rows.null_count:
                raise ArrowPayloadError(f"column {f.name!r}: a null row")
            kind_batch = pa.RecordBatch.from_struct_array(rows)
            self._take(out, f.name, kind_batch, f.type.value_type.names, f.metadata)

    def _take(self, out: Decoded, kind: str, batch: pa.RecordBatch, names: list[str],
              meta: dict[bytes, bytes] | None) -> None:
        """One kind's rows into `out`."""
        if kind == EVENTS:
            out.batch.events = _events(pa.Table.from_batches([batch]))
        elif kind == COLLECTORS:
            out.reports = _reports(pa.Table.from_batches([batch]))
        elif kind == IDENTITY:
            _identities(pa.Table.from_batches([batch]), out, self.limits.max_key_length)
        else:
            frame = self._frame(Scope(kind), names, meta, batch, out)
            if len(frame):
                out.batch.add(frame)

    def _frame(self, scope: Scope, names: list[str], meta: dict[bytes, bytes] | None,
               batch: pa.RecordBatch, out: Decoded) -> Frame:
        if names[:2] != ["entity", "ts"]:
            raise ArrowPayloadError(f"stream {scope.value!r}: the first columns must be "
                                    f"'entity' and 'ts', got {names[:2]}")
        values = _values(scope, names, (meta or {}).get(META_METRICS), batch)
        if not batch.num_rows:
            return Frame.empty(EntityTable(scope, ()))
        ts = _finite_ts(batch, scope.value)
        ent = batch.column(0)
        if not pa.types.is_dictionary(ent.type) or ent.type.value_type.id != _STR_ID:
            raise ArrowPayloadError(f"stream {scope.value!r}: 'entity' must be "
                                    f"dictionary<utf8>, got {ent.type}")
        if ent.null_count:
            raise ArrowPayloadError(f"stream {scope.value!r}: 'entity' has nulls")
        table_, rows = self._table(scope, ent, out)
        return Frame(table_, rows, ts, values)

    def _table(self, scope: Scope, ent: pa.DictionaryArray, out: Decoded
               ) -> tuple[EntityTable, np.ndarray]:
        """The frame's entity table and its rows' indices into it. Looked up by the
        dictionary's own bytes (validated utf8: its offsets and text say exactly which keys,
        in which order), so a node's table met again costs no Python string per key. A table
        not met is made of the whole dictionary only when its rows name enough of it (see
        WHOLE_KEYS); else of the keys they name alone, the others never read."""
        dictionary = ent.dictionary
        if dictionary.null_count:
            raise ArrowPayloadError(f"stream {scope.value!r}: a null entity key")
        rows = ent.indices.to_numpy().astype(np.int32, copy=False)  # validated: in range
        n = len(dictionary)
        out.keys += n
        whole = (scope, _utf8_bytes(dictionary))
        got = self._tables.get(whole)
        if got is not None:  # its keys were checked when it was made
            return got, rows
        longest = int(np.diff(_offsets(dictionary)).max()) if n else 0
        if longest > self.limits.max_key_length:
            raise ArrowPayloadError(f"stream {scope.value!r}: an entity key of {longest} "
                                    f"bytes (at most {self.limits.max_key_length})")
        used, inverse = np.unique(rows, return_inverse=True)
        if n <= max(WHOLE_KEYS, KEYS_PER_ROW * len(used)):
            return self._build(whole, scope, dictionary, out), rows
        named = dictionary.take(pa.array(used.astype(np.int32)))
        key = (scope, _utf8_bytes(named))
        got = self._tables.get(key)
        if got is None:
            got = self._build(key, scope, named, out)
        return got, inverse.reshape(-1).astype(np.int32)

    def _build(self, key: tuple[Scope, bytes], scope: Scope, dictionary: pa.Array,
               out: Decoded) -> EntityTable:
        if out.max_new is not None and out.parsed + len(dictionary) > out.max_new:
            raise OverBudget(f"more than {out.max_new} new entities")
        keys: list[str | None] = dictionary.to_pylist()
        out.parsed += len(keys)
        if len(set(keys)) != len(keys):
            raise ArrowPayloadError(f"stream {scope.value!r}: the entity dictionary repeats "
                                    "a key")
        ents = []
        for k in keys:
            if k is None:
                raise ArrowPayloadError(f"stream {scope.value!r}: a null entity key")
            e = _entity(k, scope.value)
            if e.scope is not scope:
                raise ArrowPayloadError(f"stream {scope.value!r}: {k[:80]!r} is a "
                                        f"{e.scope.value} key, not a {scope.value} one")
            ents.append(e)
        table = EntityTable(scope, ents)
        self._tables.put(key, table, len(key[1]) + len(ents) * ENTRY_BYTES)
        return table


def _offsets(arr: pa.Array) -> np.ndarray:
    """A utf8 array's offsets, in place (validated: len + 1 of them within its buffers)."""
    return np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)


def _utf8_bytes(arr: pa.Array) -> bytes:
    """A utf8 array's keys as one bytes value: its offsets (rebased to 0) and text."""
    text = arr.buffers()[2]
    offsets = _offsets(arr)
    start, end = int(offsets[0]), int(offsets[-1])
    data = text.slice(start, end - start).to_pybytes() if text is not None else b""
    return bytes((offsets - offsets[0]).tobytes()) + b"\x00" + data


def _entity(key: str, where: str) -> Entity:
    try:
        return Entity.parse(key)
    except ValueError as exc:  # its message quotes the key: not all of a long one
        raise ArrowPayloadError(f"stream {where!r}: {str(exc)[:300]}") from None


def _values(scope: Scope, names: list[str], metrics: bytes | None, batch: pa.RecordBatch
            ) -> np.ndarray:
    """The `values` lists as the frame's (rows, catalog columns) matrix."""
    cols = _metric_columns(scope, metrics)
    want = ["entity", "ts", VALUES] if cols else ["entity", "ts"]
    if names != want:
        raise ArrowPayloadError(f"stream {scope.value!r}: the columns must be {want}, got "
                                f"{names[:20]}")
    n = batch.num_rows
    values = np.full((n, len(CATALOG.columns(scope))), np.nan)
    if not cols:
        return values
    col = batch.column(2)
    t = col.type
    if (not pa.types.is_fixed_size_list(t) or t.value_type.id != _F64_ID
            or t.list_size != len(cols)):
        raise ArrowPayloadError(f"stream {scope.value!r}: 'values' must be "
                                f"fixed_size_list<float64>[{len(cols)}] (one item per metric "
                                f"named), got {t}")
    if col.null_count:
        raise ArrowPayloadError(f"stream {scope.value!r}: 'values' has a null list (a "
                                "metric not reported is a null item)")
    k = len(cols)
    # The child items of these lists (not flatten(): a compute call costing more than the
    # rest); null items read as NaN.
    flat = col.values.slice(col.offset * k, n * k).to_numpy(zero_copy_only=False)
    values[:, _index(tuple(cols))] = flat.reshape(n, k)
    return values


@functools.lru_cache(maxsize=64)
def _index(cols: tuple[int, ...]) -> slice | np.ndarray:
    """Catalog columns as an index: a slice when they are in catalog order, end to end (what
    our agent sends), which numpy assigns without gathering."""
    if cols == tuple(range(cols[0], cols[0] + len(cols))):
        return slice(cols[0], cols[0] + len(cols))
    return np.asarray(cols, np.intp)


@functools.lru_cache(maxsize=64)
def _metric_columns(scope: Scope, raw: bytes | None) -> list[int]:
    """Catalog columns of the metric names a scope column's metadata lists."""
    if raw is None:
        raise ArrowPayloadError(f"stream {scope.value!r}: schema metadata "
                                f"{META_METRICS.decode()!r} is missing")
    text = raw.decode("utf-8", "replace")
    at = _COLUMN_AT[scope]
    cols = []
    for name in text.split(",") if text else []:
        j = at.get(name)
        if j is None:
            raise ArrowPayloadError(f"stream {scope.value!r}: {name[:80]!r} is not a "
                                    f"{scope.value} metric of the catalog")
        if j in cols:
            raise ArrowPayloadError(f"stream {scope.value!r}: metric {name!r} repeated")
        cols.append(j)
    return cols


def _finite_ts(table: pa.Table | pa.RecordBatch, where: str, name: str = "ts") -> np.ndarray:
    col = table.column(name)
    if col.type != _F64 or col.null_count:
        raise ArrowPayloadError(f"stream {where!r}: {name!r} must be float64 without nulls, "
                                f"got {col.type}" + (" with nulls" if col.null_count else ""))
    ts = np.asarray(col.to_numpy(), np.float64)
    if not np.isfinite(ts).all():
        raise ArrowPayloadError(f"stream {where!r}: {name!r} holds a value that is not finite")
    return ts


def _events(table: pa.Table) -> EventFrame:
    _expect(table, EVENTS, {"entity": None, "ts": pa.float64(), "metric": None,
                            "value": pa.float64()})
    ts = _finite_ts(table, EVENTS)
    keys = _strings(table, "entity", EVENTS)
    metrics = _strings(table, "metric", EVENTS)
    values = table.column("value").to_numpy()
    for key, metric in set(zip_strict(keys, metrics)):
        e = _entity(key, EVENTS)
        try:
            m = CATALOG[metric]
        except KeyError:
            m = None
        if m is None or m.kind is not Kind.EVENT or m.scope is not e.scope:
            raise ArrowPayloadError(f"stream 'events': {metric[:80]!r} is not an event metric "
                                    f"of {e.scope.value} entities")
    return EventFrame(keys, ts.tolist(), metrics, values.tolist())


def _identities(table: pa.Table, out: Decoded, max_key_length: int) -> None:
    """The `identity` rows into out.batch.identity; a value identity.clean refuses is named
    in out.batch.rejected (and kept as sent in out.refused_identity), its GPU's others kept.
    Each row costs Python work (a key check, a clean), so rows count against `max_new` as
    new entities do: a body of many identities is decoded off the event loop."""
    _expect(table, IDENTITY, _IDENTITY_TYPES)
    n = table.num_rows
    if out.max_new is not None and out.parsed + n > out.max_new:
        raise OverBudget(f"more than {out.max_new} new entities and identities")
    at = _finite_ts(table, IDENTITY, "at")
    keys = _strings(table, "entity", IDENTITY)
    longest = max(map(len, keys), default=0)
    if longest > max_key_length:  # characters: at most as many as bytes
        raise ArrowPayloadError(f"stream {IDENTITY!r}: an entity key of {longest} "
                                f"characters (at most {max_key_length})")
    values = {f: table.column(f).to_pylist() for f in identity.FIELDS}
    got: dict[str, identity.GpuIdentity] = {}
    for i, key in enumerate(keys):
        why = _gpu_key_problem(key)
        if why is not None:
            raise ArrowPayloadError(f"stream {IDENTITY!r}: {why}")
        raw = {f: v for f in identity.FIELDS if (v := values[f][i])}
        ident, problems = identity.clean(raw, float(at[i]))
        for problem in problems:
            name = problem.partition(":")[0]
            out.batch.rejected.append(Rejection(f"identity {problem}", entity=key,
                                                metric=name))
            if isinstance(raw.get(name), str):
                out.refused_identity.setdefault(key, {})[name] = str(raw[name])
        if ident:
            identity.merge_into(got, {key: ident})
    identity.merge_into(out.batch.identity, got)


@functools.lru_cache(maxsize=16_384)  # GPU keys met again each few minutes (<= 10 MB)
def _gpu_key_problem(key: str) -> str | None:
    """Why `key` is not a GPU's entity key ('n1:gpu3'), or None."""
    try:
        e = Entity.parse(key)
    except ValueError as exc:  # its message quotes the key: not all of a long one
        return str(exc)[:300]
    if e.scope is not Scope.GPU:
        return f"{key[:80]!r} is a {e.scope.value} key, not a GPU's"
    return None


def _reports(table: pa.Table) -> list[CollectorReport]:
    _expect(table, COLLECTORS, _REPORT_TYPES)
    out = []
    for i, r in enumerate(table.to_pylist()):
        if r["ts"] is None or not math.isfinite(r["ts"]):
            raise ArrowPayloadError(f"stream 'collectors', row {i}: 'ts' is not finite")
        fields = {"up": int(r["up"]) if r["up"] is not None else None,
                  "scrape_seconds": r["scrape_seconds"], "samples": r["samples"],
                  "error": r["error"]}
        p = Point("gpuhealth_collector", {"host": r["host"] or "", "collector":
                                         r["collector"] or ""},
                  {k: v for k, v in fields.items() if v is not None},
                  round(r["ts"] * 1e9))
        got = read_report(p)
        if isinstance(got, str):
            raise ArrowPayloadError(f"stream 'collectors', row {i}: {got}")
        # as line protocol's are (collectors.schema): names reach /metrics labels and sinks
        why = name_problem(got.host, "host") or name_problem(got.collector, "collector")
        if why is not None:
            raise ArrowPayloadError(f"stream 'collectors', row {i}: {why}")
        out.append(got)
    return out


def _expect(table: pa.Table, kind: str, types: dict[str, pa.DataType | None]) -> None:
    if sorted(table.column_names) != sorted(types):
        raise ArrowPayloadError(f"stream {kind!r} must have the columns {sorted(types)}, got "
                                f"{table.column_names[:20]}")
    for name, t in types.items():
        got = table.column(name).type
        if t is not None and got != t:
            raise ArrowPayloadError(f"stream {kind!r}: column {name!r} is {got}, not {t}")


def _strings(table: pa.Table, name: str, kind: str) -> list[str]:
    col = table.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if col.type != pa.string() or col.null_count:
        raise ArrowPayloadError(f"stream {kind!r}: {name!r} must be utf8 without nulls")
    return [str(x) for x in col.to_pylist()]


# ---- bounds from the messages' metadata, before anything is decoded ---------------------------

class _Tally:
    """A body's dictionaries so far, against its limits (all of them together)."""

    __slots__ = ("bytes", "keys", "limits")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.keys = self.bytes = 0

    def dictionary(self, nth: int, keys: int, nbytes: int) -> None:
        self.keys += keys
        self.bytes += nbytes
        lim = self.limits
        if self.keys > lim.max_keys:
            raise ArrowPayloadError(f"stream {nth}: its dictionaries list more than "
                                    f"{lim.max_keys} keys in all (the most entities this "
                                    "service holds; raise ingest.max_gpus for more)")
        if self.bytes > lim.max_key_bytes:
            raise ArrowPayloadError(f"stream {nth}: its dictionaries hold more than "
                                    f"{lim.max_key_bytes} bytes in all")


def _scan(src: pa.BufferReader, nth: int, tally: _Tally | None = None) -> tuple[int, int]:
    """Reads one stream's messages in place; (record batches, rows). Refuses a stream without
    its end-of-stream marker (a truncated body), compressed buffers, too many batches or
    dictionaries, delta dictionaries, metadata over MAX_META_BYTES, and (with `tally`)
    dictionaries over the body's limits: all before Arrow opens any of it."""
    try:
        reader = ipc.MessageReader.open_stream(src)
    except pa.ArrowException as exc:
        raise ArrowPayloadError(f"stream {nth} is not an Arrow IPC stream: {exc}") from None
    tally = tally if tally is not None else _Tally(Limits())
    batches = rows = schemas = dictionaries = 0
    first = True
    while True:
        pos = src.tell()
        try:
            msg = reader.read_next_message()
        except StopIteration:
            if src.tell() - pos != len(_EOS) or first:
                raise ArrowPayloadError(f"stream {nth} is truncated (no end-of-stream marker"
                                        f"{'' if not first else ' or no schema'})") from None
            return batches, rows
        except (pa.ArrowException, OSError) as exc:
            raise ArrowPayloadError(f"stream {nth} is truncated or malformed: "
                                    f"{exc}") from None
        mtype = msg.type  # made anew on each read
        if first and mtype != "schema":
            raise ArrowPayloadError(f"stream {nth} does not start with a schema")
        first = False
        meta = msg.metadata
        if meta.size > MAX_META_BYTES:
            raise ArrowPayloadError(f"stream {nth}: a {mtype} message's metadata is "
                                    f"{meta.size} bytes (at most {MAX_META_BYTES})")
        if mtype == "schema":
            if schemas:
                raise ArrowPayloadError(f"stream {nth} holds a second schema")
            schemas += 1
            continue
        if mtype not in ("record batch", "dictionary"):
            raise ArrowPayloadError(f"stream {nth} holds a {mtype} message")
        length, compressed, delta = _header_of(meta.to_pybytes(), mtype)
        if compressed:
            raise ArrowPayloadError(f"stream {nth} has compressed buffers: send it "
                                    "uncompressed (gzip the body instead)")
        if mtype == "record batch":
            batches += 1
            rows += length
            if batches > MAX_BATCHES:
                raise ArrowPayloadError(f"stream {nth} holds more than {MAX_BATCHES} batches")
            continue
        if delta:  # Arrow would join each delta to the dictionary so far: a copy per delta
            raise ArrowPayloadError(f"stream {nth} holds a delta dictionary (send each "
                                    "dictionary whole)")
        dictionaries += 1
        if dictionaries > MAX_DICTIONARIES:
            raise ArrowPayloadError(f"stream {nth} holds more than {MAX_DICTIONARIES} "
                                    "dictionaries")
        tally.dictionary(nth, length, msg.body.size if msg.body is not None else 0)


_F64 = pa.float64()
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")
_HEADER_TYPE = {"dictionary": 2, "record batch": 3}  # Arrow's MessageHeader union


# Remembered message headers: a few per node agent, by their metadata's bytes (up to
# MAX_META_BYTES each), so bounded by those bytes as well as by count.
MAX_HEADERS = 16_384
MAX_HEADER_BYTES = 16 * 2**20
_HEADERS: ByteBudgetCache[tuple[bytes, str], tuple[int, bool, bool]] = ByteBudgetCache(
    MAX_HEADER_BYTES, MAX_HEADERS)


def _header_of(meta: bytes, kind: str) -> tuple[int, bool, bool]:
    """_batch_header, remembered: a node agent's messages have the same metadata every
    round (the same rows, buffers and offsets), and reading the flatbuffer in Python was
    most of a small body's scan."""
    key = (meta, kind)
    got = _HEADERS.get(key)
    if got is None:
        got = _batch_header(meta, kind)  # raises for a malformed one: nothing remembered
        _HEADERS.put(key, got, len(meta) + 100)
    return got


def _batch_header(meta: bytes, kind: str) -> tuple[int, bool, bool]:
    """(rows, compressed, delta) of a record or dictionary batch, read from the flatbuffer
    `Message` (format/Message.fbs: Message.header -> RecordBatch{length, nodes, buffers,
    compression}; DictionaryBatch{id, data: RecordBatch, isDelta}). Arrow has verified the
    flatbuffer already; a lookup that falls outside it is refused all the same."""
    try:
        msg = _U32.unpack_from(meta, 0)[0]
        htype = _field(meta, msg, 1)
        if htype is None or meta[htype] != _HEADER_TYPE[kind]:
            raise ArrowPayloadError("a batch message's header disagrees with its type")
        header = _ref(meta, _field(meta, msg, 2))
        delta = False
        if kind == "dictionary":
            at_delta = _field(meta, header, 2)
            delta = at_delta is not None and meta[at_delta] != 0
            header = _ref(meta, _field(meta, header, 1))
        at = _field(meta, header, 0)
        length = _I64.unpack_from(meta, at)[0] if at is not None else 0
        compressed = _field(meta, header, 3) is not None
    except (struct.error, IndexError, TypeError):
        raise ArrowPayloadError("a batch message's metadata is malformed") from None
    if length < 0:
        raise ArrowPayloadError("a batch declares a negative length")
    return length, compressed, delta


def _field(buf: bytes, table: int, i: int) -> int | None:
    """Position of field `i` of the flatbuffer table at `table`, None when absent."""
    vt = table - _I32.unpack_from(buf, table)[0]
    vt_len = _U16.unpack_from(buf, vt)[0]
    slot = 4 + 2 * i
    if slot + 2 > vt_len:
        return None
    off = _U16.unpack_from(buf, vt + slot)[0]
    return table + off if off else None


def _ref(buf: bytes, at: int | None) -> int:
    if at is None:
        raise TypeError("absent table")
    return at + int(_U32.unpack_from(buf, at)[0])
