"""The InfluxDB storage contract (docs/influxdb.md) as data: every measurement the service writes,
with its tags and fields. Sample and rate measurements follow from the metric catalog, the
service's own (risk, alert, action, collector, label, gpu_info) are spelled here once and
checked against the doc by tests/grafana, so a dashboard can only name what the sink really
writes."""

from __future__ import annotations

from dataclasses import dataclass

from collectors import identity
from collectors.catalog import CATALOG, Kind, Metric, Scope
from models.predictor.hour_table import columns


@dataclass(frozen=True, slots=True)
class Measurement:
    name: str
    tags: frozenset[str]
    fields: frozenset[str]

    def field(self, name: str) -> str:
        """`name`, after checking it is a field of this measurement (a typo fails generation)."""
        if name not in self.fields:
            raise KeyError(f"{name!r} is not a field of measurement {self.name!r}")
        return name

    def tag(self, name: str) -> str:
        if name not in self.tags:
            raise KeyError(f"{name!r} is not a tag of measurement {self.name!r}")
        return name


_BASE = frozenset({"cluster", "host"})
# Entity tags per scope, as the catalog's scopes name them.
SCOPE_TAGS: dict[Scope, frozenset[str]] = {
    Scope.GPU: frozenset({"gpu"}),
    Scope.NVLINK: frozenset({"gpu", "link"}),
    Scope.IB_PORT: frozenset({"device", "port"}),
    Scope.PSU: frozenset({"psu"}),
    Scope.FAN: frozenset({"fan"}),
    Scope.NODE: frozenset(),
}
SAMPLE_SCOPES = tuple(SCOPE_TAGS)


def stored(scope: Scope) -> tuple[Metric, ...]:
    """The catalog metrics a sample measurement carries as fields: every non-event metric of
    the scope (derived ones included: the sink writes ib_ber)."""
    return tuple(m for m in CATALOG if m.scope is scope and m.kind is not Kind.EVENT)


def counters(scope: Scope) -> tuple[Metric, ...]:
    """The counters of a scope: the fields of its `<scope>_rate` measurement."""
    return tuple(m for m in stored(scope) if m.kind is Kind.COUNTER)


def metric(name: str, scope: Scope) -> Metric:
    """A catalog metric, checked to belong to `scope` (generation fails on a wrong name)."""
    m = CATALOG[name]
    if m.scope is not scope:
        raise KeyError(f"metric {name!r} is a {m.scope} metric, not {scope}")
    return m


def _samples(scope: Scope) -> Measurement:
    return Measurement(str(scope), _BASE | SCOPE_TAGS[scope],
                       frozenset(m.name for m in stored(scope)))


def _rates(scope: Scope) -> Measurement:
    return Measurement(f"{scope}_rate", _BASE | SCOPE_TAGS[scope],
                       frozenset(m.name for m in counters(scope)))


SAMPLES: dict[Scope, Measurement] = {s: _samples(s) for s in SAMPLE_SCOPES}
# Only scopes with counters have rates (a supply's or fan's readings are all levels).
RATES: dict[Scope, Measurement] = {s: _rates(s) for s in SAMPLE_SCOPES if counters(s)}
# One measurement per event metric, tagged as its scope: `xid`; a node's `sel`, `sxid`.
EVENTS: dict[str, Measurement] = {
    m.name: Measurement(m.name, _BASE | SCOPE_TAGS[m.scope], frozenset({"code"}))
    for s in SAMPLE_SCOPES for m in CATALOG.events(s)}
XID = EVENTS["xid"]
RISK = Measurement(
    "risk",
    _BASE | {"scope", "entity", "gpu", "link", "device", "port", "psu", "fan"},
    frozenset({"risk", "level", "top"}),
)
# `level` is both a tag (to group by) and a field here: queries say "level"::field/::tag.
ALERT = Measurement(
    "alert",
    _BASE | {"scope", "entity", "level"},
    frozenset({"level", "previous", "state", "risk", "alert_id", "summary"}),
)
ACTION = Measurement(
    "action",
    _BASE | {"entity", "channel", "receiver"},
    frozenset({"kind", "ok", "alert_id", "attempts", "detail"}),
)
COLLECTOR = Measurement(
    "collector",
    _BASE | {"collector"},
    frozenset({"up", "scrape_seconds", "error"}),
)
LABEL = Measurement(  # labels learned from the fleet (docs/learning.md)
    "label",
    _BASE | {"kind", "scope", "entity", "mode", "source", "label_id"},
    frozenset({"action", "detail", "withdrawn", "alert_id", "end_time"}),
)
GPU_INFO = Measurement(  # each GPU slot's board, when it changes (collectors.identity)
    "gpu_info", _BASE | SCOPE_TAGS[Scope.GPU],
    frozenset(identity.FIELDS),
)
# The hour tier the service writes (service.history.influx.hour_tier), policy rollup_1h.
HOURS = {s: Measurement(f"{s.value}_1h", _BASE | SCOPE_TAGS[s], frozenset(columns(s)))
         for s in (Scope.GPU, Scope.IB_PORT)}
# Values the `alert.state` field takes, and the scopes risk is written for.
ALERT_STATES = ("firing", "escalated", "deescalated", "resolved")
RISK_SCOPES = ("gpu", "nvlink", "ib_port", "psu", "fan", "node")

MEASUREMENTS: dict[str, Measurement] = {
    m.name: m
    for m in (*SAMPLES.values(), *RATES.values(), *EVENTS.values(), RISK, ALERT, ACTION,
              COLLECTOR, LABEL, GPU_INFO, *HOURS.values())
}
