"""Fleet overview: where the risk is (node x GPU), how many alerts are open at each level, the
riskiest entities with their reasons, and whether every collector reports."""

from __future__ import annotations

from collectors.catalog import Scope
from service.grafana.common import (
    FLEET,
    LEVEL_STEPS,
    RISK_STEPS,
    UP_MAP,
    alert_annotation,
    cluster_var,
    node_link,
    node_var,
    risk_table,
)
from service.grafana.contract import ALERT, COLLECTOR, RISK
from service.grafana.panels import (
    Json,
    dashboard,
    override,
    row,
    stat,
    state_timeline,
    table,
    target,
    timeseries,
)
from service.grafana.queries import col, latest_per_entity, lit, q, select

VARS = ("cluster", "node")
_GPU_SCOPE = f"{q(RISK.tag('scope'))} = {lit(str(Scope.GPU))}"


def _open_alerts(level: int) -> Json:
    """Entities whose latest risk point carries open alert level `level`."""
    inner = latest_per_entity(RISK, RISK.field("level"), variables=VARS, by="entity")
    query = f"SELECT count({q('level')}) FROM {inner} WHERE {q('level')} = {level}"
    steps = [LEVEL_STEPS[0], (1, LEVEL_STEPS[level][1])]
    return stat(f"Open at level {level}", [target(query)], steps=steps, w=4, no_value="0",
                description=f"Entities (GPUs, links, ports, nodes) whose alert is at level "
                            f"{level} now.")


def _collectors_down() -> Json:
    inner = latest_per_entity(COLLECTOR, COLLECTOR.field("up"), variables=VARS,
                              by="collector")
    query = f"SELECT count({q('up')}) FROM {inner} WHERE {q('up')} = 0"
    return stat("Collectors down", [target(query)], steps=[(None, "green"), (1, "red")], w=4,
                no_value="0", description="Collectors whose latest report says up=0.")


def _risk_matrix() -> Json:
    query = select(RISK, [col("last", RISK.field("risk"))], variables=VARS, where=[_GPU_SCOPE],
                   by=["host", "gpu"], bucket=False)
    return table(
        "GPU risk: node x GPU", [target(query, table=True)], w=12, h=10, colored=True,
        steps=RISK_STEPS, description="Latest fused risk of every GPU, one row per node. "
        "Colours follow the alert levels' enter thresholds.",
        transformations=[{"id": "groupingToMatrix", "options": {
            "columnField": "gpu", "rowField": "host", "valueField": "risk",
            "emptyValue": "null"}}],
        overrides=[override("byName", "host\\gpu", custom__cellOptions={"type": "auto"},
                            displayName="node", links=[node_link("[0]")])])


def _risk_timeline() -> Json:
    query = select(RISK, [col("max", RISK.field("risk"))], variables=VARS, where=[_GPU_SCOPE],
                   by=["host", "gpu"])
    return state_timeline("GPU risk over time", [target(query, alias="$tag_host gpu$tag_gpu")],
                          steps=RISK_STEPS, w=12, h=10,
                          description="Highest risk of each GPU per interval.")


def _alerts_by_level() -> Json:
    query = select(ALERT, [col("count", ALERT.field("alert_id"), "changes")], variables=VARS,
                   where=[f"{q(ALERT.field('state'))} != {lit('resolved')}"], by=["level"])
    return timeseries("Alerts raised by level", [target(query, alias="level $tag_level")],
                      bars=True, stack=True, w=12, description=(
                          "Alerts that fired or changed level, by the level they entered."),
                      overrides=[override("byName", f"level {k}",
                                          color={"mode": "fixed", "fixedColor": c})
                                 for k, c in LEVEL_STEPS[1:]])


def _collectors_timeline() -> Json:
    query = select(COLLECTOR, [col("last", COLLECTOR.field("up"))], variables=VARS,
                   by=["host", "collector"])
    return state_timeline("Collectors up", [target(query, alias="$tag_host $tag_collector")],
                          mappings=UP_MAP, steps=[(None, "red"), (1, "green")], w=12,
                          description="Each collector's up/down per interval, as the "
                          "service and node agents report it.")


def _collector_errors() -> Json:
    cols = [col("last", COLLECTOR.field(f)) for f in ("up", "scrape_seconds", "error")]
    query = select(COLLECTOR, cols, variables=VARS, by=["host", "collector"], bucket=False)
    return table("Collector status", [target(query, table=True)], w=12, overrides=[
        override("byName", "up", mappings=UP_MAP, custom__cellOptions={"type": "color-text"}),
        override("byName", "scrape_seconds", unit="s")],
        transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True}}}])


def build() -> Json:
    panels = [
        _open_alerts(3), _open_alerts(2), _open_alerts(1), _collectors_down(),
        stat("Highest GPU risk", [target(select(RISK, [col("max", RISK.field("risk"))],
                                                variables=VARS, where=[_GPU_SCOPE]))],
             steps=RISK_STEPS, decimals=2, w=8),
        _risk_matrix(), _risk_timeline(),
        row("Alerts and riskiest entities"),
        _alerts_by_level(),
        risk_table("Riskiest entities", VARS, w=12, h=8,
                   description="GPUs, links, ports and nodes by latest risk, with the "
                   "strongest signal; click an entity for its node."),
        row("Collectors"),
        _collectors_timeline(), _collector_errors(),
    ]
    return dashboard(FLEET, "gpuhealth: fleet overview",
                     "Risk across the fleet, open alerts by level, collectors.", panels,
                     variables=[cluster_var(), node_var(RISK)],
                     annotations=[alert_annotation(VARS)])
