"""A write body split by the shard that owns each of its nodes (service.cluster.shard_map).

Line protocol is split line by line on the node's tag, as the schema mapper reads it
(`ingest.node_name_from`, by default `host` then `Hostname`, an exporter's pod name never:
collectors.node_names),
and each part keeps its lines as they came: their timestamps in the request's precision,
their order, their text; so a part is answered by its owner exactly as the whole would be
for those lines. A line without a valid node name stays with this shard, whose parser
refuses it by line number as always.

An Arrow body (our agent's, collectors.arrow_batch) is decoded and its frames, events, GPU
identities and collector reports are split by node, each part encoded as Arrow again (format
3, the one format: the shards of one service run one version). An identity value the decode
refused goes to its node's owner as it came, which refuses it again and names it in its
answer.

Foreign parts come back gzip-compressed, ready to forward; this shard's part is left plain.
"""

from __future__ import annotations

import gzip
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from collectors.collector_status import CollectorReport
from collectors.frames import Batch, Entity
from collectors.node_names import DEFAULT_ORDER, pick

# The key of a line (measurement and tags): everything up to its first unescaped space.
_HEAD = re.compile(rb"(?:[^ \\\n]|\\.)*")
# A tag in a key: the value ends at the next ',' or the key's end; a valid host name holds no
# escapes, so a value with a backslash is never a node this map can place.
_TAG = re.compile(rb"(?<!\\),([^=,\\]+)=([^,\\]*)(?=,|$)")
GZIP_LEVEL = 1  # forwarded parts: fast, the loopback or LAN hop is short


@dataclass(slots=True)
class Parts:
    """Per shard id, its part: this shard's plain, the others' gzip-compressed."""

    local: bytes | None = None
    foreign: dict[str, bytes] = field(default_factory=dict)
    nodes: dict[str, set[str]] = field(default_factory=dict)  # shard id -> the nodes named


class Owners:
    """Host -> owning shard id (the local id for a name no shard can own), remembered."""

    def __init__(self, owner: Callable[[str], str], local: str) -> None:
        self._owner, self.local = owner, local
        self._seen: dict[str, str] = {}

    def __call__(self, host: str) -> str:
        got = self._seen.get(host)
        if got is None:
            try:
                got = self._owner(host)
            except ValueError:  # not a host name ingest takes: refused here, by line
                got = self.local
            self._seen[host] = got
        return got


def line_node(line: bytes, order: tuple[str, ...] = DEFAULT_ORDER) -> str | None:
    """The node a line-protocol line names by the labels of `order`, or None (a comment, a
    blank line, no node tag, only an exporter's pod name)."""
    head = _HEAD.match(line)
    if head is None or not head.group() or line.startswith(b"#"):
        return None
    try:
        tags = {m.group(1).decode(): m.group(2).decode() for m in _TAG.finditer(head.group())}
    except UnicodeDecodeError:
        return None
    return pick(tags, order)[0]


def split_lines(data: bytes, owners: Owners, order: tuple[str, ...] = DEFAULT_ORDER) -> Parts:
    """Line protocol by owner (the node named by the labels of `order`); a line naming no node
    stays local."""
    by: dict[str, list[bytes]] = {}
    parts = Parts()
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        node = line_node(line, order)
        sid = owners.local if node is None else owners(node)
        by.setdefault(sid, []).append(line)
        if node is not None:
            parts.nodes.setdefault(sid, set()).add(node)
    for sid, lines in by.items():
        body = b"\n".join(lines) + b"\n"
        if sid == owners.local:
            parts.local = body
        else:
            parts.foreign[sid] = gzip.compress(body, GZIP_LEVEL, mtime=0)
    return parts


class ArrowSplitter:
    """Arrow bodies by owner, through one decoder (it keeps entity tables between calls)."""

    def __init__(self, max_rows: int) -> None:
        self._lock = threading.Lock()
        self._max_rows = max_rows
        self._decoder: object | None = None

    def split(self, data: bytes, owners: Owners) -> Parts:
        """ValueError (collectors.arrow_batch.ArrowPayloadError) for a malformed body."""
        from collectors.arrow_batch import Decoder, Limits, encode

        with self._lock:  # the decoder is safe from many threads: made under it, used out
            if self._decoder is None:
                self._decoder = Decoder(Limits(max_rows=self._max_rows))
            assert isinstance(self._decoder, Decoder)
        decoded = self._decoder.decode(data)
        batches: dict[str, Batch] = {}
        reports: dict[str, list[CollectorReport]] = {}
        parts = Parts()

        def part(sid: str) -> Batch:
            return batches.setdefault(sid, Batch())

        for frame in decoded.batch.frames.values():
            if not len(frame):
                continue
            table = frame.entities
            node_owner = np.array([owners(table[i].node) for i in range(len(table))], object)
            by_row = node_owner[frame.rows]
            for sid in dict.fromkeys(by_row.tolist()):
                part(sid).add(frame.take(by_row == sid))
                parts.nodes.setdefault(sid, set()).update(
                    table[i].node for i in np.unique(frame.rows[by_row == sid]).tolist())
        ev = decoded.batch.events
        for key, ts, metric, value in zip(ev.keys, ev.ts, ev.metrics, ev.values, strict=True):
            node = _event_node(key)
            sid = owners.local if node is None else owners(node)
            part(sid).events.add(key, ts, metric, value)
        for key, ident in decoded.batch.identity.items():  # keys the decoder checked
            node = key.split(":", 1)[0]
            sid = owners(node)
            part(sid).identity[key] = ident
            parts.nodes.setdefault(sid, set()).add(node)
        raw: dict[str, dict[str, dict[str, str]]] = {}  # by shard: refused identity values
        for key, values in decoded.refused_identity.items():
            node = key.split(":", 1)[0]
            sid = owners(node)
            raw.setdefault(sid, {})[key] = values
            part(sid)
            parts.nodes.setdefault(sid, set()).add(node)
        for r in decoded.reports:
            sid = owners(r.host)
            reports.setdefault(sid, []).append(r)
            part(sid)
        for sid, batch in batches.items():
            body = encode(batch, reports.get(sid, ()), raw_identity=raw.get(sid))
            if sid == owners.local:
                parts.local = body
            else:
                parts.foreign[sid] = gzip.compress(body, GZIP_LEVEL, mtime=0)
        return parts


def _event_node(key: str) -> str | None:
    try:
        return Entity.parse(key).node
    except ValueError:
        return None
