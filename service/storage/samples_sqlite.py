"""The embedded store's sample tables, written change-only (service.stages.sinks.SQLiteSink).

A 10,000-GPU round is 200,000 entity rows (180,000 of them NVLink links whose counters do not
move), so writing every row cost ~0.7 s a round. Here a row is written only when the entity's
values changed, when it missed a round of its node, or on a heartbeat (HEARTBEAT_S); every other
sample is implied, and the reader (service.storage.samples_read) rebuilds it exactly:

- `{scope}_rounds` has a row per node and sample time that arrived in order: the node's rounds.
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

All of a round's rows are one transaction of prepared statements (executemany).
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import CATALOG, Scope
from collectors.frames import EntityTable, Frame

HEARTBEAT_S = 600.0  # an unchanged entity is written again after this long
SAMPLED = (Scope.GPU, Scope.NVLINK, Scope.IB_PORT)

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def columns(scope: Scope) -> list[str]:
    return [m.name for m in CATALOG.columns(scope)]


def create_sql(scope: Scope) -> list[str]:
    """The tables of one scope, as a fresh file gets them (service.storage.schema version 3
    brings an older file to the same layout)."""
    vals = ", ".join(c + " REAL" for c in columns(scope))
    return [
        f"CREATE TABLE IF NOT EXISTS {scope}_samples (ts REAL NOT NULL, entity TEXT NOT NULL, "
        f"node TEXT NOT NULL, {vals}, since REAL, gone INTEGER NOT NULL DEFAULT 0)",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {scope}_samples_point ON {scope}_samples "
        "(entity, ts)",
        f"CREATE TABLE IF NOT EXISTS {scope}_rounds (node TEXT NOT NULL, ts REAL NOT NULL, "
        "complete INTEGER NOT NULL)",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {scope}_rounds_point ON {scope}_rounds (node, ts)",
        f"CREATE TABLE IF NOT EXISTS {scope}_late (ts REAL NOT NULL, entity TEXT NOT NULL, "
        f"node TEXT NOT NULL, {vals})",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {scope}_late_point ON {scope}_late (entity, ts)",
    ]


@dataclass(slots=True)
class Rows:
    """What one frame asks to write."""

    samples: list[tuple[object, ...]]
    late: list[tuple[object, ...]]
    rounds: list[tuple[str, float, int]]


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

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.ncol = len(columns(scope))
        self.slot: dict[str, int] = {}
        self.keys: list[str] = []
        self.node_of = np.zeros(0, np.int64)
        self.last_t = np.zeros(0)
        self.last_w = np.zeros(0)
        self.vals = np.zeros((0, self.ncol))
        self.gone = np.zeros(0, bool)  # True: no open fill (never seen, or closed by a marker)
        self.node: dict[str, int] = {}
        self.nodes: list[str] = []
        self.members: list[list[int]] = []
        self.cur = np.zeros(0)
        self.prev = np.zeros(0)
        self._tables: dict[int, tuple[EntityTable, I64]] = {}

    def slots(self, table: EntityTable) -> I64:
        """Slots of a table's rows; collectors reuse one immutable table, so once per table."""
        hit = self._tables.get(id(table))
        if hit is not None and hit[0] is table:
            return hit[1]
        out = np.empty(len(table), np.int64)
        for i, e in enumerate(table.entities):
            s = self.slot.get(e.key)
            if s is None:
                s = self._add(e.key, e.node)
            out[i] = s
        if len(self._tables) > 64:  # topologies change rarely; never let the cache grow
            self._tables.clear()
        self._tables[id(table)] = (table, out)
        return out

    def _add(self, key: str, node: str) -> int:
        n = self.node.get(node)
        if n is None:
            n = self.node[node] = len(self.nodes)
            self.nodes.append(node)
            self.members.append([])
            self.cur = _grow(self.cur, n + 1, -np.inf)
            self.prev = _grow(self.prev, n + 1, -np.inf)
        s = self.slot[key] = len(self.keys)
        self.keys.append(key)
        self.members[n].append(s)
        self.node_of = _grow(self.node_of, s + 1, 0)
        self.node_of[s] = n
        self.last_t = _grow(self.last_t, s + 1, -np.inf)
        self.last_w = _grow(self.last_w, s + 1, -np.inf)
        self.vals = _grow(self.vals, s + 1, np.nan)
        self.gone = _grow(self.gone, s + 1, True)
        return s

    def gather(self, nodes: I64) -> I64:
        if len(nodes) == 0:
            return np.zeros(0, np.int64)
        return np.fromiter((s for n in nodes.tolist() for s in self.members[n]), np.int64)

    # ---- one frame ---------------------------------------------------------------------------

    def plan(self, f: Frame) -> Rows:
        out = Rows([], [], [])
        slots = self.slots(f.entities)[f.rows]
        ts = np.asarray(f.ts, np.float64)
        times = np.unique(ts)
        for t in times.tolist():
            pick = np.arange(len(ts)) if len(times) == 1 else np.flatnonzero(ts == t)
            self._round(t, slots[pick], f.values[pick], out)
        return out

    def _round(self, t: float, s_in: I64, v_in: F64, out: Rows) -> None:
        s, first = np.unique(s_in, return_index=True)
        v = v_in[first]
        nd = self.node_of[s]
        un = np.unique(nd)
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
        obj = v[w].astype(object)
        obj[np.isnan(v[w])] = None
        keys, nodes, node_of = self.keys, self.nodes, self.node_of
        out.samples.extend((t, keys[i], nodes[node_of[i]], *row, since[j], 0)
                           for j, (i, row) in enumerate(zip(ws.tolist(), obj.tolist(),
                                                            strict=True)))
        self.close_missing(adv, out)
        inorder = un[~late_node]
        if len(inorder):
            m = self.gather(inorder)
            behind = m[~self.gone[m] & (self.last_t[m] < t)]
            bad = set(self.node_of[behind].tolist())
            out.rounds.extend((nodes[n], t, int(n not in bad)) for n in inorder.tolist())
        if len(first) < len(s_in):  # the same entity again at one time: merged as resent
            dup = np.ones(len(s_in), bool)
            dup[first] = False
            self._late(t, s_in[dup], v_in[dup], out)

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
        keys, nodes_, node_of, prev = self.keys, self.nodes, self.node_of, self.prev
        blank = (None,) * self.ncol
        out.samples.extend((float(prev[node_of[i]]), keys[i], nodes_[node_of[i]], *blank,
                            float(self.last_t[i]), 1) for i in miss.tolist())
        out.rounds.extend((nodes_[n], float(prev[n]), 1)
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
    sample = (f"INSERT INTO {scope}_samples VALUES ({','.join('?' * (len(cols) + 5))}) "
              f"ON CONFLICT (entity, ts) DO UPDATE SET {merge}, since = excluded.since, "
              "gone = excluded.gone")
    late = (f"INSERT INTO {scope}_late VALUES ({','.join('?' * (len(cols) + 3))}) "
            f"ON CONFLICT (entity, ts) DO UPDATE SET {merge}")
    rounds = (f"INSERT INTO {scope}_rounds VALUES (?,?,?) ON CONFLICT (node, ts) DO UPDATE "
              "SET complete = excluded.complete")
    return sample, late, rounds


def write_rows(db: sqlite3.Connection, scope: Scope, rows: Rows) -> None:
    sample, late, rounds = statements(scope)
    if rows.samples:
        db.executemany(sample, rows.samples)
    if rows.late:
        db.executemany(late, rows.late)
    if rows.rounds:
        db.executemany(rounds, rows.rounds)
