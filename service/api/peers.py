"""Reads on a sharded service (`cluster.shards` set): any shard answers any fleet read.

Each shard holds the window store, risk and scores of its own nodes only; the shared state
(alerts, actions, silences, verdicts, labels, models) is in PostgreSQL and answers the same
everywhere. The in-memory views answer for the whole fleet this way:

- a node-scoped read (/v1/nodes/{node}, /v1/gpus/{gpu}, and the per-entity history and risk
  endpoints while they read the shard's own SQLite) of a node another shard owns is proxied
  to the owner: a GET of the same path and query with the caller's Authorization, its status
  and body passed through; an owner that does not answer is a 503 naming it, with Retry-After;
- a fleet-wide read (/v1/nodes, /v1/fleet, /v1/collectors) asks every shard at once and
  merges the answers exactly (service.api.fleet_merge). This shard answers in-process, not
  over loopback: its URL in the map may be one only other hosts reach (a load balancer's
  name), and a hop through its own HTTP stack would cost a connection and a serialization
  for nothing. A shard that does not answer makes the whole read a 503, never a silently
  partial fleet, unless `partial=true` is asked: then the answer names the shards missing.

Every request sent to a peer carries `X-Gpuhealth-Local: 1`, which asks a shard for its own
answer only; so nothing loops. Authorization is checked here first (the routes' dependencies
run before any of this), and passed on for the peer to check again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Annotated, Any

import httpx
from fastapi import Depends, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

from collectors.frames import Entity
from service.api.fleet_merge import FLEET, merge_page, merge_riskiest, node_listing, oldest
from service.api.paging import Page
from service.api.schemas import CollectorOut, FleetGrid, NodeList, NodeSummary
from service.api.state import Running, State
from service.cluster.shard_map import Shard, ShardMap
from service.errors import PROBLEM_JSON, ServiceUnavailable
from service.history.histories import source_name

log = logging.getLogger(__name__)

LOCAL_HEADER = "X-Gpuhealth-Local"
TIMEOUT_S = 10.0  # per peer; a fleet read waits for its slowest shard
RETRY_AFTER_S = 5
# What a proxied answer keeps of the owner's headers (the rest are hop-by-hop or rebuilt).
PASSED = ("content-type", "retry-after", "www-authenticate")

_maps: dict[int, tuple[object, ShardMap | None]] = {}


def shard_map_of(st: Running) -> ShardMap | None:
    """THE shard map the reads use (None: one shard owns every node): the map in force, as
    service.api.shard_route reads it (live membership's published map, else the settings)."""
    members = st.pipeline.members
    if members is not None:
        return members.map
    settings = st.settings
    cached = _maps.get(id(settings))
    if cached is None or cached[0] is not settings:
        if len(_maps) > 16:  # services built and dropped (tests): keep the cache small
            _maps.clear()
        cached = _maps[id(settings)] = (settings, ShardMap.from_settings(settings.cluster))
    return cached[1]


LocalOnly = Annotated[str | None, Header(
    alias=LOCAL_HEADER, description="`1`: this shard's own answer only (on a sharded service "
    "a read otherwise answers for the whole fleet); what shards send each other")]
Partial = Annotated[bool, Query(description=(
    "on a sharded service: answer with the shards that did answer, naming the missing ones "
    "in `missing_shards`, instead of a 503 when one does not"))]


def _fleet(st: State, local: LocalOnly = None) -> ShardMap | None:
    """The map to ask every shard of, or None when this shard answers alone."""
    return None if local == "1" else shard_map_of(st)


FleetDep = Annotated[ShardMap | None, Depends(_fleet)]


# ---- node-scoped reads: proxied to the owner ------------------------------------------------

class AtOwner(Exception):
    """Raised by a route's dependency: another shard owns the node; it answers (see
    `answer_at_owner`, the app's handler for this)."""

    def __init__(self, owner: Shard, local: str) -> None:
        super().__init__(owner.id)
        self.owner, self.local = owner, local


def _owner_answers(request: Request, smap: ShardMap | None) -> None:
    if smap is None:
        return
    key = next(iter(request.path_params.values()), "")
    try:
        owner = smap.owner(Entity.parse(str(key)).node)
    except ValueError:
        return  # not a key, or a name no shard owns: this shard's 404 says so
    if owner.id != smap.local.id:
        raise AtOwner(owner, smap.local.id)


def at_owner(request: Request, smap: FleetDep) -> None:
    """Dependency of the node-scoped in-memory reads: another shard's node is its answer."""
    _owner_answers(request, smap)


def history_at_owner(request: Request, st: State, smap: FleetDep) -> None:
    """Dependency of the history routes: proxied only while they read this shard's own
    SQLite (with InfluxDB every shard reads the same store)."""
    if source_name(st.settings.storage.influxdb) == "sqlite":
        _owner_answers(request, smap)


async def answer_at_owner(request: Request, exc: Exception) -> Response:
    """The owner's answer to this GET, passed through; a 503 naming it when it has none."""
    assert isinstance(exc, AtOwner)
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        got = await _get(client, exc.owner, request)
    if isinstance(got, str):
        err = _unavailable(f"shard {exc.owner.id} owns this node and did not answer ({got}); "
                           "try again", exc.local, {exc.owner.id: got})
        return JSONResponse(jsonable_encoder(err.problem(request.url.path)),
                            status_code=err.status, headers=err.headers,
                            media_type=PROBLEM_JSON)
    return Response(got.content, status_code=got.status_code,
                    headers={k: v for k, v in got.headers.items() if k.lower() in PASSED})


# ---- fleet-wide reads: every shard asked ----------------------------------------------------

async def ask_all(request: Request, smap: ShardMap, here: Callable[[], Any], partial: bool
                  ) -> tuple[dict[str, Any], dict[str, str]]:
    """Every shard's JSON answer to this GET (this shard's from `here`, in a worker thread,
    made JSON as the others'), and why each missing one is; ServiceUnavailable when one is
    missing and `partial` was not asked."""
    async def mine() -> Any:
        return jsonable_encoder(await run_in_threadpool(here))

    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        jobs = {sid: mine() if sid == smap.local.id else _json(client, shard, request)
                for sid, shard in sorted(smap.shards.items())}
        got = dict(zip(jobs, await asyncio.gather(*jobs.values()), strict=True))
    missing = {sid: v[1] for sid, v in got.items() if isinstance(v, tuple)}
    if missing and not partial:
        said = ", ".join(f"{sid}: {why}" for sid, why in sorted(missing.items()))
        raise _unavailable(f"shard {', '.join(sorted(missing))} did not answer ({said}); the "
                           "fleet is not shown in part unless partial=true is asked",
                           smap.local.id, missing)
    return {sid: v for sid, v in got.items() if not isinstance(v, tuple)}, missing


async def _json(client: httpx.AsyncClient, shard: Shard, request: Request) -> Any:
    """The shard's JSON answer, or ("missing", why)."""
    got = await _get(client, shard, request)
    if isinstance(got, str):
        return ("missing", got)
    if got.status_code != 200:
        log.warning("shard %s answered %s to %s: %s", shard.id, got.status_code,
                    request.url.path, got.text[:300])
        return ("missing", f"answered {got.status_code}")
    try:
        return got.json()
    except ValueError:
        return ("missing", "answered a body that is not JSON")


async def _get(client: httpx.AsyncClient, shard: Shard, request: Request
               ) -> httpx.Response | str:
    """The shard's answer to this request's GET (its own part only), or why there is none."""
    headers = {LOCAL_HEADER: "1", "Accept": request.headers.get("accept", "*/*")}
    if "authorization" in request.headers:
        headers["Authorization"] = request.headers["authorization"]
    query = request.url.query
    url = f"{shard.url}{request.url.path}" + (f"?{query}" if query else "")
    try:
        return await client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        log.warning("shard %s did not answer %s: %s: %s", shard.id, request.url.path,
                    type(exc).__name__, exc)
        return f"unreachable: {type(exc).__name__}"


def _unavailable(detail: str, local: str, missing: dict[str, str]) -> ServiceUnavailable:
    return ServiceUnavailable(detail, headers={"Retry-After": str(RETRY_AFTER_S)},
                              retry_after=RETRY_AFTER_S, shard=local,
                              missing=dict(sorted(missing.items())))


# ---- the fleet-wide reads, merged -----------------------------------------------------------

def _owner_of(smap: ShardMap) -> Callable[[str], str]:
    def owner(node: str) -> str:
        try:
            return smap.owner(node).id
        except ValueError:
            return ""
    return owner


async def node_list(request: Request, smap: ShardMap, here: Callable[[], NodeList],
                    page: Page, sort: str, descending: bool, partial: bool) -> NodeList:
    """/v1/nodes across the shards: their pages merged in the listing's order, totals summed."""
    got, missing = await ask_all(request, smap, here, partial)
    nodes, cursor = merge_page(node_listing(sort, descending), got, "nodes", page.limit,
                               _owner_of(smap), secret=page.secret)
    return NodeList(total=sum(int(p["total"]) for p in got.values()), limit=page.limit,
                    next_cursor=cursor, nodes=[NodeSummary.model_validate(n) for n in nodes],
                    missing_shards=sorted(missing))


async def fleet_grid(request: Request, smap: ShardMap, here: Callable[[], FleetGrid],
                     page: Page, top: int, partial: bool) -> FleetGrid:
    """/v1/fleet across the shards: grids merged by node name, the riskiest by risk."""
    got, missing = await ask_all(request, smap, here, partial)
    owner = _owner_of(smap)
    nodes, cursor = merge_page(FLEET, got, "nodes", page.limit, owner, secret=page.secret)
    return FleetGrid.model_validate({
        "at": oldest([p["at"] for p in got.values()]),
        "total": sum(int(p["total"]) for p in got.values()), "limit": page.limit,
        "next_cursor": cursor, "nodes": nodes, "riskiest": merge_riskiest(got, top, owner),
        "missing_shards": sorted(missing)})


async def collectors(request: Request, smap: ShardMap,
                     here: Callable[[], dict[str, CollectorOut]], partial: bool
                     ) -> dict[str, CollectorOut]:
    """/v1/collectors across the shards, keyed `<shard>/<collector>`; with partial=true a
    shard that did not answer is one collector `<shard>/*`, down, saying why."""
    got, missing = await ask_all(request, smap, here, partial)
    out = {f"{sid}/{name}": CollectorOut.model_validate(c)
           for sid, answer in got.items() for name, c in answer.items()}
    out |= {f"{sid}/*": CollectorOut(up=False, reason=f"shard {sid} did not answer: {why}",
                                     exhausted=False) for sid, why in missing.items()}
    return dict(sorted(out.items()))
