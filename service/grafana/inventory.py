"""Every query a dashboard sends, and Grafana's expansion of its macros and variables, so the
queries can be checked against the storage contract and run against a real InfluxDB.

`expand` follows Grafana's InfluxDB data source: `$timeFilter` becomes a time condition,
`$__interval` a duration, and a template variable inside a regex literal (`=~ /^$node$/`)
its value regex-escaped, several values as `(a|b)`, and ALL as the variable's `.*`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["panel", "variable", "annotation"]
ALL = "$__all"  # a variable set to All: its allValue, `.*`
_ALL_VALUE = ".*"


@dataclass(frozen=True, slots=True)
class DashboardQuery:
    dashboard: str  # the dashboard's uid
    title: str  # where the query sits: "Panel title [A]", "variable node", "annotation ..."
    kind: Kind
    query: str  # raw InfluxQL with Grafana's macros and variables in it


def _panels(panels: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for p in panels:
        yield p
        yield from _panels(p.get("panels", ()))  # a collapsed row holds its panels


def dashboard_queries(dashboard: Mapping[str, Any]) -> list[DashboardQuery]:
    """Every query of a dashboard: panel targets, template variables, annotations."""
    uid = str(dashboard["uid"])
    out: list[DashboardQuery] = []
    for p in _panels(dashboard.get("panels", ())):
        for t in p.get("targets", ()):
            out.append(DashboardQuery(uid, f"{p['title']} [{t['refId']}]", "panel",
                                      str(t["query"])))
    for v in dashboard.get("templating", {}).get("list", ()):
        if v.get("type") == "query":
            out.append(DashboardQuery(uid, f"variable {v['name']}", "variable",
                                      str(v["query"])))
    for a in dashboard.get("annotations", {}).get("list", ()):
        query = a.get("target", {}).get("query")
        if query:
            out.append(DashboardQuery(uid, f"annotation {a['name']}", "annotation",
                                      str(query)))
    return out


def all_queries() -> list[DashboardQuery]:
    """Every query of every dashboard gpuhealth ships."""
    from service.grafana.registry import build_all

    return [q for d in build_all().values() for q in dashboard_queries(d)]


# A regex literal right after =~ or !~ (where Grafana regex-escapes what it substitutes).
_REGEX = re.compile(r"(?<=[=!]~)(\s*)/((?:\\.|[^/\\])*)/")
_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def _escape(value: str) -> str:
    return re.escape(value).replace("/", "\\/")


def _in_regex(name: str, value: str | Sequence[str]) -> str:
    values = [value] if isinstance(value, str) else list(value)
    if not values:
        raise ValueError(f"variable {name!r} has no value")
    if ALL in values:
        return _ALL_VALUE
    escaped = [_escape(v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def _plain(name: str, value: str | Sequence[str]) -> str:
    if isinstance(value, str) and value != ALL:
        return value
    raise ValueError(f"variable {name!r} outside a regex takes one value, not {value!r}")


def expand(query: str, values: Mapping[str, str | Sequence[str]] | None = None, *,
           time_range: str | tuple[float, float] = "6h", interval: str = "1m") -> str:
    """`query` as Grafana would send it. `values` maps each template variable to a value, a
    list of values, or ALL. `time_range` is a relative duration (`6h` -> `time > now() - 6h`)
    or absolute epoch seconds (start, end). A variable without a value raises KeyError."""
    values = values or {}
    if isinstance(time_range, str):
        time_filter = f"time > now() - {time_range}"
    else:
        start, end = time_range
        time_filter = f"time >= {round(start * 1000)}ms AND time <= {round(end * 1000)}ms"
    macros = {"timeFilter": time_filter, "__interval": interval}

    def sub(m: re.Match[str], in_regex: bool) -> str:
        name = m.group(1) or m.group(2)
        if name in macros:
            return macros[name]
        if name not in values:
            raise KeyError(f"no value given for template variable ${name}")
        return _in_regex(name, values[name]) if in_regex else _plain(name, values[name])

    out: list[str] = []
    pos = 0
    for r in _REGEX.finditer(query):
        out.append(_VAR.sub(lambda m: sub(m, False), query[pos:r.start()]))
        out.append(f"{r.group(1)}/{_VAR.sub(lambda m: sub(m, True), r.group(2))}/")
        pos = r.end()
    out.append(_VAR.sub(lambda m: sub(m, False), query[pos:]))
    return "".join(out)
