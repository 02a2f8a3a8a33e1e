"""Writes on a sharded service (`cluster.shards` set): each node's samples go to the shard
that owns it (service.cluster.shard_map), whichever shard a sender posted to.

ASGI middleware in front of the write routes (service.api.write_lean, service.api.write).
Without `cluster.shards` it hands every request on untouched. With live membership
(`cluster.membership: postgres`) the map is the published one in force now (read per
request: one reference); a shard not in it yet answers an authorised write 503 with
Retry-After. Otherwise, for a POST to a write path that carries a valid write token (else
the routes answer its 401):

- `X-Gpuhealth-Node: <host>` (our agent sends it for its own node's points) naming another
  shard's node: `307 Temporary Redirect` to the owner's same path and query, before the
  body is read. Naming this shard's node: handed on unread. The header is a routing hint,
  never trusted for ownership: ingest keeps only the nodes this shard owns and refuses the
  rest by entity, naming their owner (service.cluster.ownership), so a body that holds
  other nodes than its header says is answered 400 for those, and never scored here.
- Otherwise the body is read and split by node (service.api.shard_split). All of it this
  shard's (or naming no node): handed on as it came. All of it one other shard's: 307 there.
  Mixed (a relay's body): this shard's part is written here through the same routes, every
  other part forwarded to its owner (gzip, the same Authorization and query, marked with
  `X-Gpuhealth-Forwarded-By`), at once and within `FORWARD_TIMEOUT_S`. 204 only when every
  part was stored; a 400 when all were stored but some lines were refused (the counts and
  rejections of every part); otherwise 503 with Retry-After: the sender resends the whole
  body, and since a point sent again overwrites (last write wins) the resend doubles nothing.
- A forwarded request is never forwarded again: one that holds a node this shard does not
  own (the shard maps disagree, say mid-change) is answered `421 Misdirected Request`.
- Whatever passes here unsplit (a body cut short, a malformed Arrow payload, a forwarded
  or hinted one) meets the same ownership check at ingest.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

import httpx
from anyio.to_thread import run_sync
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from service.api import problems, write_arrow
from service.api.inflate import inflate
from service.api.shard_split import ArrowSplitter, Owners, Parts, split_lines
from service.api.state import Running
from service.api.write_answer import PartialWrite
from service.api.write_auth import authorize
from service.cluster.shard_map import Shard, ShardMap
from service.errors import GpuhealthError, ServiceUnavailable

log = logging.getLogger(__name__)

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

WRITE_PATHS = frozenset({"/write", "/v1/write", "/api/v2/write"})
NODE_HEADER = "x-gpuhealth-node"
FORWARDED_HEADER = "x-gpuhealth-forwarded-by"
FORWARD_TIMEOUT_S = 10.0
RETRY_AFTER_S = 5
SHOWN = 200  # rejections listed in a combined 400, as a write lists them


class WrongShard(GpuhealthError):
    """The write's nodes belong to another shard: resend it there (Location)."""

    status, slug, title = 307, "wrong-shard", "Another shard owns these nodes"


class Misdirected(GpuhealthError):
    """A forwarded write holds nodes this shard does not own: never forwarded again."""

    status, slug, title = 421, "misdirected-request", "Misdirected request"


class ShardRoute:
    """ASGI middleware: writes of other shards' nodes redirected, split or refused (above)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._map: tuple[object, ShardMap | None] | None = None
        self._arrow: ArrowSplitter | None = None

    def shard_map(self, st: Running) -> ShardMap | None:
        members = st.pipeline.members
        if members is not None:  # live membership: the published map in force now
            return members.map
        settings = st.settings
        if self._map is None or self._map[0] is not settings:
            self._map = (settings, ShardMap.from_settings(settings.cluster))
        return self._map[1]

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive,
                       send: Send) -> None:
        if (scope["type"] != "http" or scope.get("path") not in WRITE_PATHS
                or scope["method"] != "POST" or scope.get("root_path")):
            await self.app(scope, receive, send)
            return
        st = getattr(scope["app"].state, "gpuhealth", None) if "app" in scope else None
        smap = self.shard_map(st) if isinstance(st, Running) else None
        headers = Headers(scope=scope)
        if smap is None and st is not None and st.pipeline.members is not None and \
                _authorized(headers, st, scope):
            await self._unplaced(st, scope, receive, send)
            return
        if smap is None or st is None or not _authorized(headers, st, scope):
            await self.app(scope, receive, send)
            return
        forwarded = FORWARDED_HEADER in headers
        node = headers.get(NODE_HEADER, "").strip()
        if node:
            owners = Owners(lambda h: smap.owner(h).id, smap.local.id)
            sid = owners(node)
            if sid == smap.local.id:  # the agent's promise: its own node's points only
                await self.app(scope, receive, send)
                return
            await self._refer(st, smap, scope, receive, send, sid, {node}, forwarded)
            return
        encoding = headers.get("content-encoding", "").strip().lower()
        limit = st.settings.ingest.max_body_bytes
        declared = headers.get("content-length", "")
        if encoding not in ("", "identity", "gzip") or ((declared.isascii() and declared.isdigit())
                                                        and int(declared) > limit):
            await self.app(scope, receive, send)  # refused there (415, 413)
            return
        body, whole, replay = await _read(receive, limit)
        arrow = write_arrow.is_arrow(headers.get("content-type", ""))
        parts = await run_sync(self._split, st, smap, body, encoding == "gzip", arrow) \
            if whole else None
        if parts is None or not parts.foreign:  # this shard's, or for the routes to refuse
            await self.app(scope, _replay(replay or [_request(body)], receive), send)
            return
        if forwarded:
            bad = sorted(parts.foreign)
            await self._refer(st, smap, scope, receive, send, bad[0],
                              {n for s in bad for n in parts.nodes.get(s, ())}, True)
            return
        if parts.local is None and len(parts.foreign) == 1:
            sid = next(iter(parts.foreign))
            await self._refer(st, smap, scope, receive, send, sid, parts.nodes.get(sid, set()),
                              False)
            return
        response = await self._split_write(st, smap, scope, receive, headers, parts, arrow)
        st.metrics.write_requests.labels(str(response.status_code)).inc()
        await response(scope, receive, send)

    async def _unplaced(self, st: Running, scope: MutableMapping[str, Any], receive: Receive,
                        send: Send) -> None:
        """Live membership, and this shard is not in the published map yet: it owns no node
        and knows no owner to send the writer to. 503: resend after a lease renewal."""
        members = st.pipeline.members
        assert members is not None
        err = ServiceUnavailable(
            f"shard {members.shard_id} is not in the shard map yet (epoch {members.epoch}): "
            "it owns no node until the leader publishes it; resend shortly",
            headers={"Retry-After": str(RETRY_AFTER_S)}, retry_after=RETRY_AFTER_S,
            shard=members.shard_id, epoch=members.epoch)
        st.metrics.write_requests.labels(str(err.status)).inc()
        await problems.influx_response(err, scope["path"])(scope, receive, send)

    def _split(self, st: Running, smap: ShardMap, body: bytes, gz: bool, arrow: bool
               ) -> Parts | None:
        """In a worker thread: the body by owner; None when the routes must answer it whole
        (gzip cut short or over the limit, a malformed Arrow payload)."""
        try:
            data = body
            if gz:
                got = inflate(body, limit=st.settings.ingest.max_body_bytes)
                if got.cut is not None:
                    return None
                data = got.data
            owners = Owners(lambda h: smap.owner(h).id, smap.local.id)
            if not arrow:
                return split_lines(data, owners, tuple(st.settings.ingest.node_name_from))
            if self._arrow is None:
                self._arrow = ArrowSplitter(st.settings.ingest.max_lines_per_request)
            return self._arrow.split(data, owners)
        except (GpuhealthError, ValueError, ImportError):
            return None

    async def _refer(self, st: Running, smap: ShardMap, scope: MutableMapping[str, Any],
                     receive: Receive, send: Send, sid: str, nodes: set[str],
                     forwarded: bool) -> None:
        """307 to the owner of every node named; 421 when the request was forwarded to us."""
        owner = smap.shards[sid]
        named = ", ".join(sorted(nodes)[:5]) + (" ..." if len(nodes) > 5 else "")
        path = scope["path"]
        if forwarded:
            err: GpuhealthError = Misdirected(
                f"shard {smap.local.id} does not own node {named} (shard {sid} does); a "
                "forwarded write is not forwarded again", shard=smap.local.id,
                owner={"id": owner.id, "url": owner.url})
        else:
            err = WrongShard(f"node {named} belongs to shard {sid}; write to {owner.url}",
                             headers={"Location": _target(owner, scope)},
                             shard=smap.local.id, owner={"id": owner.id, "url": owner.url})
        st.metrics.write_requests.labels(str(err.status)).inc()
        await problems.influx_response(err, path)(scope, receive, send)

    async def _split_write(self, st: Running, smap: ShardMap, scope: MutableMapping[str, Any],
                           receive: Receive, headers: Headers, parts: Parts,
                           arrow: bool) -> Response:
        """This shard's part through the routes, the others forwarded; one answer for all."""
        jobs: dict[str, Awaitable[tuple[int | None, bytes]]] = {}
        async with httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S) as client:
            for sid, payload in parts.foreign.items():
                jobs[sid] = _forward(client, smap.shards[sid], smap.local.id, scope, headers,
                                     payload)
            if parts.local is not None:
                jobs[smap.local.id] = self._here(scope, receive, parts.local)
            got = dict(zip(jobs, await asyncio.gather(*jobs.values()), strict=True))
        return _combine(got, scope["path"], smap.local.id)

    async def _here(self, scope: MutableMapping[str, Any], receive: Receive, payload: bytes
                    ) -> tuple[int | None, bytes]:
        """This shard's part written through the routes behind us; their answer, captured."""
        heads = [(k, v) for k, v in scope["headers"]
                 if k not in (b"content-length", b"content-encoding")]
        inner = {**scope, "headers": [*heads, (b"content-length", str(len(payload)).encode())]}
        status: list[int] = []
        chunks: list[bytes] = []

        async def capture(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                status.append(int(msg["status"]))
            elif msg["type"] == "http.response.body":
                chunks.append(msg.get("body", b""))

        await self.app(inner, _replay([_request(payload)], receive), capture)
        return (status[0] if status else None), b"".join(chunks)


async def _forward(client: httpx.AsyncClient, owner: Shard, local: str,
                   scope: MutableMapping[str, Any], headers: Headers, payload: bytes
                   ) -> tuple[int | None, bytes]:
    out = {"Content-Encoding": "gzip", FORWARDED_HEADER: local,
           "Content-Type": headers.get("content-type", "text/plain; charset=utf-8")}
    if "authorization" in headers:
        out["Authorization"] = headers["authorization"]
    try:
        r = await client.post(_target(owner, scope), content=payload, headers=out)
    except httpx.HTTPError as exc:
        log.warning("forwarding a write's part to shard %s failed: %s: %s", owner.id,
                    type(exc).__name__, exc)
        return None, b""
    if r.status_code not in (204, 400):
        log.warning("shard %s answered a forwarded part %s: %s", owner.id, r.status_code,
                    r.text[:300])
    return r.status_code, r.content


def _combine(got: dict[str, tuple[int | None, bytes]], path: str, local: str) -> Response:
    failed = {sid: status for sid, (status, _) in got.items() if status not in (204, 400)}
    if failed:
        said = ", ".join(f"{sid}: {status or 'unreachable'}" for sid, status in
                         sorted(failed.items()))
        return problems.influx_response(ServiceUnavailable(
            f"part of this write could not be stored ({said}); resend the whole body (points "
            "sent again overwrite, nothing doubles)", headers={"Retry-After": str(RETRY_AFTER_S)},
            retry_after=RETRY_AFTER_S, shard=local,
            failed={sid: status for sid, status in sorted(failed.items())}), path)
    refused = {sid: _said(body) for sid, (status, body) in got.items() if status == 400}
    if not refused:
        return Response(status_code=204)
    accepted = sum(int(s.get("accepted", 0)) for s in refused.values())
    rejected = sum(int(s.get("rejected", 0)) for s in refused.values())
    rejections = [{**r, "shard": sid} for sid, s in sorted(refused.items())
                  for r in s.get("rejections", [])][:SHOWN]
    # `accepted` counts the parts with refusals (a 204 says no count); the rest are named.
    whole = sorted(sid for sid, (status, _) in got.items() if status == 204)
    return problems.influx_response(PartialWrite(
        f"partial write: {rejected} refused on shard {', '.join(sorted(refused))}, "
        f"{accepted} samples kept there" + (f", shard {', '.join(whole)} stored its part "
                                            "whole" if whole else "") + f" dropped={rejected}",
        accepted=accepted, rejected=rejected, rejections=rejections, stored_whole=whole,
        truncated=any(s.get("truncated") for s in refused.values())), path)


def _said(body: bytes) -> dict[str, Any]:
    try:
        said = json.loads(body)
    except ValueError:
        return {}
    return said if isinstance(said, dict) else {}


def _target(owner: Shard, scope: MutableMapping[str, Any]) -> str:
    qs = scope.get("query_string", b"").decode("latin-1")
    return f"{owner.url}{scope['path']}" + (f"?{qs}" if qs else "")


def _authorized(headers: Headers, st: Running, scope: MutableMapping[str, Any]) -> bool:
    query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
    try:  # not charged: the FastAPI route that answers a refusal charges it, once
        authorize(Request(scope), st, query.get("u"), query.get("p"), charge=False)
    except GpuhealthError:
        return False
    return True


async def _read(receive: Receive, limit: int) -> tuple[bytes, bool, list[Message]]:
    """The body; whether it was read whole within `limit`; if not, what to replay."""
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            return b"", False, [_request(b"".join(chunks), True), msg]
        chunks.append(msg.get("body", b""))
        size += len(chunks[-1])
        more = bool(msg.get("more_body", False))
        if size > limit:
            return b"", False, [_request(b"".join(chunks), more)]
        if not more:
            return b"".join(chunks), True, []


def _request(body: bytes, more: bool = False) -> Message:
    return {"type": "http.request", "body": body, "more_body": more}


def _replay(queue: list[Message], receive: Receive) -> Receive:
    async def again() -> Message:
        return queue.pop(0) if queue else await receive()

    return again
