"""The notification pipeline's decision half (Alertmanager's dispatcher and stages): route
every alert, group it, and on each group's timer inhibit, silence, dedup against the
notification log and rate-limit, producing the messages to send. Sending is the Sender's job;
the log is written only once a receiver took a message.

Timers: a new group waits `group_wait` before its first message (so a node's GPUs arrive in
one), then is looked at every `group_interval`; an unchanged group repeats after
`repeat_interval` unless every firing alert in it is acknowledged.

A receiver that must be told again before the far end forgets (`refresh`: Alertmanager drops
an alert once its endsAt passes) also gets, every `refresh_interval_s`, one message with every
firing alert its groups released (past their group_wait, or notified before a restart): one
message per receiver per interval however many groups or alerts, outside rate limits and the
notification log. Such a receiver gets the truth: inhibitions and silences mute only the other
receivers, so its groups and refreshes hold every firing alert with its current labels (the far
end applies its own inhibitions), and it hears of a resolve only when the alert resolved.

Every message gets an id of its own and is written to the outbox before it goes to the sender;
a restarted process (or a new leader) first sends again what the outbox still holds, the same
message under the same id, with the groups concerned held until it is answered.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from service.notify.config import InhibitRule, NotifySettings
from service.notify.labels import BoardOf, no_board
from service.notify.matchers import Matcher, match_all, parse_all
from service.notify.message import AlertRef, Delivery, Message
from service.notify.notification_log import Entry, NotificationLog, Told, needs_update, news
from service.notify.outbox import Outgoing, new_id, outgoing, staged
from service.notify.ratelimit import Bucket
from service.notify.refs import labels_of, ref_of
from service.notify.routing import Route
from service.notify.silences import SilenceStore
from service.stages.alert_store import Alert, AlertStore


@dataclass(slots=True)
class Group:
    route: Route
    key: str
    labels: dict[str, str]
    created_at: float
    next_flush: float
    alerts: dict[str, AlertRef] = field(default_factory=dict)  # firing, unmuted, this flush
    muted: dict[str, str] = field(default_factory=dict)  # fingerprint -> why
    released: bool = False  # notified before a restart: refreshed without a new group_wait


@dataclass(frozen=True, slots=True)
class _Routed:
    alert_id: int
    version: tuple[object, ...]
    labels: dict[str, str]
    ref: AlertRef
    routes: tuple[tuple[Route, str, dict[str, str]], ...]  # route, group key, group labels


@dataclass(frozen=True, slots=True)
class Failure:
    """A receiver's last failed delivery for one group (cleared by the next success)."""

    error: str
    at: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    muted: dict[tuple[str, str], dict[str, str]]  # (receiver, group key) -> fp -> why
    held: frozenset[tuple[str, str]]  # groups a rate limit holds
    failures: dict[tuple[str, str], Failure]
    routes: dict[int, tuple[tuple[Route, str, dict[str, str]], ...]]  # firing alert id -> them


__all__ = ["Dispatcher", "Failure", "Group", "Outgoing", "Snapshot"]


class _Inhibitor:
    """Inhibit rules, with the firing sources of each rule indexed by its `equal` labels once
    per flush, so checking a target costs a few dictionary look-ups."""

    def __init__(self, rules: list[InhibitRule]) -> None:
        self.rules: list[tuple[tuple[Matcher, ...], tuple[Matcher, ...], tuple[str, ...], bool]]
        self.rules = [(parse_all(r.source_matchers), parse_all(r.target_matchers),
                       tuple(r.equal), r.level_at_least_target) for r in rules]
        self._index: list[dict[tuple[str, ...], list[dict[str, str]]]] = []

    def prepare(self, sources: list[dict[str, str]]) -> None:
        self._index = []
        for src_m, _, equal, _ in self.rules:
            idx: dict[tuple[str, ...], list[dict[str, str]]] = {}
            for s in sources:
                if match_all(src_m, s):
                    idx.setdefault(tuple(s.get(k, "") for k in equal), []).append(s)
            self._index.append(idx)

    def why(self, target: Mapping[str, str]) -> str | None:
        for (_, tgt_m, equal, at_least), idx in zip(self.rules, self._index, strict=True):
            cands = idx.get(tuple(target.get(k, "") for k in equal))
            if not cands or not match_all(tgt_m, target):
                continue
            for s in cands:
                if s is target:
                    continue
                if at_least and int(s.get("level", 0)) < int(target.get("level", 0)):
                    continue
                return f"inhibited by {s['alertname']} on {s.get('node', '')}"
        return None


class Dispatcher:
    def __init__(self, settings: NotifySettings, alerts: AlertStore,
                 notification_log: NotificationLog, silences: SilenceStore, *,
                 cluster: str = "default", send_resolved: Mapping[str, bool] | None = None,
                 refresh: Mapping[str, float] | None = None,
                 boards: BoardOf = no_board) -> None:
        """`boards`: the GPU board an alert is about (its entity's at its start)."""
        self.settings = settings
        self.boards = boards
        self.route = Route.build(settings.route)
        self.alerts = alerts
        self.notification_log = notification_log
        self.silences = silences
        self.cluster = cluster
        self.send_resolved = dict(send_resolved or {})
        self._inhibit = _Inhibitor(settings.inhibit_rules)
        self.groups: dict[tuple[str, str], Group] = {}
        self._buckets: dict[str, Bucket] = {}
        self._held: dict[str, dict[str, Outgoing]] = {}  # receiver -> group key -> latest
        self.inflight: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._revisit = set(notification_log.open_groups())  # groups a restart must look at again
        self._dirty = True
        self._cache: dict[int, _Routed] = {}
        self.verdict_links = settings.verdict_links()
        self.refresh = dict(refresh or {})  # receiver -> seconds between refreshes
        self._refresh_at = dict.fromkeys(self.refresh, float("-inf"))
        self.failures: dict[tuple[str, str], Failure] = {}  # (receiver, group key) -> last
        self._recover = True  # send again what the outbox holds, before anything else

    def restart(self) -> None:
        """Start over as a restarted service would, from the shared alerts and notification
        log: a replica that becomes the leader (what the old one sent is in the log, so it is
        not sent again, and the groups it left firing are looked at for their resolve)."""
        with self._lock:
            self.groups, self._held, self._cache = {}, {}, {}
            self._revisit = set(self.notification_log.open_groups())
            self._dirty = True
            self._recover = True
            # What the old leader kept in the far ends is refreshed at the first flush.
            self._refresh_at = dict.fromkeys(self.refresh, float("-inf"))

    def mark(self) -> None:
        """Alerts, acknowledgements or silences changed: regroup at the next flush."""
        self._dirty = True

    def routes_for(self, labels: Mapping[str, str]) -> list[Route]:
        return self.route.match(labels)

    def flush(self, now: float) -> list[Outgoing]:
        """Everything due at `now`. Call once per tick; cheap when no group is due."""
        with self._lock:
            due = any(now >= g.next_flush for g in self.groups.values()) or any(
                now >= at for at in self._refresh_at.values())
            if not (self._dirty or due or self._revisit or self._recover
                    or any(self._held.values())):
                return []
            self._dirty = False
            resent = self._resend(now) if self._recover else []
            current = self.alerts.recent(now - self.settings.resolved_keep_s)
            firing = [a for a in current if a.state == "firing"]
            by_fp = {a.fingerprint: a for a in current}
            routed = [self._routed(a, now) for a in firing]
            self._cache = {r.alert_id: r for r in routed}  # forget what no longer fires
            self._inhibit.prepare([r.labels for r in routed])
            for g in self.groups.values():
                g.alerts.clear()
                g.muted.clear()
            seen: set[tuple[str, str]] = set()
            for r in routed:
                muted = self._muted(r.labels, now)
                for route, key, glabels in r.routes:
                    g = self._group(route, key, glabels, now)
                    seen.add((route.receiver, key))
                    if muted and route.receiver not in self.refresh:
                        g.muted[r.ref.fingerprint] = muted
                    else:
                        g.alerts[r.ref.fingerprint] = r.ref
            self._revive(now, seen)
            out: list[Outgoing] = []
            for gid, g in list(self.groups.items()):
                if now < g.next_flush or gid in self.inflight:
                    continue
                msg = self._flush_group(gid[0], g, by_fp, now)
                if msg is not None:
                    out.append(msg)
                g.next_flush = now + g.route.group_interval_s
                if gid not in seen and msg is None:
                    del self.groups[gid]  # nothing firing and nothing left to say
            sent = self._limit(out, now)
            self.notification_log.stage([staged(o) for o in sent])
            return resent + sent + self._refreshes(now)

    def _resend(self, now: float) -> list[Outgoing]:
        """The outbox after a start: messages that were sent or being sent when the process
        stopped, unanswered. Each goes again as it was, its groups held meanwhile; one older
        than `resolved_keep_s` is history and dropped."""
        self._recover = False
        rows = self.notification_log.staged()
        old = [r.id for r in rows if r.created_at < now - self.settings.resolved_keep_s]
        self.notification_log.settle([], old)
        out = [outgoing(r) for r in rows if r.id not in old]
        for o in out:
            self.inflight.update((r, k) for r, k, _ in o.log)
        return out

    def _routed(self, a: Alert, now: float) -> _Routed:
        """An alert's labels, reference and routes, reused while its record is unchanged:
        with thousands firing, rebuilding them every changed tick was the flush's cost."""
        links = self.verdict_links
        board = self.boards(a.entity, a.started_at)
        version = (a.updated_at, a.level, a.acked_at, a.flapping, a.stale,
                   links.expiry(now) if links else 0, board)
        hit = self._cache.get(a.id)
        if hit is not None and hit.version == version:
            return hit
        lab = labels_of(a, self.cluster, board=board)
        routes = tuple((r, *r.group_key(lab)) for r in self.routes_for(lab))
        return _Routed(a.id, version, lab, ref_of(a, self.cluster, self.settings.external_url,
                                                  verdict_url=self._verdict_url(a.id, now),
                                                  board=board),
                       routes)

    def _verdict_url(self, alert_id: int, now: float, receiver: str = "receiver") -> str:
        return ("" if self.verdict_links is None
                else self.verdict_links.url(alert_id, now, receiver))

    def _bound(self, receiver: str, refs: tuple[AlertRef, ...], now: float
               ) -> tuple[AlertRef, ...]:
        """`refs` with their verdict links made out to `receiver`: a link's verdict is recorded
        by the receiver its message went to (service.notify.verdict_links)."""
        if self.verdict_links is None:
            return refs
        return tuple(replace(r, annotations={**r.annotations, "verdict_url": self._verdict_url(
            r.alert_id, now, receiver)}) if "verdict_url" in r.annotations else r for r in refs)

    def _muted(self, labels: dict[str, str], now: float) -> str | None:
        ids = self.silences.muting(labels, now)
        if ids:
            return f"silenced by {ids[0]}"
        return self._inhibit.why(labels)

    def _group(self, route: Route, key: str, labels: dict[str, str], now: float) -> Group:
        gid = (route.receiver, key)
        g = self.groups.get(gid)
        if g is None:
            g = self.groups[gid] = Group(route, key, labels, now, now + route.group_wait_s)
        return g

    def _revive(self, now: float, seen: set[tuple[str, str]]) -> None:
        """After a restart, groups the log says were firing come back so their resolve (or
        their unchanged state, which dedup then keeps quiet) is looked at."""
        if not self._revisit:
            return
        routes = {r.id: r for r in self.route.walk()}
        for receiver, key in self._revisit:
            route = routes.get(key.split(":", 1)[0])
            g = self.groups.get((receiver, key))
            if g is not None:
                g.released = True
            elif route is not None:
                self.groups[(receiver, key)] = Group(route, key, {}, now,
                                                     now + route.group_wait_s, released=True)
        self._revisit = set()

    def _flush_group(self, receiver: str, g: Group, by_fp: Mapping[str, Alert],
                     now: float) -> Outgoing | None:
        entry = self.notification_log.get(receiver, g.key)
        firing = {fp: Told(r.level, r.alert_id, r.revision, now) for fp, r in g.alerts.items()}
        resolved_refs: list[AlertRef] = []
        for fp, was in (entry.firing.items() if entry else ()):
            now_firing = firing.get(fp)
            if fp in g.muted or (now_firing is not None and now_firing.alert_id == was.alert_id):
                continue
            # The episode the receiver was told of has ended, even where the same fingerprint
            # fires again as a new one: its resolve names that episode (its start), not the
            # newest alert of the fingerprint.
            a = by_fp.get(fp)
            if a is None or a.id != was.alert_id:
                a = self.alerts.get(was.alert_id)
            if a is None:
                continue
            resolved_refs.append(ref_of(a, self.cluster, self.settings.external_url,
                                        status="resolved", level=was.level,
                                        verdict_url=self._verdict_url(a.id, now),
                                        board=self.boards(a.entity, a.started_at)))
        resolved = {r.fingerprint for r in resolved_refs}
        send_resolved = self.send_resolved.get(receiver, True)
        all_acked = bool(g.alerts) and all(
            (a := by_fp.get(fp)) is not None and a.acked_by for fp in g.alerts)
        if not needs_update(entry, firing, resolved, send_resolved=send_resolved,
                            repeat_s=g.route.repeat_interval_s, now=now, all_acked=all_acked):
            return None
        if not firing and not resolved_refs:
            return None  # what it was told about is muted now, not resolved: nothing to say
        if not firing and not send_resolved:
            # All resolved, and the receiver wants no resolves: only the log learns, so a
            # re-fire is news again (Alertmanager marks it notified without sending).
            self.notification_log.put(receiver, g.key, Entry({}, frozenset(), now))
            return None
        reason = _reason(entry, firing, resolved_refs if send_resolved else [])
        shown = tuple(sorted(g.alerts.values(), key=lambda r: (-r.level, -r.risk)))
        if send_resolved or not firing:
            shown += tuple(resolved_refs)
        labels = g.labels or _common(shown)
        shown = self._bound(receiver, shown, now)
        msg = Message(receiver, g.key, labels, shown, now, reason, self.settings.external_url,
                      id=new_id())
        told = entry.firing if entry is not None else {}
        for fp, t in firing.items():  # an unchanged alert keeps when it was first told so
            old = told.get(fp)
            if old is not None and old.same(t):
                firing[fp] = t._replace(at=old.at)
        # The resolves this message told (not every one ever told: a later episode of the same
        # instance must be able to resolve again).
        new_entry = Entry(firing, frozenset(resolved if firing else ()), now)
        return Outgoing(msg, ((receiver, g.key, new_entry),), g.route.group_interval_s)

    def _refreshes(self, now: float) -> list[Outgoing]:
        out: list[Outgoing] = []
        for rcv, interval in self.refresh.items():
            if now < self._refresh_at[rcv]:
                continue
            # Counted from now even when nothing fires: a group's first message tells the
            # receiver itself, so the first refresh is due an interval after it at the latest.
            self._refresh_at[rcv] = now + interval
            alerts: dict[str, AlertRef] = {}
            for (r, _), g in self.groups.items():
                if r == rcv and (g.released or now >= g.created_at + g.route.group_wait_s):
                    alerts.update(g.alerts)
            if not alerts:
                continue
            shown = tuple(sorted(alerts.values(), key=lambda a: (-a.level, -a.risk,
                                                                 a.fingerprint)))
            msg = Message(rcv, f"refresh:{rcv}", {}, self._bound(rcv, shown, now), now, "refresh",
                          self.settings.external_url, id=new_id())
            out.append(Outgoing(msg, (), interval))  # retries end before the next one
        return out

    def _limit(self, out: list[Outgoing], now: float) -> list[Outgoing]:
        sent: list[Outgoing] = []
        for o in out:
            rcv = o.message.receiver
            limit = self.settings.rate_limits.get(rcv)
            held = self._held.setdefault(rcv, {})
            if limit is None:
                sent.append(o)
                continue
            bucket = self._buckets.setdefault(rcv, Bucket.of(limit, now))
            if not held and bucket.take(now):
                sent.append(o)
            else:
                held[o.message.group_key] = o  # the newest state of each group wins
        for rcv, held in self._held.items():
            if held and rcv in self._buckets and self._buckets[rcv].take(now):
                sent.append(_digest(rcv, list(held.values()), now))
                held.clear()
        for o in sent:
            self.inflight.update((r, k) for r, k, _ in o.log)
        return sent

    def abandon(self, o: Outgoing) -> None:
        """The Sender gave a message up unsent (this replica stopped leading): its groups are
        no longer in flight here, and its outbox row stays for the next leader to send."""
        with self._lock:
            for r, k, _ in o.log:
                self.inflight.discard((r, k))
            self.inflight.discard((o.message.receiver, o.message.group_key))

    def done(self, o: Outgoing, ok: bool | Delivery) -> None:
        """The Sender reports back: on success the log learns what the receiver was told."""
        self.done_many([(o, ok)])

    def done_many(self, results: list[tuple[Outgoing, bool | Delivery]]) -> None:
        """Several reports in one transaction: the log learns what was delivered, and the
        outbox forgets every message that was answered or given up (the group's next flush
        sends its state then, as a new message)."""
        with self._lock:
            entries: list[tuple[str, str, Entry]] = []
            for o, got in results:
                d = got if isinstance(got, Delivery) else Delivery(ok=got)
                keys = [(r, k) for r, k, _ in o.log] or [(o.message.receiver,
                                                          o.message.group_key)]
                for key in keys:
                    self.inflight.discard(key)
                    if d.ok:
                        self.failures.pop(key, None)
                    else:
                        self.failures[key] = Failure(d.detail or "not delivered", o.message.at)
                if d.ok:
                    entries += o.log
            self.notification_log.settle(entries, [o.message.id for o, _ in results
                                                   if o.message.id])

    def snapshot(self) -> Snapshot:
        """What the API's delivery column reads, copied at once (a flush changes it)."""
        with self._lock:
            return Snapshot(
                {gid: dict(g.muted) for gid, g in self.groups.items() if g.muted},
                frozenset((r, k) for held in self._held.values() for o in held.values()
                          for r, k, _ in o.log),
                dict(self.failures), {i: r.routes for i, r in self._cache.items()})

    def held(self) -> dict[str, int]:
        with self._lock:
            return {r: len(h) for r, h in self._held.items() if h}


def _reason(entry: Entry | None, firing: dict[str, Told], resolved: list[AlertRef]) -> str:
    if entry is None:
        return "new"
    if not firing:
        return "resolved"
    if news(entry, firing):
        return "update"
    return "resolved" if resolved else "repeat"


def _common(alerts: tuple[AlertRef, ...]) -> dict[str, str]:
    if not alerts:
        return {}
    first = alerts[0].labels
    return {k: v for k, v in first.items()
            if k in ("node", "cluster") and all(a.labels.get(k) == v for a in alerts)}


def _digest(receiver: str, held: list[Outgoing], now: float) -> Outgoing:
    alerts = tuple(a for o in held for a in o.message.alerts)
    keys = tuple(o.message.group_key for o in held)
    first = held[0].message
    msg = replace(first, group_key=f"digest:{receiver}", group_labels={}, alerts=alerts, at=now,
                  reason="digest", digest_of=keys, id=new_id())
    return Outgoing(msg, tuple(x for o in held for x in o.log), max(o.budget_s for o in held))

