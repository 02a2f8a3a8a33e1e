"""The fleet at a glance: every node's GPUs (NVLink links folded into their GPU) and IB ports
with risk and alert level, and the fleet's riskiest entities with their reason and predicted
window. One read for what the console's grid draws, instead of one request per node."""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool

from collectors.catalog import Scope
from service.api import peers
from service.api.auth import require
from service.api.node_state import NodeState
from service.api.paging import MAX_LIMIT, Page, page_of
from service.api.principals import Permission
from service.api.problems import READ_ERRORS, problem_responses
from service.api.schemas import (
    FleetGrid,
    GridChassis,
    GridGpu,
    GridNode,
    GridPort,
    RiskyEntity,
)
from service.api.state import State
from service.api.views import _signal, _window, entity_levels
from service.pipeline import Pipeline
from service.stages.scoring import SCOPES, RiskState

router = APIRouter()


@router.get("/v1/fleet", tags=["fleet"], dependencies=[Depends(require(Permission.READ))],
            response_model=FleetGrid, responses=problem_responses(400, 503) | READ_ERRORS,
            summary="Every node's GPUs (links folded in) and IB ports with risk and level, and "
                    "the riskiest entities with their reason and predicted window (on a "
                    "sharded service, of every shard)")
async def fleet_grid(
    request: Request,
    st: State,
    page: Annotated[Page, Depends(page_of(MAX_LIMIT))],
    fleet: peers.FleetDep,
    top: Annotated[int, Query(ge=0, le=100, description="riskiest entities to list")] = 10,
    partial: peers.Partial = False,
) -> FleetGrid:
    def here() -> FleetGrid:
        return grid(st.pipeline, page, top)

    if fleet is not None:
        return await peers.fleet_grid(request, fleet, here, page, top, partial)
    return await run_in_threadpool(here)


def _risk_of(risk: RiskState | None, scope: Scope, slot: int) -> float | None:
    if risk is None or slot >= len(risk.scopes[scope].risk):  # new since the tick
        return None
    return float(risk.scopes[scope].risk[slot])


def grid(p: Pipeline, pg: Page, top: int) -> FleetGrid:
    open_alerts = p.alerts.open_alerts()
    levels = entity_levels(open_alerts)
    node_level: dict[str, int] = defaultdict(int)
    for a in open_alerts:
        node_level[a.node] = max(node_level[a.node], a.level)
    with p.lock:
        risk = p.risk
        now = NodeState(p, risk, open_alerts)
        names = sorted(p.store.registry.nodes)
        after = pg.after("fleet", (str,))
        start = 0 if after is None else bisect.bisect_right(names, after[0])
        picked, next_cursor = pg.slice("fleet", names, lambda n: (n,), start)
        page = set(picked)
        gpus: dict[str, list[GridGpu]] = defaultdict(list)
        ports: dict[str, list[GridPort]] = defaultdict(list)
        gw, lw, pw = p.store[Scope.GPU], p.store[Scope.NVLINK], p.store[Scope.IB_PORT]
        # Each GPU's worst link: by alert level first, then by risk.
        worst: dict[int, tuple[int, float, str]] = {}
        for i in range(len(lw)):
            g = int(lw.gpu_of[i])
            e = lw.entities[i]
            if g < 0 or e.node not in page:
                continue
            lr = now.entity_risk(e.key, _risk_of(risk, Scope.NVLINK, i))
            mine = (levels.get(e.key, 0), -1.0 if lr is None else lr, e.key)
            if g not in worst or mine[:2] > worst[g][:2]:
                worst[g] = mine
        for i in range(len(gw)):
            e = gw.entities[i]
            if e.node not in page:
                continue
            lv, lr, lk = worst.get(i, (0, -1.0, ""))
            since = now.silent_since(Scope.GPU, i)
            gpus[e.node].append(GridGpu(
                gpu=e.key, risk=now.entity_risk(e.key, _risk_of(risk, Scope.GPU, i)),
                level=levels.get(e.key, 0),
                link_risk=None if i not in worst or lr < 0 else lr, link_level=lv,
                worst_link=lk if lk and (lv > 0 or lr > 0) else None,
                silent=since is not None, silent_since=since))
        for i in range(len(pw)):
            e = pw.entities[i]
            if e.node in page:
                ports[e.node].append(GridPort(
                    port=e.key, risk=now.entity_risk(e.key, _risk_of(risk, Scope.IB_PORT, i)),
                    level=levels.get(e.key, 0)))
        chassis = _chassis(p, risk, now, levels, page)
        silent = {name: now.node_silent(name) for name in picked}
        riskiest = _riskiest(p, risk, levels, top)
    rows = []
    for name in picked:
        cells = sorted(gpus[name], key=lambda c: _index(c.gpu))
        rows.append(GridNode(node=name, risk=now.node_risk(name), level=node_level[name],
                             gpus=cells, ports=sorted(ports[name], key=lambda c: c.port),
                             chassis=chassis.get(name),
                             silent=silent[name][0], silent_since=silent[name][1]))
    return FleetGrid(at=None if risk is None else risk.at, total=len(names), limit=pg.limit,
                     next_cursor=next_cursor, nodes=rows, riskiest=riskiest)


CHASSIS = (Scope.PSU, Scope.FAN, Scope.NODE)


def _chassis(p: Pipeline, risk: RiskState | None, now: NodeState, levels: dict[str, int],
             page: set[str]) -> dict[str, GridChassis]:
    """Each node's supplies, fans and own sensors as one cell: the worst of them by alert
    level, then risk (a node's own sensors are its `node` entity); call under the pipeline
    lock. Nodes with none of them get no cell."""
    worst: dict[str, tuple[int, float, Scope, int]] = {}
    counts: dict[str, dict[Scope, int]] = defaultdict(lambda: defaultdict(int))
    for scope in CHASSIS:
        w = p.store[scope]
        for i in range(len(w)):
            e = w.entities[i]
            if e.node not in page:
                continue
            counts[e.node][scope] += 1
            r = now.entity_risk(e.key, _risk_of(risk, scope, i))
            mine = (levels.get(e.key, 0), -1.0 if r is None else r, scope, i)
            if e.node not in worst or mine[:2] > worst[e.node][:2]:
                worst[e.node] = mine
    out = {}
    for node, (lv, r, scope, i) in worst.items():
        signals = (risk.scopes[scope].explain(i)
                   if risk is not None and r > 0 and i < len(risk.scopes[scope].risk) else [])
        out[node] = GridChassis(
            risk=None if r < 0 else r, level=lv,
            worst=p.store[scope].entities[i].key if (lv > 0 or r > 0) else None,
            reason=_signal(signals[0]) if signals else None,
            psus=counts[node][Scope.PSU], fans=counts[node][Scope.FAN])
    return out


def _index(gpu_key: str) -> tuple[int, str]:
    unit = gpu_key.rsplit(":gpu", 1)[-1]
    return (int(unit), gpu_key) if (unit.isascii() and unit.isdigit()) else (1 << 30, gpu_key)


def _riskiest(p: Pipeline, risk: RiskState | None, levels: dict[str, int],
              top: int) -> list[RiskyEntity]:
    """The `top` entities above zero risk across scopes; call under the pipeline lock. Only
    the top few of each scope are explained, so a large fleet costs one partial sort."""
    if risk is None or top == 0:
        return []
    found: list[tuple[float, Scope, int]] = []
    for scope in SCOPES:
        r = risk.scopes[scope].risk
        idx = np.flatnonzero(r > 0)
        if len(idx) > top:
            idx = idx[np.argpartition(-r[idx], top - 1)[:top]]
        found += [(float(r[i]), scope, int(i)) for i in idx]
    found.sort(key=lambda t: -t[0])
    out = []
    for r_, scope, slot in found[:top]:
        e = p.store[scope].entities[slot]
        sr = risk.scopes[scope]
        signals = sr.explain(slot)
        detector = p.model.detector if p.model is not None else None
        probs = detector.probabilities(scope, slot) if detector is not None else None
        out.append(RiskyEntity(entity=e.key, scope=str(scope), node=e.node, risk=r_,
                               level=levels.get(e.key, 0),
                               reason=_signal(signals[0]) if signals else None,
                               window=_window(probs, sr, slot)))
    return out
