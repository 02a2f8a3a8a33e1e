"""Alerts and actions: every entity's alert level over time, level changes by kind, and the
notifications and remediations that followed, with both as annotations on the time axis."""

from __future__ import annotations

from service.grafana.common import (
    ALERTS,
    LEVEL_MAP,
    LEVEL_STEPS,
    action_annotation,
    alert_annotation,
    cluster_var,
    node_link,
    node_var,
)
from service.grafana.contract import ACTION, ALERT, ALERT_STATES, RISK
from service.grafana.panels import (
    Json,
    dashboard,
    override,
    row,
    state_timeline,
    table,
    target,
    timeseries,
)
from service.grafana.queries import col, lit, q, select

VARS = ("cluster", "node")
_STATE_COLORS = {"firing": "red", "escalated": "orange", "deescalated": "yellow",
                 "resolved": "green"}


def _level_timeline() -> Json:
    query = select(RISK, [col("max", RISK.field("level"))], variables=VARS,
                   where=[f"{q(RISK.field('level'))} > 0"], by=["entity"])
    return state_timeline("Alert level by entity", [target(query, alias="$tag_entity")],
                          steps=LEVEL_STEPS, mappings=LEVEL_MAP, w=24, h=10,
                          description="Each entity's open alert level while it has one.")


def _changes_by_state() -> Json:
    targets = []
    for i, state in enumerate(ALERT_STATES):
        query = select(ALERT, [col("count", ALERT.field("alert_id"), state)], variables=VARS,
                       where=[f"{q(ALERT.field('state'))} = {lit(state)}"])
        targets.append(target(query, chr(ord("A") + i)))
    return timeseries("Alert level changes per interval", targets, bars=True, stack=True, w=12,
                      description="Level changes per interval: fired, escalated, "
                                  "de-escalated, resolved.",
                      overrides=[override("byName", s, color={"mode": "fixed", "fixedColor": c})
                                 for s, c in _STATE_COLORS.items()])


def _deliveries() -> Json:
    ok = select(ACTION, [col("count", ACTION.field("alert_id"), "delivered")], variables=VARS,
                where=[f"{q(ACTION.field('ok'))} = true"], by=["channel"])
    failed = select(ACTION, [col("count", ACTION.field("alert_id"), "failed")],
                    variables=VARS, where=[f"{q(ACTION.field('ok'))} = false"],
                    by=["channel"])
    return timeseries("Notifications and remediation by channel",
                      [target(ok, alias="$tag_channel"),
                       target(failed, "B", alias="$tag_channel failed")],
                      bars=True, stack=True, w=12,
                      description="Deliveries per channel (record, email, pagerduty, twilio, "
                                  "webhook, remediation); failed ones separately.",
                      overrides=[override("byRegexp", ".* failed$",
                                          color={"mode": "fixed", "fixedColor": "red"})])


def _transitions() -> Json:
    cols = [q(ALERT.tag("entity")), q(ALERT.tag("host")), q(ALERT.field("previous")),
            f"{q(ALERT.field('level'))}::field AS {q('level')}", q(ALERT.field("state")),
            q(ALERT.field("risk")), q(ALERT.field("summary")), q(ALERT.field("alert_id"))]
    query = select(ALERT, cols, variables=VARS, bucket=False,
                   tail="ORDER BY time DESC LIMIT 500")
    return table("Alert history", [target(query, table=True)], w=24, h=10,
                 description="Newest first. The summary says which signal drove it.",
                 overrides=[override("byName", "level", mappings=LEVEL_MAP,
                                     custom__cellOptions={"type": "color-background"}),
                            override("byName", "previous", mappings=LEVEL_MAP),
                            override("byName", "risk", decimals=2),
                            override("byName", "host", links=[node_link()]),
                            override("byName", "summary", custom__width=480)])


def _actions() -> Json:
    cols = [q(ACTION.tag("entity")), q(ACTION.tag("host")), q(ACTION.tag("channel")),
            q(ACTION.field("kind")), q(ACTION.field("ok")), q(ACTION.field("alert_id")),
            q(ACTION.field("detail"))]
    query = select(ACTION, cols, variables=VARS, bucket=False,
                   tail="ORDER BY time DESC LIMIT 500")
    return table("Notification and remediation history", [target(query, table=True)], w=24, h=10,
                 description="Every delivery: channel, what it was for, whether it worked.",
                 overrides=[override("byName", "ok", mappings=[{"type": "value", "options": {
                     "true": {"text": "ok", "color": "green", "index": 0},
                     "false": {"text": "failed", "color": "red", "index": 1}}}],
                     custom__cellOptions={"type": "color-text"}),
                     override("byName", "host", links=[node_link()]),
                     override("byName", "detail", custom__width=480)])


def build() -> Json:
    panels = [
        _level_timeline(),
        _changes_by_state(), _deliveries(),
        row("History"),
        _transitions(), _actions(),
    ]
    return dashboard(ALERTS, "gpuhealth: alerts and actions",
                     "Alert levels over time, level changes, notifications and remediation.",
                     panels, variables=[cluster_var(), node_var(RISK)],
                     annotations=[alert_annotation(VARS), action_annotation(VARS)])
