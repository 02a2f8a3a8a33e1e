"""Views: pipeline state to wire shapes, for the read endpoints."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from collectors.catalog import CATALOG, Scope
from collectors.frames import Entity
from models.detectors.findings import Signal
from models.detectors.fusion import ScopeRisk
from models.predictor.interval import active_calibration, shown, withheld_text
from models.predictor.raw_windows import candidates
from service.api.identity_out import identity_out
from service.api.node_state import NodeState
from service.api.paging import Page
from service.api.schemas import (
    AlertmanagerOut,
    AlertOut,
    DeliveryOut,
    EntityOut,
    GpuDetail,
    MetricOut,
    ModelOut,
    NodeDetail,
    NodeList,
    NodeSummary,
    PredictionOut,
    SignalOut,
    TopSignal,
    VerdictOut,
    WindowOut,
)
from service.notify.labels import alert_labels
from service.notify.status import DeliveryIndex
from service.notify.values import value_text
from service.pipeline import Pipeline
from service.stages.alert_store import Alert
from service.stages.scoring import SCOPES, RiskState

ALL = 1_000_000  # "no limit" for alert-store queries scoped to one node
# What a node's page shows beside each entity: a supply's and a fan's every reading, a GPU's
# PCIe link and readability (the console draws them beside its GPUs, issue 31).
BESIDE: dict[Scope, tuple[str, ...] | None] = {
    Scope.PSU: None, Scope.FAN: None,
    Scope.GPU: ("pcie_link_width", "pcie_link_width_max", "pcie_link_gen", "pcie_link_gen_max",
                "gpu_unreadable"),
}


def _num(x: object) -> float | None:
    """JSON has no NaN: missing or undefined values travel as null."""
    if x is None or isinstance(x, bool) or not isinstance(x, int | float | np.floating):
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def _signal(s: Signal) -> SignalOut:
    return _signal_out(s.rule, s.signal, _num(s.value), _num(s.threshold), s.risk, s.hard)


def _signal_out(rule: str, signal: str, value: float | None, threshold: float | None,
                risk: float, hard: bool) -> SignalOut:
    return SignalOut(rule=rule, signal=signal, value=value, threshold=threshold, risk=risk,
                     hard=hard, value_text=value_text(rule, value),
                     threshold_text="" if threshold is None else value_text(rule, threshold))


def alerts_out(p: Pipeline, alerts: Iterable[Alert]) -> list[AlertOut]:
    """Several alerts, their delivery column read from one index."""
    index = p.notification.deliveries() if p.notification is not None else None
    return [alert_out(p, a, index) for a in alerts]


def alert_out(p: Pipeline, a: Alert, deliveries: DeliveryIndex | None = None) -> AlertOut:
    """The alert with its labels (as receivers get them), what happened to it at each
    receiver it routes to (`deliveries`: an index built for the request, else one is built)
    and, where an alertmanager receiver read it back, what each Alertmanager says of it."""
    expl = [_signal_out(str(d.get("rule", "")), str(d.get("signal", "")), _num(d.get("value")),
                        _num(d.get("threshold")), _num(d.get("risk")) or 0.0,
                        bool(d.get("hard", False)))
            for d in a.explanation]
    upstream = p.notification.upstream(a.fingerprint) if p.notification is not None else []
    if deliveries is None and p.notification is not None:
        deliveries = p.notification.deliveries()
    sent = deliveries.of(a) if deliveries is not None else []
    return AlertOut(id=a.id, alertname=a.name, fingerprint=a.fingerprint,
                    labels=alert_labels(a, p.settings.storage.influxdb.cluster,
                                        board=p.identities.at(a.entity, a.started_at)),
                    entity=a.entity, scope=str(a.scope), node=a.node, level=a.level,
                    peak_level=a.peak_level, state=a.state, risk=a.risk,
                    started_at=a.started_at, updated_at=a.updated_at,
                    resolved_at=a.resolved_at, explanation=expl, acked_by=a.acked_by,
                    acked_at=a.acked_at, verdict=_verdict(p, a.id),
                    alertmanager=[AlertmanagerOut(
                        receiver=u.receiver, url=u.url, state=u.state,
                        silenced_by=list(u.silenced_by), inhibited_by=list(u.inhibited_by),
                        checked_at=u.checked_at) for u in upstream],
                    deliveries=[DeliveryOut(
                        receiver=d.receiver, state=d.state, why=d.why, silence_id=d.silence_id,
                        sent_at=d.sent_at, level_sent=d.level_sent, error=d.error,
                        failed_at=d.failed_at) for d in sent])


def entity_levels(alerts: Iterable[Alert]) -> dict[str, int]:
    """Each entity's worst open alert: a GPU can have two (its risk's and GpuMissing)."""
    out: dict[str, int] = {}
    for a in alerts:
        out[a.entity] = max(out.get(a.entity, 0), a.level)
    return out


def _verdict(p: Pipeline, alert_id: int) -> VerdictOut | None:
    v = p.verdicts.latest(alert_id)
    if v is None:
        return None
    return VerdictOut(verdict=v.verdict, mode=v.mode, failed_at=v.failed_at, comment=v.comment,
                      actor=v.actor, via=v.via, at=v.at)


def _entity(risk: RiskState | None, scope: Scope, e: Entity, slot: int,
            levels: dict[str, int], now: NodeState | None = None) -> EntityOut:
    r: float | None = None
    expl: list[SignalOut] = []
    if risk is not None and slot < len(risk.scopes[scope].risk):  # else new since the tick
        sr = risk.scopes[scope]
        r = float(sr.risk[slot])
        if r > 0:
            expl = [_signal(s) for s in sr.explain(slot)]
    since = None
    if now is not None:
        r = now.entity_risk(e.key, r)
        since = now.silent_since(scope, slot)
    return EntityOut(entity=e.key, scope=str(scope), risk=r, level=levels.get(e.key, 0),
                     explanation=expl, silent=since is not None, silent_since=since)


def node_list(p: Pipeline, sort: str, descending: bool, page: Page) -> NodeList:
    open_alerts = p.alerts.open_alerts()
    n_alerts: dict[str, int] = defaultdict(int)
    level: dict[str, int] = defaultdict(int)
    for a in open_alerts:
        n_alerts[a.node] += 1
        level[a.node] = max(level[a.node], a.level)
    with p.lock:
        risk = p.risk
        now = NodeState(p, risk, open_alerts)
        names = list(p.store.registry.nodes)
        counts = {}
        for s in SCOPES:
            w = p.store[s]
            node_of = w.node_of[: len(w)]
            counts[s] = np.bincount(node_of[node_of >= 0], minlength=len(names))
        top = _riskiest(p, risk)
    node_risk = [now.node_risk(name) for name in names]
    ranked = [-1.0 if r is None else r for r in node_risk]  # unscored sorts below zero risk
    # The listing order as an ascending key (ties in name order): a cursor is the last key.
    sign = -1.0 if descending else 1.0
    if sort == "risk":
        keys: list[tuple[Any, ...]] = [(sign * ranked[i], names[i]) for i in range(len(names))]
    elif sort == "alerts":
        keys = [(sign * n_alerts[names[i]], names[i]) for i in range(len(names))]
    else:
        keys = [(names[i],) for i in range(len(names))]
    order = sorted(range(len(names)), key=lambda i: keys[i], reverse=sort == "node" and descending)
    listing = f"nodes:{sort}:{'desc' if descending else 'asc'}"
    after = page.after(listing, (float, str) if sort != "node" else (str,))
    start = 0
    if after is not None:
        cut = tuple(after)
        start = next((j for j, i in enumerate(order)
                      if (keys[i] < cut if sort == "node" and descending else keys[i] > cut)),
                     len(order))
    picked, next_cursor = page.slice(listing, order, lambda i: keys[i], start)
    rows = []
    for i in picked:
        name = names[i]
        silent, since = now.node_silent(name)
        rows.append(NodeSummary(
            node=name, risk=node_risk[i], level=level[name], gpus=int(counts[Scope.GPU][i]),
            links=int(counts[Scope.NVLINK][i]), ports=int(counts[Scope.IB_PORT][i]),
            psus=int(counts[Scope.PSU][i]), fans=int(counts[Scope.FAN][i]),
            alerts=n_alerts[name], top_signal=top.get(i), silent=silent, silent_since=since))
    return NodeList(total=len(names), limit=page.limit, next_cursor=next_cursor, nodes=rows)


def _riskiest(p: Pipeline, risk: RiskState | None) -> dict[int, TopSignal]:
    """Per node slot, the top signal of its riskiest entity. Only entities above zero are
    looked at, so a healthy fleet costs a comparison per entity and no Python loop."""
    best: dict[int, tuple[float, Scope, int]] = {}
    if risk is None:
        return {}
    for scope in SCOPES:
        r = risk.scopes[scope].risk
        idx = np.flatnonzero(r > 0)
        if not len(idx):
            continue
        nodes = p.store[scope].node_of[idx]
        order = np.lexsort((-r[idx], nodes))
        uniq, first = np.unique(nodes[order], return_index=True)
        for node, j in zip(uniq.tolist(), first.tolist(), strict=True):
            slot = int(idx[order[j]])
            if node not in best or r[slot] > best[node][0]:
                best[node] = (float(r[slot]), scope, slot)
    out: dict[int, TopSignal] = {}
    for node, (r_max, scope, slot) in best.items():
        signals = risk.scopes[scope].explain(slot)
        if signals:
            out[node] = TopSignal(entity=p.store[scope].entities[slot].key,
                                  rule=signals[0].rule, signal=signals[0].signal, risk=r_max)
    return out


def node_detail(p: Pipeline, node: str) -> NodeDetail | None:
    """A node's entities and open alerts. Its risk and level are the fleet grid's
    (service.api.node_state): the two pages read the same numbers."""
    alerts = p.alerts.find(state="firing", node=node, limit=ALL)
    levels = entity_levels(alerts)
    lists: dict[Scope, list[EntityOut]] = {}
    with p.lock:
        try:
            node_slot = p.store.registry.nodes.index(node)
        except ValueError:
            return None
        risk = p.risk
        now = NodeState(p, risk, alerts)
        for scope in SCOPES:
            w = p.store[scope]
            slots = np.flatnonzero(w.node_of[: len(w)] == node_slot)
            lists[scope] = [_with_window(p, scope, _entity(risk, scope, w.entities[i], i,
                                                           levels, now), i, risk)
                            for i in map(int, slots)]
            if scope in BESIDE:
                for out, i in zip(lists[scope], map(int, slots), strict=True):
                    out.readings = _readings(p, scope, i, BESIDE[scope])
        for out in lists[Scope.GPU]:
            out.identity = identity_out(p.identities, out.entity)
        own = lists[Scope.NODE][0] if lists[Scope.NODE] else None
        sensors = _latest(p, Scope.NODE, node)
        silent, since = now.node_silent(node)
    return NodeDetail(node=node, risk=now.node_risk(node),
                      level=max((a.level for a in alerts), default=0), gpus=lists[Scope.GPU],
                      links=lists[Scope.NVLINK], ports=lists[Scope.IB_PORT],
                      psus=lists[Scope.PSU], fans=lists[Scope.FAN], own=own, sensors=sensors,
                      alerts=alerts_out(p, alerts), silent=silent, silent_since=since)


def gpu_detail(p: Pipeline, key: str) -> GpuDetail | str:
    """The GPU's view, or why there is none (the 404 message)."""
    try:
        e = Entity.parse(key)
        if e.scope is Scope.GPU:
            e = Entity.gpu(e.node, int(e.unit))  # 'gpu03' and 'gpu3' name one GPU
    except ValueError:  # not a key, or an index no GPU has (gpu1e400, 10**30)
        e = None
    if e is None or e.scope is not Scope.GPU:
        return f"{key!r} is not a GPU key: expected <node>:gpu<index>, e.g. n001:gpu3"
    mine = [a for a in p.alerts.find(state="firing", node=e.node, limit=ALL)
            if a.entity == e.key or a.entity.startswith(e.key + ":")]
    levels = entity_levels(mine)
    with p.lock:
        w = p.store[Scope.GPU]
        slot = w.slot(e)
        if slot is None:
            return f"GPU {e.key!r} is not known: no sample has named it"
        metrics = _latest(p, Scope.GPU, e.key)
        risk = p.risk
        now = NodeState(p, risk, mine)
        me = _with_window(p, Scope.GPU, _entity(risk, Scope.GPU, e, slot, levels, now), slot,
                          risk)
        lw = p.store[Scope.NVLINK]
        links = [_with_window(p, Scope.NVLINK, _entity(risk, Scope.NVLINK, lw.entities[i], i,
                                                       levels), i, risk)
                 for i in map(int, np.flatnonzero(lw.gpu_of[: len(lw)] == slot))]
        prediction = _prediction(p, Scope.GPU, slot)
    return GpuDetail(gpu=e.key, node=e.node, risk=me.risk, level=me.level, metrics=metrics,
                     explanation=me.explanation, links=links,
                     alerts=alerts_out(p, mine), prediction=prediction,
                     window=me.window, identity=identity_out(p.identities, e.key))


def _prediction(p: Pipeline, scope: Scope, slot: int) -> PredictionOut | None:
    detector = p.model.detector if p.model is not None else None
    if detector is None:
        return None
    probs: dict[str, float] | None = detector.probabilities(scope, slot)
    if probs is None:
        return None
    return PredictionOut(model=detector.predictor.version,
                         probabilities={k: round(v, 6) for k, v in probs.items()},
                         window=_window(probs))


def _window(probs: dict[str, float] | None, sr: ScopeRisk | None = None,
            slot: int = 0) -> WindowOut | None:
    """The window an entity shows (models/predictor/interval.py): the narrowest calibrated
    interval of the model's and the growth rules' raw windows; with no calibration shipped, the
    model's raw window or else a rule's. Where every source is hidden for its mode (no narrower
    than a constant window at the same coverage) it says so instead of showing one."""
    raws = candidates(probs, sr, slot)
    cal = active_calibration()
    iv = shown(raws, cal)
    if iv is not None:
        r = iv.raw
        return WindowOut(mode=r.mode, after_h=round(iv.lo_h, 2),
                         within_h=round(iv.hi_h, 2) if math.isfinite(iv.hi_h) else None,
                         probability=round(r.probability, 6), text=iv.text(), source=r.source,
                         coverage=iv.coverage)
    if raws and cal is not None:
        return WindowOut(mode=raws[0].mode, after_h=None, within_h=None,
                         probability=round(raws[0].probability, 6), source=raws[0].source,
                         coverage=cal.coverage, withheld=True,
                         text=withheld_text(raws, cal))
    return None


def _with_window(p: Pipeline, scope: Scope, out: EntityOut, slot: int,
                 risk: RiskState | None = None) -> EntityOut:
    """The entity with the model's predicted window, where the model predicts its scope, or
    else a growth rule's."""
    detector = p.model.detector if p.model is not None else None
    probs = detector.probabilities(scope, slot) if detector is not None else None
    out.window = _window(probs, None if risk is None else risk.scopes[scope], slot)
    return out


def model_out(p: Pipeline) -> ModelOut | None:
    if p.model is None:
        return None
    status = p.model.status
    return ModelOut(loaded=status.loaded, path=status.path, version=status.version,
                    reason=status.reason)


def _latest(p: Pipeline, scope: Scope, key: str) -> list[MetricOut]:
    """The newest value of each metric and event of an entity (none where the store does not
    know it); call under the pipeline lock."""
    w = p.store[scope]
    slot = w.slot(Entity.parse(key))
    if slot is None:
        return []
    return _readings(p, scope, slot, None) + _latest_events(p, scope, key)


def _readings(p: Pipeline, scope: Scope, slot: int,
              names: tuple[str, ...] | None) -> list[MetricOut]:
    """The newest value of the named metrics (every metric for None) of one slot; call under
    the pipeline lock."""
    w = p.store[scope]
    return [MetricOut(name=m.name, unit=m.unit, kind=str(m.kind),
                      value=_num(w.last_val[slot, j]), ts=_num(w.last_ts[slot, j]))
            for j, m in enumerate(w.metrics) if names is None or m.name in names]


def _latest_events(p: Pipeline, scope: Scope, key: str) -> list[MetricOut]:
    """The newest value of each event metric (Xid; SEL, SXid) of the entity; call under the
    pipeline lock."""
    wanted = {m.name: m for m in CATALOG.events(scope)}
    if not wanted:
        return []
    found: dict[str, MetricOut] = {}
    for ev in reversed(p.events.events):
        if ev.entity == key and ev.metric in wanted and ev.metric not in found:
            m = wanted[ev.metric]
            found[m.name] = MetricOut(name=m.name, unit=m.unit, kind=str(m.kind),
                                      value=ev.value, ts=ev.ts)
            if len(found) == len(wanted):
                break
    return [found.get(m.name) or MetricOut(name=m.name, unit=m.unit, kind=str(m.kind),
                                           value=None, ts=None) for m in wanted.values()]
