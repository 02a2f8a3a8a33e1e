"""InfluxQL text for dashboard panels, built from the storage contract.

Every query carries Grafana's `$timeFilter`, groups time by `$__interval` with `fill(null)`
(a gap stays a gap: missing data is never zero), and filters each tag a template variable
drives with `"tag" =~ /^$var$/`, which Grafana fills with a regex-escaped value, `(a|b)` for
several, or the variable's all-value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from service.grafana.contract import Measurement

TIME_FILTER = "$timeFilter"
INTERVAL = "$__interval"

# Template variable name per tag it filters on.
VARIABLE_OF_TAG: dict[str, str] = {"cluster": "cluster", "host": "node", "gpu": "gpu",
                                   "device": "device"}


def q(name: str) -> str:
    """A double-quoted InfluxQL identifier."""
    return '"' + name.replace('"', '\\"') + '"'


def lit(value: str) -> str:
    """A single-quoted InfluxQL string literal."""
    return "'" + value.replace("'", "\\'") + "'"


def col(fn: str, field: str, alias: str | None = None, *, scale: float | None = None,
        cast: str = "") -> str:
    """`fn("field") AS "alias"`; `scale` multiplies (a per-second rate shown per minute)."""
    expr = f"{fn}({q(field)}{cast})"
    if scale is not None:
        expr += f" * {scale:g}"
    return f"{expr} AS {q(alias or field)}"


def var_filters(m: Measurement, variables: Sequence[str]) -> list[str]:
    """`"tag" =~ /^$var$/` for each of `variables` whose tag the measurement has."""
    tags = {v: t for t, v in VARIABLE_OF_TAG.items()}
    return [f"{q(tags[v])} =~ /^${v}$/" for v in variables if tags[v] in m.tags]


def select(m: Measurement, columns: Sequence[str], *, variables: Sequence[str],
           where: Sequence[str] = (), by: Sequence[str] = (), bucket: bool = True,
           tail: str = "") -> str:
    """A SELECT over `m` in the dashboard's time range. `bucket` groups by time($__interval)
    with fill(null); `by` adds tag dimensions (checked against the measurement)."""
    conds = [TIME_FILTER, *var_filters(m, variables), *where]
    text = f"SELECT {', '.join(columns)} FROM {q(m.name)} WHERE {' AND '.join(conds)}"
    dims = ([f"time({INTERVAL})"] if bucket else []) + [q(m.tag(t)) for t in by]
    if dims:
        text += f" GROUP BY {', '.join(dims)}"
    if bucket:
        text += " fill(null)"
    return text + (f" {tail}" if tail else "")


def latest_per_entity(m: Measurement, value: str, *, variables: Sequence[str], by: str,
                      where: Sequence[str] = (), alias: str | None = None) -> str:
    """A subquery of each entity's last `value` in the range, for counting entities."""
    inner = select(m, [col("last", value, alias)], variables=variables, where=where,
                   by=[by], bucket=False)
    return f"({inner})"


def tag_values(m: Measurement, key: str, filters: Mapping[str, str]) -> str:
    """`SHOW TAG VALUES` of one tag, narrowed by the variables above it (tag -> variable)."""
    text = f"SHOW TAG VALUES FROM {q(m.name)} WITH KEY = {q(m.tag(key))}"
    conds = [f"{q(m.tag(t))} =~ /^${v}$/" for t, v in filters.items()]
    return text + (f" WHERE {' AND '.join(conds)}" if conds else "")
