"""The demo's scorecard: every injected failure (alerted or not, at which level, with what lead)
and every false alarm, from the demo's labels and the alert machine's transitions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from models.evaluation.events import AlertRecord, truth_from_labels
from models.evaluation.matching import DAY, View, match


def alert_records(transitions: Iterable[Any]) -> list[AlertRecord]:
    """Escalations from alert-machine Transitions (duck-typed: at, entity, scope, node, old,
    new); AlertRecords pass through."""
    out = []
    for t in transitions:
        if isinstance(t, AlertRecord):
            out.append(t)
        elif t.new > t.old:
            out.append(AlertRecord(t.at, t.entity, t.scope, t.node, t.new, t.old))
    return out


def summarize_demo(labels: Iterable[Any], transitions: Iterable[Any], start: float,
                   end: float) -> list[dict[str, Any]]:
    """One row per injected failure in [start, end] (alerted or not, the highest level that
    fired in time, lead time in seconds) and one per false alarm, in time order. It uses the
    any-level window [0, 7 d]: a demo's precursors are short, and a lead of 0 shows plainly
    that the alert was a detection, not a prediction."""
    failures = truth_from_labels(labels).failures
    alerts = [a for a in alert_records(transitions) if start <= a.time <= end]
    best: dict[int, int] = {}
    for level in (1, 2, 3):
        for i in match(alerts, failures, View("demo", level, 0.0, 7 * DAY)).first_alert:
            best[i] = level
    first = match(alerts, failures, View("demo", 1, 0.0, 7 * DAY))
    rows: list[dict[str, Any]] = [
        {"kind": "failure", "time": f.time, "entity": f.entity, "mode": f.mode,
         "precursor": f.precursor, "alerted": i in best, "level": best.get(i),
         "lead_s": first.lead_s(i, failures)}
        for i, f in enumerate(failures) if start <= f.time <= end]
    rows += [{"kind": "false_alarm", "time": a.time, "entity": a.entity, "level": a.level,
              "rule": a.rule} for a in first.false_alarms]
    return sorted(rows, key=lambda r: float(r["time"]))
