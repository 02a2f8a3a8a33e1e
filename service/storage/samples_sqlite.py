"""The embedded store's sample tables, written change-only (service.history.sinks.SQLiteSink).

A 10,000-GPU round is 200,000 entity rows (180,000 of them NVLink links whose counters do not
move), so writing every row cost ~0.7 s a round. Here a row is written only when the entity's
values changed, when it missed a round of its node, or on a heartbeat (HEARTBEAT_S); every other
sample is implied, and the reader (service.history.samples_read) rebuilds it exactly:

- `{scope}_rounds` has a row per node and sample time that arrived in order: the node's rounds
  (keyed by minute first, as the samples are: see `bucket`).
- A written `{scope}_samples` row stands for its own time and for every round of its node up to
  the next row's `since` (the entity's previous sample time, written with each row), so a gap
  (the entity absent while its node reported) ends the fill exactly where it began.
- A row with `gone = 1` carries no values: the entity was absent from a finished round of its
  node (swapped or fallen off the bus); it ends the fill of the row before it.
- The newest row of an entity fills the node's rounds marked `complete` (every open entity of
  the node had its sample then), for less than HEARTBEAT_S.
- A sample at or before the entity's newest one (a resent or late round) goes to
  `{scope}_late`, merged into what is stored at that time as before (each value it carries
  replaces the stored one; InfluxDB's last write wins).

A `{scope}_samples` row is (entity id, time, since, gone, vals): the entity's key and node are
written once, in `{scope}_entities`, and its values are one BLOB (service.storage.sample_codec;
the columns are `{scope}_layout`'s), so a row binds five parameters and a round's rows are
packed by numpy at once. Late rows are rare and stay a column per metric.

All of a round's rows are one transaction of prepared statements (executemany).
"""

from __future__ import annotations

import itertools
import math
import sqlite3
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from collectors.catalog import CATALOG, Scope
from collectors.frames import EntityTable, Frame, JoinedTable
from collectors.table_cache import TableCache
from service.storage import sample_codec

HEARTBEAT_S = 600.0  # an unchanged entity is written again after this long
BUCKET_S = 60  # a sample row's index key begins with its minute (see `bucket`)
# Every measured scope: a node's chassis (supplies, fans) and its own sensors too.
SAMPLED = (Scope.GPU, Scope.NVLINK, Scope.IB_PORT, Scope.PSU, Scope.FAN, Scope.NODE)

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def bucket(ts: float) -> int:
    """The minute a row's index key begins with. Keyed (entity, time), each round's rows land
    on one index page per entity once every entity has a page of its own (after ~150 rounds),
    and every commit writes them all: 20 us a row instead of 2.6 at 10,000 GPUs. Keyed
    (minute, entity, time), a round's rows land among the current minute's few pages; a reader
    asks for an entity's rows minute by minute (service.history.samples_read)."""
    return math.floor(ts / BUCKET_S)


def columns(scope: Scope) -> list[str]:
    return [m.name for m in CATALOG.columns(scope)]


def create_sql(scope: Scope) -> list[str]:
    """The tables of one scope, as a fresh file gets them (service.storage.schema version 3
    brings an older file to the same layout)."""
    vals = ", ".join(c + " REAL" for c in columns(scope))
    return [
        f"CREATE TABLE IF NOT EXISTS {scope}_layout (pos INTEGER PRIMARY KEY, "
        "name TEXT NOT NULL UNIQUE)",
        f"CREATE TABLE IF NOT EXISTS {scope}_entities (id INTEGER PRIMARY KEY, "
        "entity TEXT NOT NULL UNIQUE, node TEXT NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS {scope}_samples (bucket INTEGER NOT NULL, "
        "id INTEGER NOT NULL, ts REAL NOT NULL, since REAL, gone INTEGER NOT NULL DEFAULT 0, "
        "vals BLOB)",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {scope}_samples_point ON {scope}_samples "
        "(bucket, id, ts)",
        f"CREATE TABLE IF NOT EXISTS {scope}_rounds (bucket INTEGER NOT NULL, "
        "node TEXT NOT NULL, ts REAL NOT NULL, "
        "complete INTEGER NOT NULL)",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {scope}_rounds_point ON {scope}_rounds "
        "(bucket, node, ts)",
        f"CREATE TABLE IF NOT EXISTS {scope}_late (ts REAL NOT NULL, entity TEXT NOT NULL, "
        f"node TEXT NOT NULL, {vals})",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {scope}_late_point ON {scope}_late (entity, ts)",
    ]


def layout(db: sqlite3.Connection, scope: Scope) -> list[str]:
    """The scope's blob columns in position order, the catalog's new metrics appended (a
    position, once given, never changes: blobs written before stay readable)."""
    have = [r[0] for r in db.execute(f"SELECT name FROM {scope}_layout ORDER BY pos")]
    new = [c for c in columns(scope) if c not in set(have)]
    if len(have) + len(new) > sample_codec.MAX_COLUMNS:
        raise ValueError(f"{scope}: more than {sample_codec.MAX_COLUMNS} sample columns")
    db.executemany(f"INSERT INTO {scope}_layout VALUES (?, ?)",
                   [(len(have) + k, c) for k, c in enumerate(new)])
    return have + new


def register(db: sqlite3.Connection) -> None:
    """The SQL function the sample upsert merges a resent row with (sample_codec.merge)."""
    db.create_function("gh_merge", 2, sample_codec.merge, deterministic=True)


@dataclass(slots=True)
class Rows:
    """What one frame asks to write."""

    samples: list[tuple[object, ...]]
    late: list[tuple[object, ...]]
    rounds: list[tuple[int, str, float, int]]
    entities: list[tuple[int, str, str]] = field(default_factory=list)


def _grow(a: np.ndarray, n: int, fill: object) -> np.ndarray:
    if len(a) >= n:
        return a
    shape = (max(n, 2 * len(a)), *a.shape[1:])
    out = np.full(shape, fill, a.dtype)
    out[:len(a)] = a
    return out


class ScopeState:
    """What the writer remembers of one scope: per entity (slot) its newest sample time, the
    values of its newest written row, when that was written and whether its fill is closed;
    per node its newest two in-order rounds."""

    def __init__(self, scope: Scope, db: sqlite3.Connection) -> None:
        self.scope = scope
        self.ncol = len(columns(scope))
        stored = layout(db, scope)
        self.width = len(stored)
        self.pos = np.array([stored.index(c) for c in columns(scope)], np.int64)
        self.same_layout = self.width == self.ncol and bool(
            (self.pos == np.arange(self.ncol)).all())
        self.known: dict[str, int] = dict(db.execute(f"SELECT entity, id FROM {scope}_entities"))
        self.next_id = max(self.known.values(), default=0) + 1
        self.unsaved: list[tuple[int, str, str]] = []  # entity rows not yet committed
        self.dbid = np.zeros(0, np.int64)
        self.slot: dict[str, int] = {}
        self.keys: list[str] = []
        self.node_of = np.zeros(0, np.int64)
        self.last_t = np.zeros(0)
        self.last_w = np.zeros(0)
        self.vals = np.zeros((0, self.ncol))
        self.gone = np.zeros(0, bool)  # True: no open fill (never seen, or closed by a marker)
        self.node: dict[str, int] = {}
        self.nodes: list[str] = []
        self.cur = np.zeros(0)
        self.prev = np.zeros(0)
        # Topologies change rarely: a few tables, held only while their makers hold them.
        self._tables: TableCache[I64] = TableCache(64)

    def slots(self, table: EntityTable) -> I64:
        """Slots of a table's rows; collectors reuse one immutable table, so once per table."""
        hit = self._tables.get(table)
        if hit is not None:
            return hit
        if isinstance(table, JoinedTable):  # a coalesced ingest's, met once: its parts' slots
            return np.concatenate([self.slots(t) for t in table.parts])
        out = np.empty(len(table), np.int64)
        for i, e in enumerate(table.entities):
            s = self.slot.get(e.key)
            if s is None:
                s = self._add(e.key, e.node)
            out[i] = s
        self._tables.put(table, out)
        return out

    def _add(self, key: str, node: str) -> int:
        n = self.node.get(node)
        if n is None:
            n = self.node[node] = len(self.nodes)
            self.nodes.append(node)
            self.cur = _grow(self.cur, n + 1, -np.inf)
            self.prev = _grow(self.prev, n + 1, -np.inf)
        s = self.slot[key] = len(self.keys)
        self.keys.append(key)
        self.node_of = _grow(self.node_of, s + 1, 0)
        self.node_of[s] = n
        eid = self.known.get(key)
        if eid is None:
            eid = self.known[key] = self.next_id
            self.next_id += 1
            self.unsaved.append((eid, key, node))
        self.dbid = _grow(self.dbid, s + 1, 0)
        self.dbid[s] = eid
        self.last_t = _grow(self.last_t, s + 1, -np.inf)
        self.last_w = _grow(self.last_w, s + 1, -np.inf)
        self.vals = _grow(self.vals, s + 1, np.nan)
        self.gone = _grow(self.gone, s + 1, True)
        return s

    def gather(self, nodes: I64) -> I64:
        """Slots of every entity of `nodes` (a mask over all slots: no Python per entity)."""
        sel = np.zeros(len(self.nodes), bool)
        sel[nodes] = True
        return np.flatnonzero(sel[self.node_of[:len(self.keys)]])

    # ---- one frame ---------------------------------------------------------------------------

    def plan(self, f: Frame) -> Rows:
        out = Rows([], [], [], self.unsaved)
        slots = self.slots(f.entities)[f.rows]
        ts = np.asarray(f.ts, np.float64)
        if len(ts) and ts.min() == ts.max():  # the common case: one round, no sort
            self._round(float(ts[0]), slots, np.asarray(f.values, np.float64), out)
            return out
        times = np.unique(ts)
        for t in times.tolist():
            pick = np.arange(len(ts)) if len(times) == 1 else np.flatnonzero(ts == t)
            self._round(t, slots[pick], f.values[pick], out)
        return out

    def _round(self, t: float, s_in: I64, v_in: F64, out: Rows) -> None:
        first: I64 | None = None
        if len(s_in) and np.bincount(s_in).max() <= 1:  # each entity once: no sort, no copy
            s, v = s_in, v_in
        else:
            s, first = np.unique(s_in, return_index=True)
            v = v_in[first]
        nd = self.node_of[s]
        un = self._unique_nodes(nd)
        cur = self.cur[un]
        late_node = t < cur
        adv = un[t > cur]
        self.prev[adv] = self.cur[adv]
        self.cur[adv] = t
        # A sample at or before the entity's newest, or of a round its node has left behind.
        late = (t <= self.last_t[s]) | (t < self.cur[nd])
        if late.any():
            self._late(t, s[late], v[late], out)
            keep = ~late
            s, v, nd = s[keep], v[keep], nd[keep]
        lt = self.last_t[s]
        old = self.vals[s]
        same = ((old.view(np.int64) == v.view(np.int64)) | (np.isnan(old) & np.isnan(v))).all(1)
        cont = ~self.gone[s] & (lt == self.prev[nd])
        write = ~cont | ~same | (t - self.last_w[s] >= HEARTBEAT_S)
        w = np.flatnonzero(write)
        ws = s[w]
        self.vals[ws], self.last_w[ws] = v[w], t
        self.gone[ws] = False
        self.last_t[s] = t
        since = [None if math.isinf(x) else x for x in lt[w].tolist()]
        out.samples.extend(zip(itertools.repeat(bucket(t)), self.dbid[ws].tolist(),
                               itertools.repeat(t), since,
                               itertools.repeat(0), self._blobs(v[w])))
        nodes = self.nodes
        self.close_missing(adv, out)
        inorder = un[~late_node]
        if len(inorder):
            m = self.gather(inorder)
            behind = m[~self.gone[m] & (self.last_t[m] < t)]
            bad = set(self.node_of[behind].tolist())
            b = bucket(t)
            out.rounds.extend((b, nodes[n], t, int(n not in bad)) for n in inorder.tolist())
        if first is not None and len(first) < len(s_in):  # again at one time: merged as resent
            dup = np.ones(len(s_in), bool)
            dup[first] = False
            self._late(t, s_in[dup], v_in[dup], out)

    def _unique_nodes(self, nd: I64) -> I64:
        sel = np.zeros(len(self.nodes), bool)
        sel[nd] = True
        return np.flatnonzero(sel)

    def _blobs(self, v: F64) -> list[bytes]:
        if not self.same_layout:  # the stored column order differs from the catalog's
            wide = np.full((len(v), self.width), np.nan)
            wide[:, self.pos] = v
            v = wide
        return sample_codec.encode(v)

    def _late(self, t: float, s: I64, v: F64, out: Rows) -> None:
        obj = v.astype(object)
        obj[np.isnan(v)] = None
        keys, nodes, node_of = self.keys, self.nodes, self.node_of
        out.late.extend((t, keys[i], nodes[node_of[i]], *row)
                        for i, row in zip(s.tolist(), obj.tolist(), strict=True))

    def close_missing(self, nodes: I64, out: Rows) -> None:
        """Entities of `nodes` that missed the node's finished round `prev`: a marker at that
        round ends their fill, and the round is complete again for the ones that stay."""
        if len(nodes) == 0:
            return
        m = self.gather(nodes)
        upto = self.prev[self.node_of[m]]
        miss = m[~self.gone[m] & (self.last_t[m] < upto)]
        if len(miss) == 0:
            return
        self.gone[miss] = True
        nodes_, node_of, prev, dbid = self.nodes, self.node_of, self.prev, self.dbid
        out.samples.extend((bucket(float(prev[node_of[i]])), int(dbid[i]),
                            float(prev[node_of[i]]), float(self.last_t[i]), 1, None)
                           for i in miss.tolist())
        out.rounds.extend((bucket(float(prev[n])), nodes_[n], float(prev[n]), 1)
                          for n in np.unique(node_of[miss]).tolist())

    def close_all(self, out: Rows) -> None:
        """At shutdown: entities missing from their node's newest round are closed as if the
        node had moved on, so a restarted writer never leaves them filled."""
        if not self.nodes:
            return
        self.prev[:len(self.nodes)] = self.cur[:len(self.nodes)]
        self.close_missing(np.arange(len(self.nodes), dtype=np.int64), out)


def statements(scope: Scope) -> tuple[str, str, str]:
    """Prepared upserts: samples, late samples, rounds."""
    cols = columns(scope)
    merge = ", ".join(f"{c} = coalesce(excluded.{c}, {c})" for c in cols)
    sample = (f"INSERT INTO {scope}_samples VALUES (?,?,?,?,?,?) ON CONFLICT (bucket, id, ts) "
              "DO UPDATE "
              "SET vals = gh_merge(excluded.vals, vals), since = excluded.since, "
              "gone = excluded.gone")
    late = (f"INSERT INTO {scope}_late VALUES ({','.join('?' * (len(cols) + 3))}) "
            f"ON CONFLICT (entity, ts) DO UPDATE SET {merge}")
    rounds = (f"INSERT INTO {scope}_rounds VALUES (?,?,?,?) ON CONFLICT (bucket, node, ts) "
              "DO UPDATE "
              "SET complete = excluded.complete")
    return sample, late, rounds


def write_rows(db: sqlite3.Connection, scope: Scope, rows: Rows) -> None:
    """Inside the caller's transaction (service.history.sinks.SQLiteSink.write)."""
    sample, late, rounds = statements(scope)
    if rows.entities:
        db.executemany(f"INSERT OR IGNORE INTO {scope}_entities VALUES (?,?,?)", rows.entities)
    if rows.samples:
        db.executemany(sample, rows.samples)
    if rows.late:
        db.executemany(late, rows.late)
    if rows.rounds:
        db.executemany(rounds, rows.rounds)
