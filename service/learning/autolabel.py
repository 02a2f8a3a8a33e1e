"""Labels that write themselves: each scoring tick's hard evidence of a failure becomes a failure
label with its entity, mode and time, and the evidence clearing (a GPU reset, a link back up)
or a drained node returned to service becomes a repair label (docs/learning.md).

One label per failure, not per tick: an episode is keyed by (entity, mode) and stays open while
any rule of that mode fires on the entity, so a DBE, the Xid 48 beside it and the Xid 94 after
it are one HBM failure. Open episodes live in the label store, so a restart does not label a
rule that is still firing a second time. An episode closes only on fresh data that no longer
shows it: a GPU that fell off the bus keeps its label open while it is silent, and a store just
warm-started does not call everything repaired."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from collectors.catalog import Scope
from collectors.frames import Entity
from collectors.labels import FailureMode
from models.detectors.failure_modes import RULE_REPAIRS, mode_of
from service.stages.alert_store import AlertStore
from service.stages.fleet_alerts import MISSING
from service.stages.label_store import LabelStore, NewLabel, StoredLabel
from service.stages.scoring import SCOPES as SCORED_SCOPES
from service.stages.windows import ScopeWindows
from service.tick import TickResult

log = logging.getLogger(__name__)

# Every scored scope: the chassis rules (a failed supply or fan, a host memory error) and a
# failed diagnostic label the node's own entities as the GPU rules label GPUs.
SCOPES = SCORED_SCOPES
CERTAIN = 0.999  # a hard rule at full certainty (the fusion's own bar for skipping the wait)
# An episode ends once its evidence has been clear for this long, so a link that flaps down
# and up, or a temperature dancing at the shutdown margin, is one failure and not a failure and
# a repair per flap. The repair is dated when the evidence first cleared.
CLEAR_FOR_S = 600.0
Key = tuple[str, str]  # (entity, mode)


class AutoLabeller:
    """A stage of the tick, after alerts and remediation: hard failures and repairs into the
    label store (which hands them to the tick's result)."""

    def __init__(self, labels: LabelStore, alerts: AlertStore, stale_after_s: float) -> None:
        self.labels = labels
        self.alerts = alerts
        self.stale_after_s = stale_after_s
        self._open: dict[Key, StoredLabel] = {
            (lb.entity, str(lb.mode)): lb for lb in labels.open_episodes()}
        self._clear_since: dict[Key, float] = {}
        self.added = 0  # labels written since start (/metrics)

    def observe(self, tick: TickResult, swapped: dict[str, float] | None = None,
                boards: Mapping[str, str] | None = None) -> None:
        """`swapped`: entities proved a new device since the last tick, with when: their
        persistent counters restarted lower (service.stages.ingest) or their board's serial or
        UUID changed (service.stages.gpu_identity; `boards` says how, for those)."""
        now = tick.at
        alert_of = {a.entity: a.id for _, a in tick.changed if a.state == "firing"}
        pending: dict[Key, NewLabel] = {}
        firing: set[Key] = set()
        fresh: dict[str, bool] = {}
        for scope in SCOPES:
            sr = tick.risk.scopes.get(scope)
            if sr is None:
                continue
            sw = tick.risk.store[scope]
            n = len(sr.risk)
            for f in sr.findings:
                if not f.hard or not len(f.risk):
                    continue
                for i in np.flatnonzero(f.risk[:n] >= CERTAIN).tolist():
                    mode = mode_of(f.rule, float(f.value[i]))
                    if mode is None:
                        continue
                    e = sw.entities[i]
                    key = (e.key, str(mode))
                    firing.add(key)
                    if key not in self._open and key not in pending:
                        pending[key] = NewLabel(
                            "failure", now, e.node, e.key, scope, f"rule:{f.rule}", mode=mode,
                            detail=f.signal_of(i), alert_id=self._alert(e.key, alert_of),
                            episode=True)
            for key, lb in self._open.items():
                if lb.scope is scope and key not in firing:
                    fresh[key[0]] = _fresh(sw, lb.entity, now, self.stale_after_s)
        for t in tick.transitions:
            if t.alertname != MISSING:
                continue
            key = (t.entity, str(FailureMode.M2_GPU_HARD))
            if t.new > 0 and t.old == 0:
                firing.add(key)
                if key not in self._open and key not in pending:
                    pending[key] = NewLabel(
                        "failure", now, t.node, t.entity, Scope.GPU, "missing",
                        mode=FailureMode.M2_GPU_HARD, episode=True,
                        detail="the GPU stopped reporting while its node still reports",
                        alert_id=self._alert(t.entity, alert_of))
            elif t.new > 0:
                firing.add(key)
            elif t.new == 0:
                fresh[t.entity] = True  # it reports again: the store saw it this round
        new = list(pending.values())
        close: list[StoredLabel] = []
        for entity, at in (swapped or {}).items():
            new += self._swap(entity, at, close, (boards or {}).get(entity))
        for key, lb in self._open.items():
            if lb in close:
                continue
            if key in firing:
                self._clear_since.pop(key, None)
                continue
            if not fresh.get(lb.entity, False):
                continue  # no news: a silent entity is no evidence of a repair
            since = self._clear_since.setdefault(key, now)
            if now - since < CLEAR_FOR_S:
                continue
            close.append(lb)
            action = "reported_again" if lb.source == "missing" else RULE_REPAIRS.get(
                lb.source.removeprefix("rule:"))
            if action is not None:
                new.append(NewLabel("repair", since, lb.node, lb.entity, lb.scope, lb.source,
                                    mode=lb.mode, action=action, alert_id=lb.alert_id,
                                    detail=f"the evidence of label {lb.id} cleared"))
        new += [NewLabel("repair", e.at, e.node, e.node, Scope.NODE, "remediation",
                         action="returned_to_service", detail=f"drain {e.action_id} released")
                for e in tick.audit
                if e.event == "released" and not e.dry_run and e.node is not None]
        if not new and not close:
            return
        stored = self.labels.add(new, now, close=[lb.id for lb in close])
        for lb in close:
            del self._open[(lb.entity, str(lb.mode))]
            self._clear_since.pop((lb.entity, str(lb.mode)), None)
        for lb in stored:
            if lb.open:
                self._open[(lb.entity, str(lb.mode))] = lb
            log.info("label %s %s %s (%s)", lb.kind, lb.entity, lb.mode or lb.action, lb.source)
        self.added += len(stored)

    def _swap(self, entity: str, at: float, close: list[StoredLabel],
              board: str | None = None) -> list[NewLabel]:
        """A device replaced under the same name: the repair of its open failures (closed
        now; a GPU's include its NVLink links'), or a repair of its own when none was open.
        `board`: how its identity changed (service.stages.gpu_identity), when that told."""
        e = Entity.parse(entity)
        action = "gpu_swapped" if e.scope is Scope.GPU else "device_replaced"
        links = entity + ":" if e.scope is Scope.GPU else None
        mine = [lb for lb in self._open.values() if lb.entity == entity or (
            links is not None and lb.entity.startswith(links))]
        close += mine
        source = "identity" if board else "counters"
        detail = (f"another board in the slot: {board}" if board else
                  "persistent counters restarted lower: a new device under this name")
        if not mine:
            return [NewLabel("repair", at, e.node, entity, e.scope, source, action=action,
                             detail=detail)]
        return [NewLabel("repair", at, lb.node, lb.entity, lb.scope, source, mode=lb.mode,
                         action=action, alert_id=lb.alert_id, detail=detail) for lb in mine]

    def _alert(self, entity: str, alert_of: dict[str, int]) -> int | None:
        """The entity's open alert: the hard rule fired one this tick, or one was open already
        (the model warned first)."""
        if entity in alert_of:
            return alert_of[entity]
        found = self.alerts.find(entity=entity, state="firing", limit=1)
        return found[0].id if found else None


def _fresh(sw: ScopeWindows, entity: str, now: float, stale_after_s: float) -> bool:
    """Whether the store holds data of the entity newer than the stale bound: only then does a
    rule's silence mean the condition cleared."""
    slot = sw.slot(Entity.parse(entity))
    if slot is None:
        return False
    last = sw.last_ts[slot]
    return bool(np.isfinite(last).any()) and now - float(np.nanmax(last)) <= stale_after_s
