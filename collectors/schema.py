"""Line-protocol points onto the metric catalog: parsed points in, a columnar Batch out.

Three schemas are understood, told apart by measurement name:

- ours (the trace format): `gpu`, `nvlink`, `ib_port`, `node`, `psu`, `fan` with canonical
  catalog field names, and one measurement per event metric (`xid`, `sel`, `sxid`, field
  `code`);
- Telegraf `nvidia_smi` (tag `index` is the GPU) and `infiniband`, with field names taken from
  each Metric.telegraf;
- Telegraf `prometheus` scraping dcgm-exporter (collectors.telegraf_prom translates it).

Which tag names the node, per source, is collectors.node_names: a Telegraf point whose only name
is a known exporter's pod name is refused, never made a node.

Node agents' `gpuhealth_collector` status points (collectors.collector_status) are not samples:
the mapper keeps them aside for `take_reports`. Neither are GPU identities (collectors.identity):
our `gpu_info` points, and the `uuid`/`name` tags and `driver_version`/`serial`/`vbios_version`
fields of Telegraf's `nvidia_smi`, land in `Batch.identity`.

Bad values are rejected field by field, so one bad field never costs the rest of its line.
`parse` sends the lines whose layout it has met before through collectors.schema_fastpath,
which fills the columns without a Python step per field; the rest take the point-by-point path
below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import field
from operator import itemgetter
from types import MappingProxyType

import numpy as np

from collectors import collector_status, identity
from collectors.catalog import CATALOG, FieldType, Kind, Metric, Scope
from collectors.catalog import EVENT_FIELD as EVENT_FIELD  # re-exported for writers
from collectors.collector_status import CollectorReport
from collectors.compat import dataclass, zip_strict
from collectors.frames import (
    Batch,
    Entity,
    EntityTable,
    Frame,
    Rejection,
    index_problem,
    name_problem,
)
from collectors.ignored import IgnoredNames
from collectors.lineprotocol import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    FieldValue,
    Point,
    oversized,
    parse,
    parse_numbered,
    precision_ns,
)
from collectors.lineprotocol_format import escape_key, format_line, format_number
from collectors.node_names import DEFAULT_ORDER, pod_reason
from collectors.schema_fastpath import FastPath
from collectors.schema_frames import Cells, Chunk, assemble
from collectors.telegraf_prom import translate

# The tags that name an entity, in Entity order (node, unit, sub), and which must be integers.
_OWN_TAGS: dict[Scope, tuple[str, ...]] = {
    Scope.GPU: ("host", "gpu"),
    Scope.NVLINK: ("host", "gpu", "link"),
    Scope.IB_PORT: ("host", "device", "port"),
    Scope.NODE: ("host",),
    # A supply's or fan's id is the BMC's (a Redfish MemberId, an IPMI entity instance): a
    # name, not a number ("0", "PSU1"), checked with the host name grammar.
    Scope.PSU: ("host", "psu"),
    Scope.FAN: ("host", "fan"),
}
# ... as writers of our schema (the service's InfluxDB sink) tag a scope's points.
ENTITY_TAGS: Mapping[Scope, tuple[str, ...]] = MappingProxyType(_OWN_TAGS)
_NUMERIC_TAGS = frozenset(("gpu", "link", "port", "index"))
_TELEGRAF = {"nvidia_smi": (Scope.GPU, ("host", "index")),
             "infiniband": (Scope.IB_PORT, ("host", "device", "port"))}

# nvidia-smi reports some flags as words; Telegraf passes them on as strings. Flags only: an
# enumerated state (an IB port's, where 1 is DOWN) takes no word for 1.
_STATE_WORDS = {"yes": 1.0, "no": 0.0, "active": 1.0, "not active": 0.0,
                "true": 1.0, "false": 0.0}


@dataclass(frozen=True, slots=True)
class MeasurementSpec:
    """How one measurement maps onto the catalog: `fields` gives each field's column in
    CATALOG.columns(scope); an event measurement instead carries `event` in field `code`."""

    measurement: str
    scope: Scope
    tags: tuple[str, ...]
    fields: Mapping[str, int] = field(default_factory=dict)
    event: str | None = None


def _specs() -> dict[str, MeasurementSpec]:
    specs: dict[str, MeasurementSpec] = {}
    for scope, tags in _OWN_TAGS.items():
        cols = {m.name: i for i, m in enumerate(CATALOG.columns(scope))}
        specs[scope.value] = MeasurementSpec(scope.value, scope, tags, cols)
        for ev in CATALOG.events(scope):
            specs[ev.name] = MeasurementSpec(ev.name, scope, tags, event=ev.name)
    for meas, (scope, tags) in _TELEGRAF.items():
        cols = {m.telegraf.split(".", 1)[1]: i for i, m in enumerate(CATALOG.columns(scope))
                if m.telegraf and m.telegraf.startswith(meas + ".")}
        specs[meas] = MeasurementSpec(meas, scope, tags, cols)
    return specs


_SPECS = _specs()
MEASUREMENTS: Mapping[str, MeasurementSpec] = MappingProxyType(_SPECS)


_Reject = Callable[[Rejection], None]


class _Bad(Exception):
    pass


@dataclass(slots=True)
class _Rows:
    """One scope's samples while a batch is being assembled (row = entity slot at one time)."""

    row_of: dict[tuple[int, int], int] = field(default_factory=dict)
    slots: list[int] = field(default_factory=list)
    ts_ns: list[int] = field(default_factory=list)
    first: list[int] = field(default_factory=list)  # line that opened each row
    rows: list[int] = field(default_factory=list)
    cols: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # line of each cell
    merged: bool = False  # a row got fields from two points, so a cell may be set twice
    chunks: list[Chunk] = field(default_factory=list)  # lines the fast path took


# Entities a mapper remembers before it starts over: more than one service holds (20,000 GPUs
# with their links and ports), so only a flood of names from the wire reaches it.
MAX_ENTITIES = 500_000


class SchemaMapper:
    """Builds Batches from points. Stateful on purpose: it keeps one EntityTable per scope and
    hands out the same object while no new entity appears (the window store caches its slot
    lookup by table identity); a new entity yields a new, longer table with old slots kept.

    `strict=False` ignores unknown measurements and fields instead of rejecting them, as
    InfluxDB stores whatever it is sent: for feeds such as a Telegraf flush that carry far more
    than the catalog tracks. What it ignores is counted per (measurement, field) until
    `take_ignored`, a bounded tally (every name comes from the wire)."""

    def __init__(self, *, strict: bool = True, max_ignored_names: int = 1000,
                 max_entities: int = MAX_ENTITIES,
                 node_name_from: Sequence[str] = DEFAULT_ORDER) -> None:
        """`max_entities`: entities remembered (names come from the wire); past it every
        table and layout is relearned from scratch, which costs one slower parse.
        `node_name_from`: the labels that name a Telegraf-scraped dcgm-exporter sample's node,
        first first (`ingest.node_name_from`)."""
        self.strict = strict
        self.node_name_from = tuple(node_name_from)
        self.max_entities = max_entities
        self._ignored = IgnoredNames(max_ignored_names)
        self._last_xid: dict[tuple[str, str], int] = {}  # Telegraf-scraped DCGM Xid baselines
        self.forget_entities()
        self._counters = {s: frozenset(i for i, m in enumerate(CATALOG.columns(s))
                                       if m.kind is Kind.COUNTER) for s in Scope}
        self._whole = {s: frozenset(i for i, m in enumerate(CATALOG.columns(s))
                                    if m.field_type is FieldType.INTEGER) for s in Scope}
        self.fast_lines = 0  # lines parse() took on the fast path, for tests and benchmarks
        self._reports: list[CollectorReport] = []

    @property
    def remembered(self) -> int:
        """Entities this mapper holds a slot for."""
        return len(self._slot_of)

    def forget_entities(self) -> None:
        """Start over: every table and layout is learned again (one slower parse)."""
        self._tables: dict[Scope, EntityTable] = {}
        # Every entity gets its slot when first seen; the table catches up when a frame is built.
        self._known: dict[Scope, list[Entity]] = {s: [] for s in Scope}
        self._slot_of: dict[Entity, int] = {}
        # Tag values -> slot: ints and tuples of strings the garbage collector stops tracking,
        # so remembered names cost a full collection one object each (their Entity).
        self._by_tags: dict[Scope, dict[tuple[str | None, ...], int]] = {
            s: {} for s in Scope}
        self._fast = FastPath()

    def take_ignored(self) -> IgnoredNames:
        """What a lenient mapper ignored since the last call."""
        return self._ignored.take()

    def take_reports(self) -> list[CollectorReport]:
        """The collector status reports parsed since the last call, in line order."""
        out, self._reports = self._reports, []
        return out

    def unfamiliar(self, data: bytes, limit: int) -> bool:
        """Whether parsing `data` would map more than `limit` lines the slow way (new entities
        or layouts): its cost is then not bounded by its size alone."""
        return self._fast.unfamiliar(data, limit)

    def table(self, scope: Scope) -> EntityTable | None:
        return self._tables.get(scope)

    def parse(
        self,
        data: str | bytes | Iterable[str] | Iterable[bytes],
        *,
        first_line: int = 1,
        default_ts_ns: int | None = None,
        precision: str = "ns",
        max_lines: int | None = DEFAULT_MAX_LINES,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
    ) -> Batch:
        """Line protocol to a Batch; parse and schema rejections both land in batch.rejected."""
        if len(self._slot_of) > self.max_entities:
            self.forget_entities()
        lines = _text_lines(data, max_bytes)
        if lines is None:  # not one text within the byte limit: the reference path alone
            points, rejected = parse(data, first_line=first_line, default_ts_ns=default_ts_ns,
                                     precision=precision, max_lines=max_lines,
                                     max_bytes=max_bytes)
            return self.to_batch(points, rejected)
        over: list[Rejection] = []
        if max_lines is not None and len(lines) > max_lines:
            over.append(oversized(first_line + max_lines, first_line + len(lines) - 1,
                                  f"{max_lines} lines"))
            del lines[max_lines:]
        chunks, rest = self._fast.run(lines, first_line, precision_ns(precision), self._ignored)
        self.fast_lines += len(lines) - len(rest)
        points, rejected = parse_numbered(((first_line + i, lines[i]) for i in rest),
                                          default_ts_ns=default_ts_ns, precision=precision)
        batch = Batch(rejected=rejected + over)
        acc = {scope: _Rows(chunks=cs) for scope, cs in chunks.items()}

        def learn(p: Point, spec: MeasurementSpec, slot: int) -> None:
            self._fast.learn(lines[p.line - first_line], p.measurement, p.fields, spec.scope,
                             spec.fields, slot)

        self._map(points, batch, acc, learn)
        return batch

    def to_batch(self, points: Iterable[Point], rejected: Iterable[Rejection] = ()) -> Batch:
        batch = Batch(rejected=list(rejected))
        self._map(points, batch, {}, None)
        return batch

    def _map(self, points: Iterable[Point], batch: Batch, acc: dict[Scope, _Rows],
             learn: Callable[[Point, MeasurementSpec, int], None] | None) -> None:
        """Map points into `acc` and then frames on `batch`; `learn` hears of every point
        taken whole into a frame."""
        reject = batch.rejected.append
        specs = _SPECS
        def refuse(p: Point, reason: str, name: str | None) -> None:
            reject(_rejection(p, reason, None, name))

        for p in translate(points, self._last_xid, refuse, self.node_name_from):
            spec = specs.get(p.measurement)
            if spec is None:
                if p.measurement == identity.MEASUREMENT:
                    self._identity(p, batch, reject)
                elif p.measurement == collector_status.MEASUREMENT:
                    self._report(p, reject)
                elif self.strict:
                    reject(_rejection(p, f"unknown measurement {p.measurement!r} (known: "
                                     f"{', '.join(specs)}, {collector_status.MEASUREMENT})"))
                else:
                    self._ignored.add_fields(p.measurement, p.fields)
                continue
            ts_ns = p.ts_ns
            slot = self._by_tags[spec.scope].get(tuple(map(p.tags.get, spec.tags)))
            known = None if slot is None else (self._known[spec.scope][slot], slot)
            if known is None or ts_ns is None:
                try:
                    if ts_ns is None:
                        raise _Bad("missing timestamp")
                    known = self._entity(spec, p.tags)
                except _Bad as bad:
                    reject(_rejection(p, str(bad)))
                    continue
            if spec.event is not None:
                self._event(batch, spec.event, known[0], ts_ns, p, reject)
                continue
            if spec.measurement == "nvidia_smi":
                p = _telegraf_identity(p, known[0], ts_ns, batch, reject)
            rows = acc.get(spec.scope)
            if rows is None:
                rows = acc[spec.scope] = _Rows()
            before = len(batch.rejected)
            if self._fields(rows, spec, known, ts_ns, p, reject) and learn is not None and (
                    len(batch.rejected) == before):
                learn(p, spec, known[1])
        for scope, rows in acc.items():
            if rows.vals or rows.chunks:
                batch.add(self._frame(scope, rows))

    def _report(self, p: Point, reject: _Reject) -> None:
        got = collector_status.read_report(p)
        if isinstance(got, str):
            reject(_rejection(p, f"{collector_status.MEASUREMENT}: {got}"))
            return
        why = name_problem(got.host, "host") or name_problem(got.collector, "collector")
        if why is not None:
            reject(_rejection(p, f"{collector_status.MEASUREMENT}: {why}"))
            return
        self._reports.append(got)
        extra = [k for k in p.fields if k not in collector_status.FIELDS]
        if extra and self.strict:
            reject(_rejection(p, f"unknown field{'s' if len(extra) > 1 else ''} for measurement "
                                 f"{p.measurement!r}: {', '.join(extra)}", None,
                              extra[0] if len(extra) == 1 else None))
        elif extra:
            self._ignored.add_fields(p.measurement, extra)

    def _identity(self, p: Point, batch: Batch, reject: _Reject) -> None:
        """A `gpu_info` point: the GPU's identity, each bad value refused on its own."""
        host, gpu = p.tags.get("host", ""), p.tags.get("gpu", "")
        why = (name_problem(host, "host") or index_problem(gpu, "gpu")
               or (None if p.ts_ns is not None else "missing timestamp"))
        if why is not None:
            reject(_rejection(p, f"{identity.MEASUREMENT}: {why}"))
            return
        assert p.ts_ns is not None
        key = Entity.gpu(host, int(gpu)).key
        got, problems, unknown = identity.from_fields(p.fields, p.ts_ns / 1e9)
        for why in problems:
            reject(_rejection(p, f"{identity.MEASUREMENT}: {why}", key, why.partition(":")[0]))
        if unknown and self.strict:
            reject(_rejection(p, f"unknown field{'s' if len(unknown) > 1 else ''} for "
                                 f"measurement {identity.MEASUREMENT!r}: {', '.join(unknown)} "
                                 f"(known: {', '.join(identity.FIELDS)})", key))
        elif unknown:
            self._ignored.add_fields(p.measurement, unknown)
        if got:
            identity.merge_into(batch.identity, {key: got})

    def _fields(self, rows: _Rows, spec: MeasurementSpec, known: tuple[Entity, int], ts_ns: int,
                p: Point, reject: _Reject) -> bool:
        """Cells of one point; whether any landed."""
        cols = spec.fields
        counters = self._counters[spec.scope]
        whole = self._whole[spec.scope]
        unknown: list[str] = []
        row = -1
        add_row, add_col, add_val = rows.rows.append, rows.cols.append, rows.vals.append
        line = p.line
        for name, v in p.fields.items():
            col = cols.get(name)
            if col is None:
                unknown.append(name)
                continue
            t = type(v)
            if t is float or t is int:
                x = float(v)
            else:
                y = _number(v, CATALOG.columns(spec.scope)[col])
                if isinstance(y, str):
                    reject(_rejection(p, y, known[0].key, name))
                    continue
                x = y
            if x < 0.0 and col in counters:
                reject(_rejection(p, f"counter {name} is negative: {v}", known[0].key, name))
                continue
            if col in whole and not x.is_integer():
                # One type per field (a real InfluxDB refuses a change): counts and states
                # are integers, and a fraction of one is a sender's error, not a reading.
                reject(_rejection(p, f"field value {v!r} is not a whole number (the catalog "
                                     f"stores {name} as an integer)", known[0].key, name))
                continue
            if row < 0:
                key = (known[1], ts_ns)
                row = rows.row_of.setdefault(key, len(rows.slots))
                if row == len(rows.slots):
                    rows.slots.append(known[1])
                    rows.ts_ns.append(ts_ns)
                    rows.first.append(line)
                else:
                    rows.merged = True
            add_row(row)
            add_col(col)
            add_val(x)
            rows.lines.append(line)
        if unknown and self.strict:
            s = "s" if len(unknown) > 1 else ""
            reject(_rejection(p, f"unknown field{s} for measurement {spec.measurement!r}: "
                             f"{', '.join(unknown)}", known[0].key,
                             unknown[0] if len(unknown) == 1 else None))
        elif unknown:
            self._ignored.add_fields(spec.measurement, unknown)
        return row >= 0

    def _event(self, batch: Batch, metric: str, entity: Entity, ts_ns: int, p: Point,
               reject: _Reject) -> None:
        ts = ts_ns / 1e9
        for name, v in p.fields.items():
            if name != EVENT_FIELD:
                if self.strict:
                    reject(_rejection(p, f"unknown field for measurement {p.measurement!r}: {name} "
                                     f"(an event carries only {EVENT_FIELD!r})",
                                     entity.key, name))
                else:
                    self._ignored.add(p.measurement, name)
                continue
            if isinstance(v, (bool, str)) or not float(v).is_integer() or v < 0:
                reject(_rejection(p, f"{metric} code must be a non-negative integer, got {v!r}",
                                  entity.key, metric))
                continue
            batch.events.add(entity.key, ts, metric, float(v))
        if EVENT_FIELD not in p.fields:
            reject(_rejection(p, f"{metric} point has no {EVENT_FIELD!r} field", entity.key))

    def _entity(self, spec: MeasurementSpec, tags: Mapping[str, str]) -> tuple[Entity, int]:
        """Validate the naming tags of a point not seen before; gives its entity and slot."""
        parts: list[str] = []
        for name in spec.tags:
            v = tags.get(name)
            if not v:
                raise _Bad(f"missing tag {name!r}")
            # Names reach remediation command lines: refused here with the tag that is wrong,
            # before Entity would refuse them with less to say.
            if name in _NUMERIC_TAGS:
                why = index_problem(v, "value")
                if why is None:
                    v = str(int(v))
            else:
                why = name_problem(v, "value")
                if why is None and name == "host" and spec.measurement in _TELEGRAF:
                    # Telegraf's host is its own pod name where `[agent] hostname` is unset.
                    pod = pod_reason(name, v)
                    if pod is not None:
                        raise _Bad(pod)
            if why is not None:
                raise _Bad(f"tag {name!r}: {why}")
            parts.append(v)
        e = Entity(spec.scope, *parts)
        slot = self._slot_of.get(e)
        if slot is None:
            known = self._known[spec.scope]
            slot = self._slot_of[e] = len(known)
            known.append(e)
        self._by_tags[spec.scope][tuple(map(tags.get, spec.tags))] = slot
        return e, slot

    def _frame(self, scope: Scope, rows: _Rows) -> Frame:
        known = self._known[scope]
        table = self._tables.get(scope)
        if table is None or len(table) < len(known):
            table = self._tables[scope] = EntityTable(scope, known)
        width = len(CATALOG.columns(scope))
        if rows.chunks:
            return Frame(table, *assemble(
                width, Cells(np.asarray(rows.slots, np.int64), np.asarray(rows.ts_ns, np.int64),
                              np.asarray(rows.first, np.int64), np.asarray(rows.rows, np.intp),
                              np.asarray(rows.cols, np.intp), np.asarray(rows.vals, np.float64),
                              np.asarray(rows.lines, np.int64), rows.merged), rows.chunks))
        n = len(rows.slots)
        slots = np.asarray(rows.slots, np.int32)
        ts = np.asarray(rows.ts_ns, np.int64) / 1e9
        flat = np.asarray(rows.rows, np.int64) * width + np.asarray(rows.cols, np.int64)
        vals = np.asarray(rows.vals, np.float64)
        if rows.merged:  # a cell set twice keeps its last value
            flat, first = np.unique(flat[::-1], return_index=True)
            vals = vals[::-1][first]
        values = np.full((n, width), np.nan)
        values.reshape(-1)[flat] = vals
        order = np.lexsort((slots, ts))
        return Frame(table, slots[order], ts[order], values[order])


# Telegraf's nvidia_smi: the identity its tags and string fields carry (telegraf-facts.md).
_TELEGRAF_TAGS = {"uuid": "uuid", "name": "model", "pci_bus_id": "pci_bus_id"}
_TELEGRAF_FIELDS = {"driver_version": "driver", "serial": "serial", "vbios_version": "vbios"}


def _telegraf_identity(p: Point, gpu: Entity, ts_ns: int, batch: Batch, reject: _Reject
                       ) -> Point:
    """Take a Telegraf nvidia_smi point's identity into the batch; the point without the
    identity fields, which are then not counted as ignored."""
    raw: dict[str, object] = {ours: p.tags[t] for t, ours in _TELEGRAF_TAGS.items()
                              if t in p.tags}
    taken = [f for f in _TELEGRAF_FIELDS if f in p.fields]
    raw.update((_TELEGRAF_FIELDS[f], p.fields[f]) for f in taken)
    if raw:
        got, problems = identity.clean(raw, ts_ns / 1e9)
        for why in problems:
            reject(_rejection(p, why, gpu.key, why.partition(":")[0]))
        if got:
            identity.merge_into(batch.identity, {gpu.key: got})
    if not taken:
        return p
    return Point(p.measurement, p.tags, {k: v for k, v in p.fields.items()
                                         if k not in _TELEGRAF_FIELDS}, p.ts_ns, p.line,
                 p.source)


def _text_lines(data: str | bytes | Iterable[str] | Iterable[bytes],
                max_bytes: int | None) -> list[str] | None:
    """The lines of a body given whole as valid UTF-8 within `max_bytes`; else None."""
    if isinstance(data, (bytes, bytearray)):
        size = len(data)
        try:
            text = bytes(data).decode()
        except UnicodeDecodeError:
            return None
    elif isinstance(data, str):
        text = data
        size = len(text) if text.isascii() else len(text.encode())
    else:
        return None
    if max_bytes is not None and size + 1 > max_bytes:
        return None
    if "\r" in text:  # CRLF: the reference path strips the CR anyway
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # a final newline ends, not adds
    return lines


def _rejection(p: Point, reason: str, entity: str | None = None,
               metric: str | None = None) -> Rejection:
    return Rejection(f"{p.source}: {reason}" if p.source else reason, p.line, entity, metric)


def _number(v: FieldValue, metric: Metric) -> float | str:
    """The reading a field value gives, or why it gives none. Booleans and words are readings
    of flags only (Metric.takes_bool): on a counter, gauge or enumerated state they are type
    errors, refused rather than read as 1 or 0."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if metric.takes_bool:
        if isinstance(v, bool):
            return 1.0 if v else 0.0
        word = _STATE_WORDS.get(v.strip().lower()) if isinstance(v, str) else None
        if word is not None:
            return word
    if isinstance(v, bool):
        return (f"field value {'true' if v else 'false'} is a boolean: {metric.name} is a "
                f"{metric.kind} ({metric.unit}), a number")
    return f"field value {v!r} is not a number"


# ---- our schema back to line protocol ------------------------------------------------------

def batch_to_lines(batch: Batch) -> Iterator[str]:
    """A Batch in our own schema, in time order: each field in the catalog's type (counters
    and states integers, gauges floats), NaN cells left out, timestamps in nanoseconds."""
    out: list[tuple[int, str]] = []
    for scope, frame in batch.frames.items():
        metrics = CATALOG.columns(scope)
        names = [escape_key(m.name) + "=" for m in metrics]
        types = [m.field_type for m in metrics]
        heads: dict[int, str] = {}
        for slot, ts, row in zip_strict(frame.rows.tolist(), frame.ts.tolist(),
                                        frame.values.tolist()):
            body = ",".join(
                names[j] + text for j, v in enumerate(row)
                if (text := format_number(types[j], v)) is not None  # NaN: not reported
            )
            if not body:
                continue
            head = heads.get(slot)
            if head is None:
                head = heads[slot] = _head(scope.value, frame.entities[slot])
            t = _ns(ts)
            out.append((t, f"{head} {body} {t}"))
    ev = batch.events
    for key, ts, metric, value in zip_strict(ev.keys, ev.ts, ev.metrics, ev.values):
        t = _ns(ts)
        out.append((t, f"{_head(metric, Entity.parse(key))} {EVENT_FIELD}={int(value)}i {t}"))
    for key, ident in batch.identity.items():
        e = Entity.parse(key)
        t = _ns(ident.at)
        out.append((t, format_line(identity.MEASUREMENT, {"host": e.node, "gpu": e.unit},
                                   dict(ident.as_dict()), t)))
    out.sort(key=itemgetter(0))
    return (line for _, line in out)


def _ns(ts: float) -> int:
    # Float seconds carry about 0.2 µs at today's epoch; rounding to µs makes ns stable.
    return round(ts * 1e6) * 1000


def _head(measurement: str, e: Entity) -> str:
    tags = (e.node, e.unit, e.sub)
    pairs = sorted(zip(_OWN_TAGS[e.scope], tags))
    return measurement + "".join(f",{k}={escape_key(v)}" for k, v in pairs)
