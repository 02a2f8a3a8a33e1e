"""The hour tier in InfluxDB: every finished hour bucket the predictor's features read, written
once per hour per entity, and read back as whole-span tables for fast retraining.

Writing (`HourWriter`): after an ingest, each hour the window store has newly finished is read
from the store's hourly tier (or its raw ring, at a 1-hour step) for exactly the inputs the
features read (models.predictor.features.INPUTS), the GPUs' NVLink links already reduced to
their per-GPU columns (LINK_COLUMNS), and written as `gpu_1h` and `ib_port_1h` points at the
hour's start into the `rollup_1h` retention policy (kept as long as the 5-minute rollups). A
new writer starts with the first hour that finishes after it (the hours before were stored by
the instance that saw them); an hour written again lands on the same point and overwrites it.

Reading (`read_tables`, `iter_tables`): the span's points, 6 hours per query (CSV, parsed by
pyarrow), into models.predictor.hour_table
tables; `gpuhealth train --from-influx` builds the span's features from them at once instead of
replaying the raw 5-s series (docs/learning.md).
"""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from collectors.catalog import FieldType, Scope
from collectors.frames import Entity
from collectors.lineprotocol_format import escape_key, format_number
from collectors.schema import ENTITY_TAGS
from models.detectors.view import FleetView
from models.predictor.features import INPUTS, HourlyUnavailable, hours_of, link_hours
from models.predictor.hour_table import HourTable, columns
from service.history.influx.client import InfluxClient, InfluxError
from service.history.influx.influxql import ident, string, time_ns
from service.history.influx.lines import entity_tags, head, ns
from service.history.influx.schema import HOUR_RP

log = logging.getLogger(__name__)

HOUR = 3600.0
DAY = 86400.0
SUFFIX = "_1h"
SCOPES = (Scope.GPU, Scope.IB_PORT)
F32 = npt.NDArray[np.float32]


def measurement(scope: Scope) -> str:
    return scope.value + SUFFIX


class HourWriter:
    """Line protocol for the hours a store finished since the last call."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self._last: dict[Scope, int] = {}
        self._heads: dict[tuple[Scope, Entity], str] = {}

    def _head(self, scope: Scope, e: Entity) -> str:
        h = self._heads.get((scope, e))
        if h is None:
            if len(self._heads) > 500_000:  # a churning fleet must not grow this forever
                self._heads.clear()
            h = self._heads[(scope, e)] = head(measurement(scope),
                                                {"cluster": self.cluster, **entity_tags(e)})
        return h

    def lines(self, fleet: FleetView) -> list[str]:
        out: list[str] = []
        for scope in SCOPES:
            try:
                view = fleet.scope(scope)
                hrs = hours_of(view)
            except (KeyError, HourlyUnavailable):
                continue
            last = self._last.get(scope)
            if last is None or hrs.last < 0:
                # The first call writes nothing: the hours finished before it were stored by
                # the instance that saw them (a restarted store holds them emptier, or not).
                self._last[scope] = hrs.last
                continue
            if hrs.last <= last:
                continue
            new = min(hrs.last - last, hrs.length)
            cols = [view.window(m, new, tier=hrs.tier, stat=s) for m, s in INPUTS[scope]]
            if scope is Scope.GPU:
                cols += link_hours(fleet, len(view), new)
            self._last[scope] = hrs.last
            if not len(view):
                continue
            out += self._format(scope, view.entities, np.stack(cols), hrs.last - new + 1)
        return out

    def _format(self, scope: Scope, ents: Iterable[Entity], data: F32, first: int) -> list[str]:
        names = [escape_key(c) + "=" for c in columns(scope)]
        # An entity hour with nothing reported is not stored: a store that has just started
        # (no warm start) finishes the hour before it empty, and its point would overwrite
        # the one the previous instance stored. hour_table reads such an hour as missing.
        said: npt.NDArray[np.bool_] = np.asarray(~np.isnan(data[: len(INPUTS[scope])]).all(axis=0))
        if scope is Scope.GPU:
            said |= data[-1] == 0.0  # some link reported
        out = []
        for i, e in enumerate(ents):
            rows = data[:, i, :].T.tolist()  # [hour][column]
            for j, row in enumerate(rows):
                if not said[i, j]:
                    continue
                body = ",".join(names[k] + t for k, v in enumerate(row)
                                if (t := format_number(FieldType.FLOAT, v)) is not None)
                if body:
                    out.append(f"{self._head(scope, e)} {body} {ns((first + j) * HOUR)}")
        return out


@dataclass(slots=True)
class HourRead:
    """What read_tables found: a table per scope with any hours, and the rows it refused."""

    tables: dict[Scope, HourTable] = field(default_factory=dict)
    rows: int = 0
    refused: int = 0  # rows naming no valid entity (a bad tag in storage)


Progress = Callable[[float, float], None]  # hours read so far, of how many
Part = tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], F32]  # slots, absolute hours, data


def read_tables(client: InfluxClient, cluster: str, start: float, end: float, *,
                chunk_s: float = 6 * HOUR, progress: Progress | None = None) -> HourRead:
    """The cluster's stored hours in [start, end) (start and end rounded out to whole hours),
    as one table per scope over one span, the hours that hold data (a 90-day range over 10
    days of data is 10 days); an entity's hours it has no point for are NaN."""
    out = HourRead()
    out.tables = dict(iter_tables(client, cluster, start, end, out, chunk_s=chunk_s,
                                  progress=progress))
    # One span for every scope, so that their tables' hours line up (they differ only where
    # one scope's first or last hours are missing: a copy then, not otherwise).
    if out.tables:
        lo = min(t.first_hour for t in out.tables.values())
        hi = max(t.first_hour + t.hours for t in out.tables.values())
        out.tables = {sc: t.spanning(lo, hi) for sc, t in out.tables.items()}
    return out


def iter_tables(client: InfluxClient, cluster: str, start: float, end: float, out: HourRead,
                *, chunk_s: float = 6 * HOUR, progress: Progress | None = None
                ) -> Iterator[tuple[Scope, HourTable]]:
    """One scope's table at a time, each spanning its own hours that hold data, `chunk_s` per
    query (an empty chunk costs InfluxDB next to nothing); `out` counts the rows read and
    refused. A caller that is done with a table before asking for the next holds one."""
    h0 = math.floor(start / HOUR)
    h1 = math.ceil(end / HOUR)
    total = float(len(SCOPES) * (h1 - h0))
    for n, scope in enumerate(SCOPES):
        def step(h: float, before: float = n * (h1 - h0)) -> None:
            if progress is not None:
                progress(before + h, total)

        got = _read_scope(client, cluster, scope, h0, h1, chunk_s, out, step)
        if got is not None:
            yield scope, got
        got = None  # not held while the next scope is read


def _read_scope(client: InfluxClient, cluster: str, scope: Scope, h0: int, h1: int,
                chunk_s: float, out: HourRead, progress: Callable[[float], None]
                ) -> HourTable | None:
    want = columns(scope)
    tag_names = ENTITY_TAGS[scope]
    src = _source(client, scope)
    if src is None:
        return None
    ents: dict[tuple[str, ...], int] = {}
    parts: list[Part] = []
    step = max(1, int(chunk_s // HOUR))
    for a in range(h0, h1, step):
        b = min(h1, a + step)
        sql = (f"SELECT * FROM {src} WHERE {ident('cluster')} = {string(cluster)} AND "
               f"time >= {time_ns(a * HOUR)} AND time < {time_ns(b * HOUR)}")
        body = client.query_csv(sql)
        if not body.strip():
            client.query(sql, epoch="s")  # an error the CSV answer hides raises here
        else:
            part = _part(body, want, tag_names, ents)
            if part is not None:
                parts.append(part)
                out.rows += len(part[0])
        progress(float(b - h0))
    if not parts or not ents:
        return None
    lo = min(int(hr.min()) for _, hr, _ in parts if len(hr))
    hi = max(int(hr.max()) for _, hr, _ in parts if len(hr)) + 1
    return _assemble(scope, ents, parts, lo, hi - lo, out)


def _source(client: InfluxClient, scope: Scope) -> str | None:
    """Where the scope's hour tier is: our policy, else (a schema not managed here sends it
    where the samples go) the default one; None without the database."""
    try:
        (found,) = client.query("SHOW RETENTION POLICIES", epoch="s")
    except InfluxError as exc:
        if "database not found" in str(exc):
            return None
        raise
    names = {str(r[0]) for se in found for r in se.values}
    if HOUR_RP in names:
        return f"{ident(HOUR_RP)}.{ident(measurement(scope))}"
    return ident(measurement(scope))


def _part(body: bytes, want: tuple[str, ...], tag_names: tuple[str, ...],
          ents: dict[tuple[str, ...], int]) -> Part | None:
    """One answer's rows: entity slots (new entities added to `ents`), hours, values."""
    import pyarrow as pa
    from pyarrow import csv as pacsv

    opts = pacsv.ConvertOptions(column_types={**{t: pa.string() for t in tag_names},
                                              "time": pa.int64()},
                                strings_can_be_null=True)
    t = pacsv.read_csv(io.BytesIO(body), convert_options=opts)
    if t.num_rows == 0 or tag_names[0] not in t.column_names:
        return None
    tags = [t.column(n).to_pylist() if n in t.column_names else [None] * t.num_rows
            for n in tag_names]
    keys = zip(*((v or "" for v in col) for col in tags), strict=True)
    slot = np.fromiter((ents.setdefault(k, len(ents)) for k in keys), np.int32, t.num_rows)
    hour = (t.column("time").to_numpy() // int(HOUR)).astype(np.int32)
    data = np.full((len(want), t.num_rows), np.nan, np.float32)
    for k, c in enumerate(want):
        if c in t.column_names:
            col = t.column(c)
            data[k] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64) \
                if col.null_count < len(col) else np.nan
    return slot, hour, data


def _assemble(scope: Scope, ents: dict[tuple[str, ...], int], parts: list[Part], h0: int,
              hours: int, out: HourRead) -> HourTable | None:
    made: list[tuple[str, Entity, int]] = []
    for names, i in ents.items():
        try:
            e = Entity(scope, *names)
        except ValueError as exc:
            log.warning("hour tier: skipped rows of a stored %s entity %r: %s", scope, names, exc)
            continue
        made.append((e.key, e, i))
    made.sort(key=lambda t: t[0])
    if not made:
        return None
    order = np.full(len(ents), -1, np.int64)
    order[[i for _, _, i in made]] = np.arange(len(made))
    table = np.full((len(columns(scope)), len(made), hours), np.nan, np.float32)
    while parts:  # each part freed once placed
        slot, absolute, data = parts.pop()
        col = order[slot]
        hour = absolute - h0
        ok = (col >= 0) & (hour >= 0) & (hour < hours)
        out.refused += int((col < 0).sum())
        table[:, col[ok], hour[ok]] = data[:, ok]
    return HourTable(scope, [e for _, e, _ in made], h0, table)
