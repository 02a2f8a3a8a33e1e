"""Alert records as the notifier sees them: labels that identify, annotations that describe."""

from __future__ import annotations

from service.notify.message import LEVEL_SEVERITY, AlertRef, Status
from service.stages.alert_store import Alert


def labels_of(a: Alert, cluster: str, level: int | None = None) -> dict[str, str]:
    lv = a.level if level is None else level
    out = {"alertname": a.name, "cluster": cluster, "node": a.node, "entity": a.entity,
           "scope": str(a.scope), "level": str(lv), "severity": LEVEL_SEVERITY.get(lv, "info")}
    if a.explanation:
        out["signal"] = str(a.explanation[0].get("rule", ""))
    if a.flapping:
        out["flapping"] = "true"
    if a.stale:
        out["stale"] = "true"
    return out


def summary_of(a: Alert) -> str:
    top = a.explanation[0] if a.explanation else None
    why = (f"{top.get('rule')}: {top.get('signal')} = {top.get('value'):.4g}"
           if top and isinstance(top.get("value"), int | float) else "no signal")
    return f"{a.entity} on {a.node}: risk {a.risk:.2f} ({why})"


def ref_of(a: Alert, cluster: str, external_url: str, *, status: Status | None = None,
           level: int | None = None) -> AlertRef:
    """`status`/`level` override the record's: an alert that fell below a route's level is
    resolved for that route's receivers while it still fires for others."""
    st: Status = status or ("firing" if a.state == "firing" else "resolved")
    lv = level if level is not None else (a.level if a.state == "firing" else a.peak_level)
    ann = {"summary": summary_of(a),
           "description": "; ".join(f"{s.get('rule')}: {s.get('signal')}"
                                    for s in a.explanation[:5])}
    if a.acked_by:
        ann["acknowledged"] = f"by {a.acked_by}: {a.ack_comment or ''}".strip()
    ends = a.resolved_at if st == "resolved" else None
    if st == "resolved" and ends is None:
        ends = a.updated_at
    return AlertRef(a.fingerprint, a.id, labels_of(a, cluster, lv), ann, st, lv, a.risk,
                    a.started_at, ends, tuple(a.explanation),
                    f"{external_url.rstrip('/')}/v1/alerts/{a.id}")
