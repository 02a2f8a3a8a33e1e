"""What the service decides, as line protocol (docs/influxdb.md): risk per entity with its
strongest signal, alert level changes, notification and remediation deliveries, collector
health. Built once per scoring tick from the tick's result."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from collectors.base import CollectorStatus
from collectors.catalog import Scope
from collectors.frames import Entity
from collectors.lineprotocol_format import format_value
from models.detectors.findings import Signal
from service.history.influx.lines import entity_tags, head, ns
from service.notify.sender import Sent
from service.remediation.actions import AuditEntry
from service.stages.alert_machine import Transition
from service.stages.alert_store import Alert
from service.stages.fleet_alerts import FLEET
from service.stages.label_store import StoredLabel
from service.stages.scoring import SCOPES, RiskState

# (host, collector) -> status
Statuses = Callable[[], Mapping[tuple[str, str], CollectorStatus]]
# Links and ports are many (18 links per GPU), supplies and fans a dozen per node; only those at
# some risk are written each tick.
_ALWAYS = (Scope.GPU,)


def _text(s: str, limit: int = 300) -> str:
    return format_value(" ".join(s.split())[:limit])  # one line, bounded


def top_signal(signals: list[Signal]) -> str:
    if not signals:
        return ""
    s = signals[0]
    return f"{s.rule}: {s.signal} = {s.value:.4g} (threshold {s.threshold:.4g})"


class TickRecorder:
    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        # Per sparse scope, the entities written last tick: one leaving risk gets one more
        # point (risk 0, level 0) so "open now" panels see its alert end, also when the store
        # has forgotten it since (slots are renumbered then, so this is kept by entity).
        self._written: dict[Scope, set[Entity]] = {}
        self._storm_written = False

    def risk(self, state: RiskState, levels: Mapping[Scope, np.ndarray],
             derived: Mapping[str, int] | None = None) -> Iterator[str]:
        """`derived`: levels of open node and fleet alerts (NodeNoData, GpuMissing,
        FleetStorm) by entity key; a GPU's point carries the higher of its two alerts."""
        derived = derived or {}
        t = ns(state.at)
        node_level: dict[str, int] = {}  # a node's own sensors' level: on its one node point
        for scope in SCOPES:
            if scope is Scope.NODE:
                own = levels.get(scope, np.zeros(0, np.int8))
                for e, lv_ in zip(state.store[scope].entities, own.tolist(), strict=False):
                    node_level[e.node] = int(lv_)
                continue
            sr = state.scopes[scope]
            n = len(sr.risk)
            lv = levels.get(scope, np.zeros(0, np.int8))
            lv = np.pad(lv[:n], (0, max(n - len(lv), 0)))
            w = state.store[scope]
            ents = w.entities[:n]
            now = np.flatnonzero((sr.risk > 0) | (lv > 0)).tolist()
            written = {ents[i] for i in now}
            before = self._written.get(scope, set()) - written
            self._written[scope] = written
            slots = [(w.slot(e), e) for e in before]
            for _, e in (x for x in slots if x[0] is None or x[0] >= n):  # forgotten since
                tags = {"cluster": self.cluster, "scope": scope.value, "entity": e.key,
                        **entity_tags(e)}
                yield f"{head('risk', tags)} risk=0.0,level=0i {t}"
            rows: Sequence[int] = range(n) if scope in _ALWAYS else \
                sorted({*now, *(s for s, _ in slots if s is not None and s < n)})
            for i in rows:
                e = ents[i]
                r = float(sr.risk[i])
                tags = {"cluster": self.cluster, "scope": scope.value, "entity": e.key,
                        **entity_tags(e)}
                level = max(int(lv[i]), derived.get(e.key, 0))
                fields = f"risk={r!r},level={level}i"
                if r > 0:
                    fields += f",top={_text(top_signal(sr.explain(i)))}"
                yield f"{head('risk', tags)} {fields} {t}"
        for name, r in zip(state.node_names, state.nodes.tolist(), strict=False):
            tags = {"cluster": self.cluster, "scope": "node", "entity": name, "host": name}
            level = max(derived.get(name, 0), node_level.get(name, 0))
            yield f"{head('risk', tags)} risk={float(r)!r},level={level}i {t}"
        storm = derived.get(FLEET, 0)
        if storm or self._storm_written:  # the fleet's own point, and one more as it ends
            tags = {"cluster": self.cluster, "scope": "node", "entity": FLEET, "host": FLEET}
            yield f"{head('risk', tags)} risk={float(bool(storm))!r},level={storm}i {t}"
        self._storm_written = bool(storm)

    def deliveries(self, sent: list[Sent]) -> Iterator[str]:
        """One point per alert a message reported, tagged with the receiver."""
        for x in sent:
            m, d = x.message, x.delivery
            for a in m.alerts:
                # The receiver is a tag: two receivers of one channel must not overwrite.
                tags = {"cluster": self.cluster, "host": a.labels.get("node", ""),
                        "entity": a.labels.get("entity", ""), "channel": x.receiver_type,
                        "receiver": m.receiver}
                fields = (f"kind={_text(m.reason)},ok={format_value(d.ok)},"
                          f"alert_id={a.alert_id}i,attempts={x.attempts}i,"
                          f"detail={_text(d.detail or m.title)}")
                yield f"{head('action', tags)} {fields} {ns(m.at)}"

    def actions(self, audit: list[AuditEntry]) -> Iterator[str]:
        """Remediation's audit rows as annotations beside the scores (channel "remediation")."""
        for e in audit:
            tags = {"cluster": self.cluster, "host": e.node or "", "entity": e.node or "",
                    "channel": "remediation", "receiver": e.mode or ""}
            ok = e.event not in ("failed", "refused", "expired", "aborted", "gate_failed",
                                 "gate_error", "sweep_fail", "sweep_error", "manual_fail",
                                 "manual_error")
            fields = (f"kind={_text(e.event)},ok={format_value(ok)},"
                      f"detail={_text(e.result or e.event)}")
            yield f"{head('action', tags)} {fields} {ns(e.at)}"

    def alerts(self, changed: list[tuple[Transition, Alert]]) -> Iterator[str]:
        for tr, a in changed:
            tags = {"cluster": self.cluster, "host": a.node, "scope": str(a.scope),
                    "entity": a.entity, "level": str(tr.new)}
            top = a.explanation[0] if a.explanation else {}
            summary = (f"{top.get('rule')}: {top.get('signal')} = {top.get('value')} "
                       f"(threshold {top.get('threshold')})") if top else ""
            fields = (f"level={tr.new}i,previous={tr.old}i,"
                      f"state={_text(alert_state(tr.old, tr.new))},risk={float(tr.risk)!r},"
                      f"alert_id={a.id}i,summary={_text(summary)}")
            yield f"{head('alert', tags)} {fields} {ns(tr.at)}"

    def labels(self, labels: Sequence[StoredLabel]) -> Iterator[str]:
        """Labels learned from the fleet, at their own time; a withdrawn verdict label is
        written again with `withdrawn=true` (same series and time: InfluxDB overwrites)."""
        for lb in labels:
            tags = {"cluster": self.cluster, "kind": lb.kind, "scope": str(lb.scope),
                    "host": lb.node, "entity": lb.entity, "mode": str(lb.mode or ""),
                    "source": lb.source, "label_id": str(lb.id)}
            fields = (f"action={_text(lb.action or '')},detail={_text(lb.detail)},"
                      f"withdrawn={format_value(lb.withdrawn_at is not None)}")
            if lb.alert_id is not None:
                fields += f",alert_id={lb.alert_id}i"
            if lb.end_time is not None:
                fields += f",end_time={float(lb.end_time)!r}"
            yield f"{head('label', tags)} {fields} {ns(lb.time)}"

    def collectors(self, statuses: Mapping[tuple[str, str], CollectorStatus], at: float,
                   scrape_s: Mapping[tuple[str, str], float] | None = None) -> Iterator[str]:
        t = ns(at)
        for (host, name), st in sorted(statuses.items()):
            tags = {"cluster": self.cluster, "host": host, "collector": name}
            fields = f"up={int(st.up)}i,error={_text(st.reason if not st.up else '')}"
            if scrape_s and (host, name) in scrape_s:
                fields += f",scrape_seconds={float(scrape_s[(host, name)])!r}"
            yield f"{head('collector', tags)} {fields} {t}"


def alert_state(old: int, new: int) -> str:
    if new == 0:
        return "resolved"
    if old == 0:
        return "firing"
    return "escalated" if new > old else "deescalated"
