"""Grafana (10 and later) dashboard JSON as plain dicts: panels, targets, template variables,
annotations and the dashboard itself. Only what gpuhealth's dashboards use is built here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Json = dict[str, Any]

DATASOURCE_UID = "gpuhealth-influxdb"
DATASOURCE: Json = {"type": "influxdb", "uid": DATASOURCE_UID}
SCHEMA_VERSION = 39  # Grafana 10.4 / 11.x
TAG = "gpuhealth"  # every dashboard carries it: the dashboards' link menu lists by it

Step = tuple[float | None, str]


def target(query: str, ref: str = "A", *, alias: str = "", table: bool = False) -> Json:
    """A raw InfluxQL query. `alias` names series (`$tag_host`, `$col`)."""
    t: Json = {"refId": ref, "datasource": DATASOURCE, "rawQuery": True, "query": query,
               "resultFormat": "table" if table else "time_series"}
    if alias:
        t["alias"] = alias
    return t


def thresholds(steps: Sequence[Step]) -> Json:
    return {"mode": "absolute",
            "steps": [{"value": v, "color": c} for v, c in steps]}


def value_map(labels: dict[int, tuple[str, str]]) -> list[Json]:
    """Value mappings: number -> (text, colour)."""
    return [{"type": "value", "options": {
        str(k): {"text": text, "color": color, "index": i}
        for i, (k, (text, color)) in enumerate(sorted(labels.items()))}}]


def override(matcher: str, name: str, **props: Any) -> Json:
    """Field overrides; `matcher` is byName or byRegexp, props are dotted config ids."""
    return {"matcher": {"id": matcher, "options": name},
            "properties": [{"id": k.replace("__", "."), "value": v} for k, v in props.items()]}


def _panel(kind: str, title: str, targets: Sequence[Json], *, w: int, h: int,
           description: str, defaults: Json, options: Json,
           overrides: Sequence[Json] = (), transformations: Sequence[Json] = ()) -> Json:
    p: Json = {"type": kind, "title": title, "description": description,
               "datasource": DATASOURCE, "gridPos": {"x": 0, "y": 0, "w": w, "h": h},
               "targets": list(targets),
               "fieldConfig": {"defaults": defaults, "overrides": list(overrides)},
               "options": options}
    if transformations:
        p["transformations"] = list(transformations)
    return p


def _legend(table: bool, calcs: Sequence[str] = ()) -> Json:
    return {"showLegend": True, "displayMode": "table" if table else "list",
            "placement": "right" if table else "bottom", "calcs": list(calcs)}


def timeseries(title: str, targets: Sequence[Json], *, unit: str = "short", w: int = 12,
               h: int = 8, description: str = "", bars: bool = False, stack: bool = False,
               log: bool = False, steps: Sequence[Step] = (), overrides: Sequence[Json] = (),
               minimum: float | None = None) -> Json:
    custom: Json = {"drawStyle": "bars" if bars else "line", "lineWidth": 1,
                    "fillOpacity": 80 if bars else 0, "showPoints": "never",
                    "spanNulls": False,  # a gap in the data is a gap on the graph
                    "stacking": {"mode": "normal" if stack else "none", "group": "A"},
                    "scaleDistribution": {"type": "log", "log": 10} if log else {"type": "linear"},
                    "thresholdsStyle": {"mode": "dashed" if steps else "off"}}
    defaults: Json = {"unit": unit, "custom": custom, "color": {"mode": "palette-classic"}}
    if steps:
        defaults["thresholds"] = thresholds(steps)
    if minimum is not None:
        defaults["min"] = minimum
    options = {"legend": _legend(len(targets) > 1 or not bars, ["max", "lastNotNull"]),
               "tooltip": {"mode": "multi", "sort": "desc"}}
    return _panel("timeseries", title, targets, w=w, h=h, description=description,
                  defaults=defaults, options=options, overrides=overrides)


def state_timeline(title: str, targets: Sequence[Json], *, steps: Sequence[Step] = (),
                   mappings: Sequence[Json] = (), unit: str = "short", w: int = 12, h: int = 8,
                   description: str = "") -> Json:
    defaults: Json = {"unit": unit, "color": {"mode": "thresholds"},
                      "custom": {"fillOpacity": 80, "lineWidth": 0},
                      "thresholds": thresholds(steps or [(None, "green")]),
                      "mappings": list(mappings)}
    options = {"showValue": "never", "mergeValues": True, "rowHeight": 0.9,
               "alignValue": "left", "legend": _legend(False),
               "tooltip": {"mode": "single", "sort": "none"}}
    return _panel("state-timeline", title, targets, w=w, h=h, description=description,
                  defaults=defaults, options=options)


def table(title: str, targets: Sequence[Json], *, w: int = 12, h: int = 8,
          description: str = "", overrides: Sequence[Json] = (),
          transformations: Sequence[Json] = (), steps: Sequence[Step] = (),
          colored: bool = False) -> Json:
    defaults: Json = {"custom": {"align": "auto", "filterable": True,
                                 "cellOptions": {"type": "color-background" if colored
                                                 else "auto"}},
                      "color": {"mode": "thresholds"},
                      "thresholds": thresholds(steps or [(None, "transparent")])}
    options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}
    return _panel("table", title, targets, w=w, h=h, description=description,
                  defaults=defaults, options=options, overrides=overrides,
                  transformations=transformations)


def stat(title: str, targets: Sequence[Json], *, steps: Sequence[Step], unit: str = "short",
         w: int = 4, h: int = 4, description: str = "", decimals: int | None = None,
         no_value: str | None = None) -> Json:
    """`no_value`: what to show when the query returns nothing (a count of none is 0)."""
    defaults: Json = {"unit": unit, "color": {"mode": "thresholds"},
                      "thresholds": thresholds(steps)}
    if no_value is not None:
        defaults["noValue"] = no_value
    if decimals is not None:
        defaults["decimals"] = decimals
    options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
               "colorMode": "background", "graphMode": "none", "textMode": "value",
               "justifyMode": "center", "orientation": "auto"}
    return _panel("stat", title, targets, w=w, h=h, description=description,
                  defaults=defaults, options=options)


def row(title: str) -> Json:
    return {"type": "row", "title": title, "collapsed": False, "panels": [],
            "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}}


def variable(name: str, label: str, query: str, *, multi: bool = True) -> Json:
    """A query variable refreshed on load; `All` is `.*` so a large fleet keeps short queries."""
    return {"type": "query", "name": name, "label": label, "datasource": DATASOURCE,
            "query": query, "definition": query, "refresh": 1, "sort": 3, "regex": "",
            "multi": multi, "includeAll": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "options": [], "hide": 0, "skipUrlSync": False}


def annotation(name: str, query: str, *, color: str, text: str, tags: Sequence[str],
               title: str = "") -> Json:
    """An InfluxQL annotation. Grafana reads `target`; the top-level copy is the legacy form
    older 10.x releases migrate from."""
    columns = {"textColumn": text, "tagsColumn": ",".join(tags), "titleColumn": title,
               "timeEndColumn": ""}
    return {"name": name, "datasource": DATASOURCE, "enable": True, "hide": False,
            "iconColor": color, "query": query, **columns,
            "target": {"refId": "Anno", "query": query, "rawQuery": True,
                       "queryType": "tags", "fromAnnotations": True, "resultFormat": "table",
                       **columns}}


_BUILTIN_ANNOTATION: Json = {
    "builtIn": 1, "name": "Annotations & Alerts", "type": "dashboard", "enable": True,
    "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
    "target": {"limit": 100, "matchAny": False, "tags": [], "type": "dashboard"}}


def _layout(panels: Sequence[Json]) -> list[Json]:
    """Places panels left to right in Grafana's 24-column grid, wrapping lines; a row starts
    a new line. Ids are assigned in order."""
    out: list[Json] = []
    x = y = line_h = 0
    for i, p in enumerate(panels, start=1):
        g = p["gridPos"]
        if p["type"] == "row" or x + g["w"] > 24:
            x, y, line_h = 0, y + line_h, 0
        out.append({**p, "id": i, "gridPos": {**g, "x": x, "y": y}})
        x, line_h = x + g["w"], max(line_h, g["h"])
        if p["type"] == "row":
            x, y, line_h = 0, y + g["h"], 0
    return out


def dashboard(uid: str, title: str, description: str, panels: Sequence[Json], *,
              variables: Sequence[Json], annotations: Sequence[Json] = (),
              time_from: str = "now-6h", refresh: str = "30s") -> Json:
    return {
        "uid": uid, "title": title, "description": description, "tags": [TAG],
        "editable": False,  # provisioned from code: change service/grafana, not the UI
        "schemaVersion": SCHEMA_VERSION, "version": 1, "graphTooltip": 1,
        "timezone": "browser", "fiscalYearStartMonth": 0, "liveNow": False,
        "time": {"from": time_from, "to": "now"}, "refresh": refresh,
        "timepicker": {"refresh_intervals": ["10s", "30s", "1m", "5m", "15m"]},
        "templating": {"list": list(variables)},
        "annotations": {"list": [_BUILTIN_ANNOTATION, *annotations]},
        "links": [{"title": "gpuhealth", "type": "dashboards", "tags": [TAG], "asDropdown": True,
                   "includeVars": True, "keepTime": True, "icon": "external link",
                   "targetBlank": False, "tooltip": "", "url": ""}],
        "panels": _layout(panels),
    }
