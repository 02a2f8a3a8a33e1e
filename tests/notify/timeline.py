"""Timeline harness for the notification pipeline on an injected clock (reference section 1.11:
"push at t, expect between t1 and t2", against a fake clock instead of real seconds).

A `Timeline` holds a real AlertStore, notification log and silence store in one shared-state
database (a SQLite file, or a PostgreSQL schema: the `state_target` fixture gives either),
the Dispatcher and an inline Sender (background=False, so a flush delivers before it returns)
built by `build_notification`, and receivers that record what they get. Times are seconds
relative to `T0`; the clock ticks every `step_s` like the scheduler, and an alert change at `t`
lands before the tick at `t` (the pipeline applies transitions, then flushes)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collectors.catalog import Scope
from collectors.frames import Entity
from service.notify.build import Notification, build_notification
from service.notify.config import NotifySettings
from service.notify.message import Delivery, Message, Notifier
from service.notify.notification_log import Entry
from service.notify.sender import Sender, Sent
from service.stages.alert_machine import AlertMachine, Transition
from service.stages.alert_store import ALERTNAMES, Alert, AlertStore
from service.storage.state_db import StateTarget

T0 = 1_700_000_000.0  # a plain float, far from zero so no timestamp is falsy by accident
STEP_S = 5.0  # the scoring tick
EPS = 1e-6


def notify_settings(*, routes: Sequence[Mapping[str, Any]] = (),
                    receivers: Mapping[str, bool] | None = None, group_wait_s: float = 30.0,
                    group_interval_s: float = 300.0, repeat_interval_s: float = 3600.0,
                    **extra: Any) -> NotifySettings:
    """Root route `record`, grouped by node, with small timers; `routes` are its children
    (RouteSettings as dicts); `receivers` maps a receiver name to its send_resolved (their type
    is never built: the timeline hands its own receivers over)."""
    return NotifySettings.model_validate({
        "receivers": [{"name": n, "type": "webhook", "send_resolved": sr,
                       "config": {"url": "http://127.0.0.1:9/never-called"}}
                      for n, sr in (receivers or {}).items()],
        "route": {"receiver": "record", "group_by": ["node"], "group_wait_s": group_wait_s,
                  "group_interval_s": group_interval_s,
                  "repeat_interval_s": repeat_interval_s, "routes": list(routes)},
        **extra,
    })


class Recorder:
    """A receiver that keeps every message it is given and always accepts."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.messages: list[Message] = []

    async def notify(self, msg: Message) -> Delivery:
        self.messages.append(msg)
        return Delivery(ok=True, detail="recorded")


class Flaky:
    """A receiver that answers the scripted failures first, then accepts. `probe`, when set,
    is called on every attempt (to look at the notification log mid-delivery)."""

    def __init__(self, name: str, failures: Iterable[Delivery]) -> None:
        self.name = name
        self.script = list(failures)
        self.attempts: list[Message] = []
        self.messages: list[Message] = []  # the delivered ones
        self.probe: Callable[[Message], object] | None = None
        self.probed: list[object] = []

    async def notify(self, msg: Message) -> Delivery:
        self.attempts.append(msg)
        if self.probe is not None:
            self.probed.append(self.probe(msg))
        if self.script:
            return self.script.pop(0)
        self.messages.append(msg)
        return Delivery(ok=True, detail="accepted")


@dataclass(frozen=True, slots=True)
class Seen:
    """A message as the tests compare it: relative time, reason, firing entity -> level,
    resolved entities."""

    at: float
    reason: str
    firing: dict[str, int]
    resolved: frozenset[str] = frozenset()
    group: str = field(default="", compare=False)

    @staticmethod
    def of(msg: Message, t0: float = T0) -> Seen:
        return Seen(msg.at - t0, msg.reason,
                    {a.labels["entity"]: a.level for a in msg.firing},
                    frozenset(a.labels["entity"] for a in msg.resolved), msg.group_key)


def seen(messages: Iterable[Message], t0: float = T0) -> list[Seen]:
    return [Seen.of(m, t0) for m in messages]


def entity_node(entity: str) -> tuple[Scope, str]:
    e = Entity.parse(entity)
    return e.scope, e.node


class Timeline:
    """One service process's notification half over the shared state (see the module doc).
    `start`: relative time of the first tick (a restarted process starts later)."""

    def __init__(self, db: StateTarget, settings: NotifySettings,
                 receivers: Sequence[Notifier] = (), *, start: float = 0.0, t0: float = T0,
                 step_s: float = STEP_S, cluster: str = "c1") -> None:
        self.db = db
        self.settings = settings
        self.t0 = t0
        self.step_s = step_s
        self.next = start  # relative time of the next tick
        self.alerts = AlertStore(db)
        rcv: dict[str, Notifier] = {r.name: r for r in receivers}
        rcv.setdefault("record", Recorder("record"))
        self.receivers = rcv
        self.notification: Notification = build_notification(
            settings, self.alerts, db, cluster=cluster, receivers=rcv, background=False)
        # The same inline Sender, with a sleep that only records: retries take no real time.
        self.sleeps: list[float] = []
        self.notification.sender = Sender(
            rcv, self.notification.dispatcher, retry_initial_s=settings.retry_initial_s,
            retry_max_s=settings.retry_max_s, timeout_s=settings.send_timeout_s,
            background=False, sleep=self._sleep)
        self.deliveries: list[Sent] = []
        self.feeds: list[Callable[[Timeline, float], None]] = []  # run before each flush
        # (alertname, entity) -> level, so transitions carry the right `old`.
        self.levels: dict[tuple[str, str], int] = {
            (a.name, a.entity): a.level for a in self.alerts.open_alerts()}

    async def _sleep(self, s: float) -> None:
        self.sleeps.append(s)

    # -- the clock ---------------------------------------------------------------------------

    def abs(self, t: float) -> float:
        return self.t0 + t

    def _tick(self) -> None:
        t = self.next
        for feed in self.feeds:
            feed(self, t)
        self.notification.flush(self.abs(t))
        self.deliveries += self.notification.sender.drain()
        self.next = t + self.step_s

    def advance(self, t: float) -> None:
        """Every tick strictly before `t`."""
        while self.next < t - EPS:
            self._tick()

    def run(self, until: float) -> None:
        """Every tick up to and including `until`."""
        while self.next <= until + EPS:
            self._tick()

    # -- alert changes -----------------------------------------------------------------------

    def apply(self, transitions: list[Transition]) -> list[tuple[Transition, Alert]]:
        """What Pipeline.tick does with the machine's transitions: store, then mark."""
        if not transitions:
            return []
        for t in transitions:
            self.levels[(t.alertname or _default_name(t.scope), t.entity)] = t.new
        out = self.alerts.apply(transitions, {})
        self.notification.dispatcher.mark()
        return out

    def set_level(self, entity: str, level: int, at: float, *, risk: float | None = None,
                  alertname: str = "", scope: Scope | None = None,
                  node: str | None = None) -> Alert:
        """The alert of `entity` moves to `level` (0 resolves it) at relative time `at`."""
        self.advance(at)
        if scope is None or node is None:
            sc, nd = entity_node(entity)
            scope, node = scope or sc, node or nd
        name = alertname or _default_name(scope)
        old = self.levels.get((name, entity), 0)
        r = risk if risk is not None else (0.0 if level == 0 else 0.3 * level)
        ((_, alert),) = self.apply([Transition(scope, -1, entity, node, old, level,
                                               self.abs(at), r, alertname=alertname)])
        return alert

    def apply_at(self, at: float, transitions: list[Transition]) -> list[tuple[Transition, Alert]]:
        """Transitions made at relative time `at` (their own `at` should say the same)."""
        self.advance(at)
        return self.apply(transitions)

    def fire(self, entity: str, level: int, at: float) -> Alert:
        return self.set_level(entity, level, at)

    def resolve(self, entity: str, at: float) -> Alert:
        return self.set_level(entity, 0, at)

    def ack(self, alert_id: int, at: float, actor: str = "alice",
            comment: str = "looking") -> Alert:
        self.advance(at)
        a = self.alerts.ack(alert_id, actor, comment, self.abs(at))
        self.notification.dispatcher.mark()
        return a

    # -- what came out -----------------------------------------------------------------------

    def messages(self, receiver: str) -> list[Message]:
        """What a Recorder or Flaky receiver was given (delivered), in order."""
        r = self.receivers[receiver]
        assert isinstance(r, Recorder | Flaky)
        return r.messages

    def seen(self, receiver: str) -> list[Seen]:
        return seen(self.messages(receiver), self.t0)

    def entry(self, receiver: str, group_key: str) -> Entry | None:
        return self.notification.notification_log.get(receiver, group_key)

    def close(self) -> None:
        self.notification.close()
        self.alerts.close()


def _default_name(scope: Scope) -> str:
    return ALERTNAMES.get(scope, "FailureRisk")


class MachineFeed:
    """Drives a real AlertMachine for one scope with a risk per entity per tick, the way
    Pipeline.tick does: step, store the transitions, record flag changes, mark."""

    def __init__(self, machine: AlertMachine, entities: Sequence[Entity],
                 risk: Callable[[float], Sequence[float]], *,
                 hard: Callable[[float], Sequence[bool]] | None = None) -> None:
        self.machine = machine
        self.entities = list(entities)
        self.scope = self.entities[0].scope
        self.risk = risk
        self.hard = hard
        self.transitions: list[Transition] = []
        self.flapping_at: dict[float, list[bool]] = {}  # relative time -> flapping per entity

    def __call__(self, tl: Timeline, t: float) -> None:
        n = len(self.entities)
        r = np.asarray(self.risk(t), np.float32)
        h = np.asarray(self.hard(t) if self.hard else [False] * n, bool)
        ts = self.machine.step(self.scope, r, h, tl.abs(t), self.entities)
        self.transitions += ts
        tl.apply(ts)
        flags = self.machine.flag_changes
        for f in flags:
            tl.alerts.set_flags(f.entity, flapping=f.flapping, stale=f.stale, at=tl.abs(t))
        if flags:
            tl.notification.dispatcher.mark()
        self.flapping_at[t] = [bool(x) for x in self.machine.flapping(self.scope)[:n]]
