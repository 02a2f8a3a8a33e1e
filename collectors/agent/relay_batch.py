"""Many node agents' accepted pushes as one body for the service (collectors.agent.relay).

Pushes are joined into one Batch per forwarded body, as few bodies as keep each entity's pushes
in arrival order: a push that names an entity of an earlier body (the same node twice: a
resend, or two rounds held while the service was away) goes in a later one, so every body
holds at most one push per node, as the service's coalescer (service.api.coalesce) joins
requests, and bodies are sent in order. Each push's samples are kept as they
came: entity, timestamp and every value, only re-indexed into the joined entity table. The
GPU identities pushes carry (collectors.identity) are joined field by field, newer on top
(by the sender's round time, so a late resend does not undo a newer identity): they order
nothing and are few (an agent sends a GPU's every few minutes).
"""

from __future__ import annotations

import gzip
from collections.abc import Collection, Iterable, Sequence
from dataclasses import field

import numpy as np

from collectors import identity
from collectors.agent.relay_roster import Roster
from collectors.collector_status import CollectorReport, status_line
from collectors.compat import dataclass, zip_strict
from collectors.frames import Batch, Entity, EntityTable, EventFrame, Frame
from collectors.schema import batch_to_lines

GZIP_LEVEL = 6


@dataclass(slots=True)
class Push:
    """One agent's accepted samples and collector reports."""

    batch: Batch
    reports: list[CollectorReport] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """Rows as the service's decoder counts them (identities are rows of theirs)."""
        b = self.batch
        return sum(len(f) for f in b.frames.values()) + len(b.events) + len(b.identity)

    def keys(self) -> set[str]:
        out = {f.entities[i].key for f in self.batch.frames.values()
               for i in np.unique(f.rows).tolist()}
        out.update(self.batch.events.keys)
        out.update(f"collector:{r.host}:{r.collector}" for r in self.reports)
        return out


def bodies(pushes: Iterable[Push], max_rows: int, roster: Roster | None = None
           ) -> list[Push]:
    """The pushes joined into as few bodies as keep each entity's pushes in arrival order: a
    push goes to the first body after the last one naming any of its entities (a node's
    next round, held with its first while the service was away or the relay fell behind,
    goes in the next body, not a new body for every push after it), with room for its rows
    (`max_rows`; a single push larger than that is a body of its own). With `roster`, every
    body's frames are on the roster's tables (see join)."""
    groups: list[list[Push]] = []
    sizes: list[int] = []
    last: dict[str, int] = {}  # entity key -> the body that names it last
    for p in pushes:
        keys = p.keys()
        b = 1 + max((last.get(k, -1) for k in keys), default=-1)
        while b < len(groups) and sizes[b] + p.rows > max_rows:
            b += 1
        if b == len(groups):
            groups.append([])
            sizes.append(0)
        groups[b].append(p)
        sizes[b] += p.rows
        for k in keys:
            last[k] = b
    return [join(g, roster) for g in groups]


def join(pushes: Sequence[Push], roster: Roster | None = None) -> Push:
    """One Push of several whose entities are distinct; with `roster`, each scope's frame is
    on the roster's table for it (the same table for every body: what the service caches),
    its rows the pushes' rows in order."""
    if roster is not None:
        return _on_roster(pushes, roster)
    if len(pushes) == 1:
        return pushes[0]
    out = Batch()
    scopes = list(dict.fromkeys(s for p in pushes for s in p.batch.frames))
    for scope in scopes:
        ents: list[Entity] = []
        rows, ts, values = [], [], []
        for p in pushes:
            f = p.batch.frames.get(scope)
            if f is None or not len(f):
                continue
            used, inv = np.unique(f.rows, return_inverse=True)
            rows.append(inv.astype(np.int32) + np.int32(len(ents)))
            ents += [f.entities[i] for i in used.tolist()]
            ts.append(f.ts)
            values.append(f.values)
        if rows:
            out.add(Frame(EntityTable(scope, ents), np.concatenate(rows),
                          np.concatenate(ts), np.concatenate(values)))
    return _with_events(out, pushes)


def _on_roster(pushes: Sequence[Push], roster: Roster) -> Push:
    out = Batch()
    scopes = list(dict.fromkeys(s for p in pushes for s in p.batch.frames))
    for scope in scopes:
        rows, ts, values = [], [], []
        for p in pushes:
            f = p.batch.frames.get(scope)
            if f is None or not len(f):
                continue
            rows.append(roster.rows(scope, f.entities, f.rows))
            ts.append(f.ts)
            values.append(f.values)
        if rows:
            table, joined = roster.table(scope, np.concatenate(rows).astype(np.int32,
                                                                            copy=False))
            out.add(Frame(table, joined, np.concatenate(ts), np.concatenate(values)))
    return _with_events(out, pushes)


def _with_events(out: Batch, pushes: Sequence[Push]) -> Push:
    """`out` with the pushes' events, identities and reports."""
    events = EventFrame()
    for p in pushes:
        events.extend(p.batch.events)
        identity.merge_into(out.identity, p.batch.identity)
    out.events = events
    return Push(out, [r for p in pushes for r in p.reports])


def only_nodes(push: Push, nodes: Collection[str]) -> Push:
    """The samples, events and identities of `nodes` only (what a service that kept the rest
    still lacks); each frame keeps its table, so the service meets a table it knows. Collector
    reports are left out: the service recorded them with the first send."""
    keep = set(nodes)
    out = Batch()
    for f in push.batch.frames.values():
        named = np.fromiter((e.node in keep for e in f.entities.entities), bool,
                            len(f.entities))
        rows = named[f.rows] if len(f.rows) else np.zeros(0, bool)
        if rows.any():
            out.add(Frame(f.entities, f.rows[rows], f.ts[rows], f.values[rows]))
    ev, events = push.batch.events, EventFrame()
    for key, ts, metric, value in zip_strict(ev.keys, ev.ts, ev.metrics, ev.values):
        if key.split(":", 1)[0] in keep:
            events.add(key, ts, metric, value)
    out.events = events
    out.identity = {k: v for k, v in push.batch.identity.items()
                    if k.split(":", 1)[0] in keep}
    return Push(out, [])


def arrow_body(push: Push, level: int = GZIP_LEVEL) -> bytes:
    """gzip Arrow IPC, each frame's entity table written whole (a relay's roster table: the
    service meets the same dictionary body after body)."""
    from collectors.arrow_batch import encode

    return gzip.compress(encode(push.batch, push.reports, whole=True), compresslevel=level,
                         mtime=0)


def read_arrow(body: bytes) -> Push:
    """A spooled body back (gzip Arrow, as arrow_body wrote it)."""
    from collectors.arrow_batch import Decoder

    got = Decoder().decode(gzip.decompress(body))
    return Push(got.batch, got.reports)


def lines_body(push: Push) -> bytes:
    """gzip line protocol of the same samples and reports, for a target that reads no Arrow."""
    lines = list(batch_to_lines(push.batch))
    lines += [status_line(r.host, r.collector, r.up, r.scrape_seconds, r.samples,
                          r.error or "down, no reason given", round(r.ts * 1e6) * 1000)
              for r in push.reports]
    text = "".join(ln + "\n" for ln in lines)
    return gzip.compress(text.encode(), compresslevel=GZIP_LEVEL, mtime=0)
