"""Alert records as the notifier sees them: labels that identify, annotations that describe."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from collectors.identity import GpuIdentity
from service.notify.cause import short_cause
from service.notify.labels import alert_labels
from service.notify.message import AlertRef, Status
from service.notify.values import value_text
from service.stages.alert_store import Alert
from service.stages.fleet_alerts import derived_summary

labels_of = alert_labels  # the name the dispatcher and older tests use
WHEN = "failure expected in"  # how models.detectors.growth.when_text starts


def summary_of(a: Alert) -> str:
    """One line: a node or fleet alert's own (service.stages.fleet_alerts.derived_summary:
    "FleetStorm: 5 of 16 nodes at level >= 2 within 10 min: n01 (xid 79), ...; 2 hard
    faults: ...", "NodeNoData: n3 silent for 1 min 5 s, last seen ..."), else the entity's
    cause in a few characters (service.notify.cause), then its top signal and risk."""
    own = derived_summary(a.name, a.explanation, a.risk)
    if own is not None:
        return own
    top = a.explanation[0] if a.explanation else None
    why = (f"{top.get('rule')}: {top.get('signal')} = "
           f"{value_text(str(top.get('rule') or ''), top.get('value'))}"
           if top and isinstance(top.get("value"), int | float) else "no signal")
    cause = short_cause(a.entity, top)
    return f"{cause + ': ' if cause else ''}{a.entity} on {a.node}: risk {a.risk:.2f} ({why})"


def predicted_window_of(a: Alert) -> str:
    """The time-to-failure a growth rule wrote into the explanation ("failure expected in
    1-3 days"), from the strongest signal that has one; empty where none does."""
    for s in a.explanation:
        text = str(s.get("signal", ""))
        at = text.find(WHEN)
        if at >= 0:
            return text[at:]
    return ""


def revision_of(explanation: Sequence[Mapping[str, Any]]) -> str:
    """12 hex characters of a digest of the (rule, signal) pairs of the hard evidence (order
    and repeats aside); empty when there is none. A firing alert whose hard evidence changes
    (a storm that gains a hard fault) is news to its receivers."""
    pairs = sorted({f"{s.get('rule', '')}\0{s.get('signal', '')}"
                    for s in explanation if s.get("hard")})
    if not pairs:
        return ""
    return hashlib.sha256("\n".join(pairs).encode()).hexdigest()[:12]


def runbook_url(external_url: str, alertname: str) -> str:
    return f"{external_url.rstrip('/')}/v1/runbooks/{alertname}"


def console_url(external_url: str, alert_id: int) -> str:
    """The console's page of one alert (generatorURL: where a receiver's link opens)."""
    return f"{external_url.rstrip('/')}/#/alert/{alert_id}"


def board_text(board: GpuIdentity) -> str:
    """A board in one line, for a message: "NVIDIA A100-SXM4-80GB serial 1650522003820,
    UUID GPU-5135..., bus 00000000:01:00.0, VBIOS 92.00.36.00.02, driver 535.54.03"."""
    parts = [f"{name} {v}" for name, attr in (("serial", "serial"), ("UUID", "uuid"),
                                              ("bus", "pci_bus_id"), ("VBIOS", "vbios"),
                                              ("driver", "driver"))
             if (v := getattr(board, attr))]
    return " ".join(x for x in (board.model, ", ".join(parts)) if x)


def ref_of(a: Alert, cluster: str, external_url: str, *, status: Status | None = None,
           level: int | None = None, verdict_url: str = "",
           board: GpuIdentity | None = None) -> AlertRef:
    """`status`/`level` override the record's: an alert that fell below a route's level is
    resolved for that route's receivers while it still fires for others. `board`: the GPU
    board the alert is about (service.stages.gpu_identity), named in labels and `board`."""
    st: Status = status or ("firing" if a.state == "firing" else "resolved")
    lv = level if level is not None else (a.level if a.state == "firing" else a.peak_level)
    ann = {"summary": summary_of(a),
           "description": "; ".join(f"{s.get('rule')}: {s.get('signal')}"
                                    for s in a.explanation[:5]),
           "runbook_url": runbook_url(external_url, a.name)}
    window = predicted_window_of(a)
    if window:
        ann["predicted_window"] = window
    if board:
        ann["board"] = board_text(board)
    if verdict_url:  # a signed link: was it a failure, a false alarm, maintenance?
        ann["verdict_url"] = verdict_url
    if a.acked_by:
        ann["acknowledged"] = f"by {a.acked_by}: {a.ack_comment or ''}".strip()
    ends = a.resolved_at if st == "resolved" else None
    if st == "resolved" and ends is None:
        ends = a.updated_at
    return AlertRef(a.fingerprint, a.id, labels_of(a, cluster, lv, board), ann, st, lv, a.risk,
                    a.started_at, ends, tuple(a.explanation),
                    f"{external_url.rstrip('/')}/v1/alerts/{a.id}",
                    revision_of(a.explanation), console_url(external_url, a.id))
