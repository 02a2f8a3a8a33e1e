"""What the open FleetStorm alert says, kept current while it fires: the hot nodes (the first
few with their top reasons) and every hard fault under it (a per-node alert at level 3 with a
hard finding: DBE, Xid 79, a link down, near-shutdown, ...), so the one storm page, and each
update of it, still tells the on-call every node that is really broken while the per-node
pages are muted (service.stages.fleet_alerts.storm_signals has the format).

The explanation is rewritten only when it changed. Entries are stable while nothing changes:
a hard fault keeps the values of its first sight, a named node its entry while its level,
strongest entity and top rule stay; so the notifier's revision (from the hard entries) moves
only when a fault is added or resolved. The level-3 alerts are read back from the alert store
only when some alert entered or left level 3 this tick (alone), or every tick while a storm
fires across shards (another shard's writer changes them unseen)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from models.detectors.findings import Signal
from service.stages.alert_machine import AlertMachine, Transition
from service.stages.alert_store import Alert, AlertStore
from service.stages.fleet_alerts import (
    DERIVED,
    FLEET,
    STORM,
    FleetAlerts,
    HotNode,
    hard_signal,
    storm_signals,
)
from service.stages.scoring import SCOPES, RiskState

Key = tuple[str, str]  # (entity, rule) of a hard fault


class StormReport:
    def __init__(self, fleet: FleetAlerts, alerts: AlertStore, machine: AlertMachine) -> None:
        self.fleet = fleet
        self.alerts = alerts
        self.machine = machine
        self.alert_id: int | None = None  # the open storm alert
        self.written: list[dict[str, Any]] | None = None  # its explanation as stored
        self._stored: dict[Key, Signal] = {}  # hard faults read from level-3 alerts
        self._muted = 0  # per-node level-3 alerts firing
        self._dirty = True  # read the level-3 alerts again
        self._hard: dict[Key, Signal] = {}  # every hard fault as first seen, while it lasts
        self._named: dict[str, tuple[tuple[int, str, str], HotNode]] = {}

    def apply(self, risk: RiskState, entity_ts: Sequence[Transition],
              storm: Sequence[Transition], now: float, *, shared: bool
              ) -> tuple[list[tuple[Transition, Alert]], bool]:
        """Open or resolve the storm alert (`storm`: its transitions this tick), and keep what
        it says current while it fires. Returns the storm's transitions applied, and whether
        its explanation was rewritten."""
        opening = any(t.new for t in storm)
        if not (self.fleet.storm_level or opening or storm):
            return [], False
        signals = (self.signals(risk, entity_ts, shared)
                   if self.fleet.storm_level or opening else [])
        out: list[tuple[Transition, Alert]] = []
        for t in storm:
            got = self.alerts.apply([t], {(STORM, FLEET): signals} if t.new else {})
            out += got
            if t.new:
                self.opened(got[0][1])
            else:
                self.closed()
        if self.fleet.storm_level and not opening:
            return out, self.update(signals, now) is not None
        return out, False

    def restore(self, alert: Alert) -> None:
        """The open storm alert after a restart or a take-over."""
        self.alert_id, self.written = alert.id, list(alert.explanation)
        self._dirty = True

    def closed(self) -> None:
        self.alert_id = self.written = None
        self._hard, self._named, self._dirty = {}, {}, True

    def signals(self, risk: RiskState, changed: Iterable[Transition], shared: bool
                ) -> list[Signal]:
        """The storm's explanation now. `changed`: this tick's per-entity transitions;
        `shared`: other writers change alerts too (read the level-3 alerts every tick)."""
        if shared or any(t.new == 3 or t.old == 3 for t in changed if not t.derived):
            self._dirty = True
        if self._dirty:
            self._read_level3()
        now_hard = dict(self._stored)
        for key, sig in self._live_hard(risk):
            now_hard.setdefault(key, sig)
        self._hard = {k: self._hard.get(k, s) for k, s in sorted(now_hard.items())}
        s = self.fleet.storm
        return storm_signals(self.fleet.count, s.window_s, self._hot(risk, s.names),
                             list(self._hard.values()), self._muted, s.names)

    def update(self, signals: list[Signal], now: float) -> Alert | None:
        """Store `signals` as the open storm's explanation if they differ from what is stored;
        the alert rewritten, or None when nothing was written."""
        expl = [s.as_dict() for s in signals]
        if self.alert_id is None:
            found = [a for a in self.alerts.find(entity=FLEET, state="firing")
                     if a.name == STORM]
            if not found:
                return None
            self.restore(found[0])
        if expl == self.written:
            return None
        assert self.alert_id is not None
        got = self.alerts.set_explanation(self.alert_id, expl, now)
        if got is None:  # resolved meanwhile (another replica): found again next time
            self.alert_id = self.written = None
            return None
        self.written = list(got.explanation)
        return got

    def opened(self, alert: Alert) -> None:
        self.alert_id, self.written = alert.id, list(alert.explanation)

    def _read_level3(self) -> None:
        stored: dict[Key, Signal] = {}
        muted = 0
        for a in self.alerts.find(level=3, state="firing", limit=1_000_000):
            if a.level != 3 or a.name in DERIVED:
                continue
            muted += 1
            for e in a.explanation:
                if e.get("hard") and isinstance(e.get("risk"), int | float) and e["risk"] > 0:
                    stored.setdefault((a.entity, str(e.get("rule"))), hard_signal(a.entity, e))
        self._stored, self._muted, self._dirty = stored, muted, False

    def _live_hard(self, risk: RiskState) -> Iterable[tuple[Key, Signal]]:
        """Hard findings of entities at level 3 now, whose alert may have reached level 3 on
        softer signals before the fault (its stored explanation does not show it)."""
        for scope in SCOPES:
            sr = risk.scopes.get(scope)
            if sr is None:
                continue
            n = len(sr.risk)
            level = self.machine.level(scope)[:n]
            entities = risk.store[scope].entities
            for i in np.flatnonzero(sr.hard[:len(level)] & (level == 3)).tolist():
                key = entities[i].key
                for sig in sr.explain(i):
                    if sig.hard:
                        yield (key, sig.rule), hard_signal(key, sig.as_dict())

    def _hot(self, risk: RiskState, names: int) -> list[HotNode]:
        """The first `names` hot nodes of this shard with their strongest entity's top
        signal; an entry is kept while its level, entity and top rule stay the same."""
        wanted = self.fleet.hot[:names]
        pos = {n: i for i, n in enumerate(risk.node_names)}
        idx = np.array([pos[n] for n in wanted if n in pos], np.int64)
        best: dict[int, tuple[float, int, Any]] = {}  # node slot -> (score, level, scope/slot)
        for scope in SCOPES:
            sr = risk.scopes.get(scope)
            if sr is None or not len(idx):
                continue
            n = len(sr.risk)
            level = self.machine.level(scope)[:n]
            n = len(level)
            node_of = risk.store[scope].node_of[:n]
            for i in np.flatnonzero(np.isin(node_of, idx)).tolist():
                score = float(level[i]) + float(sr.risk[i]) / 2  # level first, then risk
                node = int(node_of[i])
                if node not in best or score > best[node][0]:
                    best[node] = (score, int(level[i]), (scope, i))
        out: list[HotNode] = []
        named: dict[str, tuple[tuple[int, str, str], HotNode]] = {}
        for name in wanted:
            hit = best.get(pos.get(name, -1))
            node_level = hit[1] if hit else 0
            entity, top = "", None
            if hit is not None:
                scope, i = hit[2]
                sigs = risk.scopes[scope].explain(i)
                if sigs:
                    entity, top = risk.store[scope].entities[i].key, sigs[0]
            key = (node_level, entity, top.rule if top else "")
            prev = self._named.get(name)
            h = prev[1] if prev is not None and prev[0] == key else HotNode(
                name, node_level, entity, top)
            named[name] = (key, h)
            out.append(h)
        self._named = named
        return out


def storm_of(open_alerts: Iterable[Alert]) -> Alert | None:
    return next((a for a in open_alerts if a.name == STORM), None)

