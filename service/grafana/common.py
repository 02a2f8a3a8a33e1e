"""Pieces every gpuhealth dashboard shares: template variables, risk colours that match the
alert levels, the alert and action annotations, the riskiest-entities table and links."""

from __future__ import annotations

from collections.abc import Sequence

from collectors.catalog import Scope
from service.grafana.contract import ACTION, ALERT, RISK, SAMPLES, Measurement
from service.grafana.panels import (
    Json,
    Step,
    annotation,
    override,
    table,
    target,
    value_map,
    variable,
)
from service.grafana.queries import col, lit, q, select, tag_values
from service.stages.alert_machine import LEVEL_NAMES, AlertPolicy

FLEET, NODE, FABRIC, ALERTS = ("gpuhealth-fleet", "gpuhealth-node", "gpuhealth-fabric",
                               "gpuhealth-alerts")

# Risk colours at the default alert policy's enter thresholds, so a cell turns the colour of
# the level its entity would enter (a deployment that moves them keeps these defaults).
_ENTER = AlertPolicy().enter
RISK_STEPS: list[Step] = [(None, "green"), (_ENTER[0], "yellow"), (_ENTER[1], "orange"),
                          (_ENTER[2], "red")]
LEVEL_STEPS: list[Step] = [(None, "green"), (1, "yellow"), (2, "orange"), (3, "red")]
_LEVEL_COLORS = {0: "green", 1: "yellow", 2: "orange", 3: "red"}
LEVEL_MAP = value_map({k: (f"{k} {name}", _LEVEL_COLORS[k]) for k, name in LEVEL_NAMES.items()})
UP_MAP = value_map({0: ("down", "red"), 1: ("up", "green")})


def cluster_var() -> Json:
    return variable("cluster", "Cluster", tag_values(RISK, "cluster", {}))


def node_var(m: Measurement) -> Json:
    """Nodes that have written `m` (gpu for GPU views, ib_port for the fabric)."""
    return variable("node", "Node", tag_values(m, "host", {"cluster": "cluster"}))


def gpu_var() -> Json:
    return variable("gpu", "GPU", tag_values(SAMPLES[Scope.GPU], "gpu",
                                             {"cluster": "cluster", "host": "node"}))


def alert_annotation(variables: Sequence[str]) -> Json:
    text = ALERT.field("summary")
    query = select(ALERT, [q(text), q(ALERT.tag("entity")), q(ALERT.field("state")),
                           q(ALERT.field("level")) + "::field"],
                   variables=variables, bucket=False)
    return annotation("Alert level changes", query, color="red", text=text,
                      tags=["entity", "state"])


def action_annotation(variables: Sequence[str]) -> Json:
    text = ACTION.field("detail")
    query = select(ACTION, [q(text), q(ACTION.tag("entity")), q(ACTION.tag("channel")),
                            q(ACTION.field("kind")), q(ACTION.field("ok"))],
                   variables=variables, bucket=False)
    return annotation("Notifications and remediation", query, color="blue", text=text,
                      tags=["channel", "kind", "entity"])


def node_link(field: str = "host") -> Json:
    """A data link from a row's node to its detail dashboard, keeping cluster and time.
    `field` is a column name, or `[i]` for the i-th column (names with odd characters)."""
    ref = field if field.startswith("[") else f".{field}"
    url = (f"/d/{NODE}?${{cluster:queryparam}}&var-node=${{__data.fields{ref}}}"
           "&${__url_time_range}")
    return {"title": "Node detail", "url": url, "targetBlank": False}


def risk_table(title: str, variables: Sequence[str], *, scopes: Sequence[str] | None = None,
               limit: int = 20, w: int = 12, h: int = 10, description: str = "") -> Json:
    """Entities by their latest risk, riskiest first, with the open alert level and the signal
    that drove it (risk.top)."""
    where = []
    if scopes is not None:
        where = ["(" + " OR ".join(f"{q(RISK.tag('scope'))} = {lit(s)}" for s in scopes) + ")"]
    cols = [col("last", RISK.field(f)) for f in ("risk", "level", "top")]
    query = select(RISK, cols, variables=variables, where=where,
                   by=["scope", "entity", "host"], bucket=False)
    transforms: list[Json] = [
        {"id": "organize", "options": {"excludeByName": {"Time": True},
                                       "indexByName": {"entity": 0, "risk": 1, "level": 2,
                                                       "top": 3, "scope": 4, "host": 5}}},
        {"id": "sortBy", "options": {"sort": [{"field": "risk", "desc": True}]}},
        {"id": "limit", "options": {"limitField": limit}},
    ]
    overrides = [
        override("byName", "risk", custom__cellOptions={"type": "color-background"},
                 thresholds={"mode": "absolute", "steps": [{"value": v, "color": c}
                                                           for v, c in RISK_STEPS]},
                 decimals=2),
        override("byName", "level", mappings=LEVEL_MAP,
                 custom__cellOptions={"type": "color-text"}),
        override("byName", "top", custom__width=420),
        override("byName", "entity", links=[node_link()]),
    ]
    return table(title, [target(query, table=True)], w=w, h=h, description=description,
                 overrides=overrides, transformations=transforms)
