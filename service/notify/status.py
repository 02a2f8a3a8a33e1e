"""What happened to an alert at each receiver it routes to, for the API and the console:

- `sent`: the receiver holds the alert's current state (for a firing alert: its level and
  hard evidence, `sent_at`/`level_sent` say when it was first told so; for a resolved one:
  nothing is owed, the resolve was told or was not wanted; `sent_at`: the group's message
  after the resolve, where the log still says so);
- `pending`: group_wait, group_interval or a retry is under way;
- `muted` (`why`: "inhibited by FleetStorm on *") or `silenced` (`silence_id`): our own
  receivers only, a receiver that gets the truth (Alertmanager) is never muted;
- `failed`: the last delivery failed (`error`, `failed_at`) and nothing got through since;
- `held`: a rate limit holds it for the receiver's next digest.

`level_sent`/`sent_at` stay on a muted or pending row: what the receiver got before.
An index is built once per request from one read of the notification log and a snapshot of
the dispatcher, then answers per alert with a few look-ups."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from service.notify.dispatcher import Dispatcher
from service.notify.notification_log import Entry, Told
from service.notify.refs import labels_of, revision_of
from service.stages.alert_store import Alert

SILENCED = "silenced by "
DeliveryState = Literal["sent", "pending", "muted", "silenced", "failed", "held"]


@dataclass(frozen=True, slots=True)
class DeliveryStatus:
    receiver: str
    state: DeliveryState
    why: str = ""
    silence_id: str | None = None
    sent_at: float | None = None
    level_sent: int | None = None
    error: str | None = None
    failed_at: float | None = None


class DeliveryIndex:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.entries: dict[tuple[str, str], Entry] = dispatcher.notification_log.entries()
        snap = dispatcher.snapshot()
        self.muted, self.held, self.failures = snap.muted, snap.held, snap.failures
        self.routed = snap.routes
        self.truth = set(dispatcher.refresh)

    def of(self, a: Alert) -> list[DeliveryStatus]:
        """One row per receiver the alert routes to (the first route, where several do)."""
        routes = self.routed.get(a.id) if a.state == "firing" else None
        if routes is None:
            level = a.level if a.state == "firing" else a.peak_level
            labels = labels_of(a, self.dispatcher.cluster, level,
                               self.dispatcher.boards(a.entity, a.started_at))
            routes = tuple((r, *r.group_key(labels)) for r in self.dispatcher.routes_for(labels))
        out: dict[str, DeliveryStatus] = {}
        for route, key, _ in routes:
            if route.receiver not in out:
                out[route.receiver] = self._one(a, route.receiver, key)
        return list(out.values())

    def _one(self, a: Alert, receiver: str, key: str) -> DeliveryStatus:
        entry = self.entries.get((receiver, key))
        fp = a.fingerprint
        told = entry.firing.get(fp) if entry is not None else None
        if told is not None and told.alert_id != a.id:
            told = None  # an earlier episode's
        base = DeliveryStatus(receiver, "pending", sent_at=told.at if told else None,
                              level_sent=told.level if told else None)
        if a.state != "firing":
            if told is None:  # nothing owed: the resolve was told (or not wanted)
                # The group's first message after the resolve told it (the log keeps the last).
                after = (entry is not None and a.resolved_at is not None
                         and entry.sent_at >= a.resolved_at)
                return DeliveryStatus(receiver, "sent", sent_at=entry.sent_at
                                      if after and entry is not None else None)
            return self._owed(base, key)
        mute = None if receiver in self.truth else self.muted.get((receiver, key), {}).get(fp)
        if mute is not None and mute.startswith(SILENCED):
            return replace(base, state="silenced", silence_id=mute.removeprefix(SILENCED))
        if mute is not None:
            return replace(base, state="muted", why=mute)
        if told is not None and told.same(Told(a.level, a.id, revision_of(a.explanation))):
            refresh = self.failures.get((receiver, f"refresh:{receiver}"))
            if refresh is not None:  # the far end may let it expire
                return replace(base, state="failed", error=refresh.error, failed_at=refresh.at)
            return replace(base, state="sent")
        return self._owed(base, key)

    def _owed(self, base: DeliveryStatus, key: str) -> DeliveryStatus:
        """A state the receiver does not have yet: held, failed or on its way."""
        if (base.receiver, key) in self.held:
            return replace(base, state="held", why="rate limited: in the next digest")
        failed = self.failures.get((base.receiver, key))
        if failed is not None:
            return replace(base, state="failed", error=failed.error, failed_at=failed.at)
        return base
