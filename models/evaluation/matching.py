"""Event-level matching of alerts to failures (docs/evaluation.md, "Matching alerts to failures").

An alert that crossed level L is a true positive for a failure when it is on an entity that can
predict it (events.match_keys) and the failure happens inside the view's lead window:
min_lead <= t_failure - t_alert <= max_lead (Salfner et al.: Δt_w and Δt_l + Δt_p). Several
alerts before one failure count once; the earliest gives the lead time. Every other alert is
classified, in this order:

- late: on the failing entity, but less than the minimum warning before the failure (a correct
  call that came too late to act on; neither a hit nor a false alarm);
- post-failure: after a related failure, until the grace ends (max of failure + grace and the
  repair time): detections of the failure, not predictions;
- false alarm: anything else, including alerts more than max_lead before a failure.

Views (docs/evaluation.md): watch (level >= 1) [5 min, 7 d], warning (>= 2) [5 min, 24 h],
critical (3) [0, 1 h], and an "any" view (level >= 1) [0, 7 d] that also credits last-moment
calls.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from collectors.catalog import Scope
from models.evaluation.events import AlertRecord, Failure, Trap, family, match_keys

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0
MIN_WARNING_S = 5 * MINUTE  # Salfner et al.'s Δt_w: time to act (drain at the next checkpoint)
GRACE_S = DAY  # post-failure grace, extended to the repair when that is later


@dataclass(frozen=True, slots=True)
class View:
    name: str
    level: int  # alerts that crossed this level (an alert reaching L counts for every L' <= L)
    min_lead_s: float
    max_lead_s: float


def default_views(min_warning_s: float = MIN_WARNING_S) -> tuple[View, ...]:
    return (
        View("watch", 1, min_warning_s, 7 * DAY),
        View("warning", 2, min_warning_s, DAY),
        View("critical", 3, 0.0, HOUR),
        View("any", 1, 0.0, 7 * DAY),
    )


@dataclass(slots=True)
class ViewMatch:
    view: View
    alerts: int = 0
    true_alerts: int = 0
    late: int = 0
    post_failure: int = 0
    first_alert: dict[int, float] = field(default_factory=dict)  # failure index -> alert time
    false_alarms: list[AlertRecord] = field(default_factory=list)

    def lead_s(self, i: int, failures: Sequence[Failure]) -> float | None:
        t = self.first_alert.get(i)
        return None if t is None else failures[i].time - t


class FailureIndex:
    """Failures indexed by the keys alerts look them up with."""

    def __init__(self, failures: Sequence[Failure], grace_s: float = GRACE_S) -> None:
        self.failures = failures
        self.grace_s = grace_s
        self._by_key: dict[str, tuple[list[float], list[int]]] = {}
        self._by_related: dict[str, list[int]] = defaultdict(list)
        order = sorted(range(len(failures)), key=lambda i: failures[i].time)
        for i in order:
            f = failures[i]
            for key in (f.entity, f.peer) if f.peer else (f.entity,):
                times, idx = self._by_key.setdefault(key, ([], []))
                times.append(f.time)
                idx.append(i)
            if f.scope is Scope.NODE:
                self._by_related[f"node:{f.node}"].append(i)
            else:
                if f.scope in (Scope.PSU, Scope.FAN):  # the node's redundancy alert follows
                    self._by_related[f.node].append(i)
                for key in (f.entity, f.peer) if f.peer else (f.entity,):
                    self._by_related[family(key, f.scope)].append(i)

    def grace_end(self, f: Failure) -> float:
        return max(f.time + self.grace_s, f.repaired if f.repaired is not None else f.time)

    def between(self, key: str, lo: float, hi: float) -> list[int]:
        """Failures of entity `key` with lo <= time <= hi."""
        hit = self._by_key.get(key)
        if hit is None:
            return []
        times, idx = hit
        return idx[bisect.bisect_left(times, lo):bisect.bisect_right(times, hi)]

    def related_to(self, a: AlertRecord) -> list[int]:
        return (self._by_related.get(family(a.entity, a.scope), [])
                + self._by_related.get(f"node:{a.node}", []))

    def in_grace(self, a: AlertRecord) -> bool:
        return any(self.failures[i].time <= a.time <= self.grace_end(self.failures[i])
                   for i in self.related_to(a))


def match(alerts: Sequence[AlertRecord], failures: Sequence[Failure], view: View,
          grace_s: float = GRACE_S, index: FailureIndex | None = None) -> ViewMatch:
    ix = index if index is not None else FailureIndex(failures, grace_s)
    out = ViewMatch(view)
    for a in alerts:
        if not a.crosses(view.level):
            continue
        out.alerts += 1
        keys = match_keys(a.entity, a.scope, a.node)
        hits = [i for k in keys
                for i in ix.between(k, a.time + view.min_lead_s, a.time + view.max_lead_s)]
        if hits:
            out.true_alerts += 1
            for i in hits:
                if a.time < out.first_alert.get(i, float("inf")):
                    out.first_alert[i] = a.time
        elif view.min_lead_s > 0 and any(ix.between(k, a.time, a.time + view.min_lead_s)
                                         for k in keys):
            out.late += 1
        elif ix.in_grace(a):
            out.post_failure += 1
        else:
            out.false_alarms.append(a)
    return out


def detection_delays(alerts: Sequence[AlertRecord], failures: Sequence[Failure], level: int = 1,
                     grace_s: float = GRACE_S) -> dict[int, float]:
    """Failure index -> seconds from the failure to the first related alert that crossed
    `level` at or after it (within the grace); failures never detected are absent."""
    ix = FailureIndex(failures, grace_s)
    out: dict[int, float] = {}
    for a in sorted(alerts, key=lambda r: r.time):
        if not a.crosses(level):
            continue
        for i in ix.related_to(a):
            f = failures[i]
            if i not in out and f.time <= a.time <= ix.grace_end(f):
                out[i] = a.time - f.time
    return out


def trap_hits(alerts: Sequence[AlertRecord], traps: Sequence[Trap], run_end: float,
              level: int = 1, margin_s: float = HOUR) -> list[bool]:
    """Per trap: did a related alert cross `level` between its start and its end + margin
    (open traps run to run_end)? The margin catches rules that fire on an hour's rollup."""
    by_family: dict[str, list[float]] = defaultdict(list)
    by_node: dict[str, list[float]] = defaultdict(list)
    for a in alerts:
        if a.crosses(level):
            by_family[family(a.entity, a.scope)].append(a.time)
            by_node[a.node].append(a.time)
    for times in (*by_family.values(), *by_node.values()):
        times.sort()
    out = []
    for tr in traps:
        times = by_node[tr.node] if tr.scope is Scope.NODE else by_family[
            family(tr.entity, tr.scope)]
        end = (tr.end if tr.end is not None else run_end) + margin_s
        j = bisect.bisect_left(times, tr.start)
        out.append(j < len(times) and times[j] <= end)
    return out
