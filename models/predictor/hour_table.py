"""Hourly features of a whole span at once, from a stored hour tier instead of a replay.

The service stores every finished hour bucket the features read (features.INPUTS, the GPUs'
NVLink links already reduced to features.LINK_COLUMNS; service/history/influx/hour_tier.py).
`HourTable` holds one scope's hour buckets over a span ([column, entity, hour]) and answers the
window store's questions (models.detectors.view.ScopeView) at a 1-hour step, with daily buckets
rolled from the hours as the store rolls its daily tier from its hourly one (counters summed,
states' max, gauges' mean of the hours that reported). The feature functions then run once over
all the span's hours, a group of whole nodes at a time (peer features compare a node's own
entities), instead of once per hour of a replay: the same numbers the live store gives, in a
fraction of the time (docs/learning.md, "Retraining from the hour tier").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from collectors.catalog import CATALOG, Kind, Scope
from collectors.frames import Entity
from models.detectors.view import EventView, ScopeView
from models.predictor.dataset import RunFeatures
from models.predictor.features import (
    HOURLY,
    INPUTS,
    LINK_COLUMNS,
    gpu_hours,
    n_hourly,
)
from models.predictor.long_memory import USUAL_DAYS

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
HOUR = 3600.0
DAY_H = 24
NODES_PER_GROUP = 64  # nodes whose features are built at once: bounds the temporaries


def column_name(metric: str, stat: str) -> str:
    """The stored field of a (metric, stat) input: the metric for its bucket value, with
    `_max` or `_min` for a gauge's range."""
    return metric if stat == "agg" else f"{metric}_{'max' if stat == 'hi' else 'min'}"


def columns(scope: Scope) -> tuple[str, ...]:
    """The fields a scope's hour point holds, in order."""
    own = tuple(column_name(m, s) for m, s in INPUTS[scope])
    return own + LINK_COLUMNS if scope is Scope.GPU else own


@dataclass(frozen=True, slots=True)
class _Tier:
    name: str
    step_s: float
    length: int


@dataclass(slots=True)
class HourTable:
    """One scope's hour buckets over a span: data[column, entity, hour] (NaN: not stored),
    entities sorted by key, hour 0 the absolute hour `first_hour`."""

    scope: Scope
    entities: list[Entity]
    first_hour: int
    data: F32
    cols: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.cols = columns(self.scope)
        if self.data.shape[:2] != (len(self.cols), len(self.entities)):
            raise ValueError(f"{self.scope} hour table: data {self.data.shape} for "
                             f"{len(self.cols)} columns and {len(self.entities)} entities")

    @property
    def hours(self) -> int:
        return int(self.data.shape[2])

    def spanning(self, lo: int, hi: int) -> HourTable:
        """The table over absolute hours [lo, hi), NaN where it holds none (itself when it
        spans them already)."""
        if (lo, hi) == (self.first_hour, self.first_hour + self.hours):
            return self
        data = np.full((*self.data.shape[:2], hi - lo), np.nan, np.float32)
        a, b = max(lo, self.first_hour), min(hi, self.first_hour + self.hours)
        if a < b:
            data[:, :, a - lo:b - lo] = self.data[:, :, a - self.first_hour:b - self.first_hour]
        return HourTable(self.scope, self.entities, lo, data)

    def column(self, name: str) -> F32:
        out: F32 = self.data[self.cols.index(name)]
        return out


class _View:
    """A ScopeView over entities [a, b) of a table: a raw ring of the span's hours at a 1-hour
    step, and a daily tier rolled from it."""

    def __init__(self, table: HourTable, a: int, b: int) -> None:
        self.t = table
        self.a, self.b = a, b
        self.scope = table.scope
        self.step_s = HOUR
        self.head = table.first_hour + table.hours - 1
        self.raw_length = table.hours
        self.entities: Sequence[Entity] = table.entities[a:b]
        first_day = table.first_hour // DAY_H
        self._day_last = (self.head + 1) // DAY_H - 1  # the newest day whose hours all ended
        self._days = max(0, self._day_last - first_day + 1)
        self._day0 = first_day
        # Long enough that the oldest hour's usual days are all in reach (NaN before the span,
        # as a replay's store holds nothing there): a shorter tier would cut them off.
        self.tier_specs = (_Tier("1d", 86400.0, self._days + USUAL_DAYS + 2),)
        nodes: dict[str, int] = {}
        self.node_of: I32 = np.array([nodes.setdefault(e.node, len(nodes))
                                      for e in self.entities], np.int32)
        self.gpu_of: I32 = np.full(len(self.entities), -1, np.int32)
        self._daily: dict[str, F32] = {}

    def __len__(self) -> int:
        return self.b - self.a

    def _hours(self, metric: str, stat: str) -> F32:
        name = column_name(metric, stat)
        if name not in self.t.cols:
            raise KeyError(f"{name}: not in the stored {self.scope} hour tier "
                           "(features.INPUTS names what the features read)")
        out: F32 = self.t.data[self.t.cols.index(name), self.a:self.b]
        return out

    def window(self, metric: str, n: int, tier: str | None = None, stat: str = "agg") -> F32:
        if tier is None:
            src = self._hours(metric, stat)
        elif tier == "1d":
            src = self._day(metric)
        else:
            raise KeyError(f"no tier {tier!r} in an hour table")
        have = src.shape[1]
        if n <= have:
            return src[:, have - n:]
        pad = np.full((src.shape[0], n - have), np.nan, np.float32)
        return np.concatenate([pad, src], axis=1)

    def _day(self, metric: str) -> F32:
        """[entity, day] daily buckets, rolled from the hours as the store rolls them."""
        got = self._daily.get(metric)
        if got is not None:
            return got
        x = self._hours(metric, "agg")[:, : (self._days + self._day0) * DAY_H - self.t.first_hour]
        lead = self.t.first_hour - self._day0 * DAY_H  # hours of the first day before the span
        x = np.concatenate([np.full((x.shape[0], lead), np.nan, np.float32), x], axis=1)
        d = x.reshape(x.shape[0], self._days, DAY_H)
        present = ~np.isnan(d)
        cnt = present.sum(axis=2)
        kind = CATALOG[metric].kind
        with np.errstate(invalid="ignore", divide="ignore"):
            if kind is Kind.STATE:
                out = np.fmax.reduce(d, axis=2)
            else:
                total = np.where(present, d, 0).sum(axis=2)
                out = total if kind is Kind.COUNTER else total / cnt
        out = np.where(cnt > 0, out, np.nan).astype(np.float32)
        self._daily[metric] = out
        return out

    def latest(self, metric: str) -> F64:
        return self._hours(metric, "agg")[:, -1].astype(np.float64)

    def finished(self, tier: str) -> int:
        if tier != "1d":
            raise KeyError(f"no tier {tier!r} in an hour table")
        return self._day_last


class _Fleet:
    def __init__(self, view: _View) -> None:
        self.view = view

    def scope(self, scope: Scope) -> ScopeView:
        if scope is not self.view.scope:
            raise KeyError(f"an hour table of {self.view.scope} holds no {scope}")
        return self.view

    def events_since(self, ts: float) -> Sequence[EventView]:
        return ()


def _node_groups(entities: Sequence[Entity], per: int) -> list[tuple[int, int]]:
    """[a, b) ranges of whole nodes (entities are sorted by key, so a node's are together)."""
    out: list[tuple[int, int]] = []
    a, nodes = 0, 0
    for i in range(1, len(entities) + 1):
        if i == len(entities) or entities[i].node != entities[i - 1].node:
            nodes += 1
            if nodes == per or i == len(entities):
                out.append((a, i))
                a, nodes = i, 0
    return out


def features(table: HourTable) -> RunFeatures:
    """The span's hourly features, as a replay's HourlyRecorder records them: row h is hour
    first_hour + h, available (t_pred) at the hour's end (the round of that time closes it)."""
    n, e = table.hours, len(table.entities)
    x = np.full((n, e, n_hourly(table.scope)), np.nan, np.float32)
    fill = 0.0
    if table.scope is Scope.GPU:
        fill = 1.0 if (table.column("missing_nvlink") == 0).any() else 0.0
    for a, b in _node_groups(table.entities, NODES_PER_GROUP):
        view = _View(table, a, b)
        fleet = _Fleet(view)
        if table.scope is Scope.GPU:
            links = [view.window(c, n) for c in LINK_COLUMNS]
            # An hour the GPU reported nothing in is not stored: its links were missing too
            # (where the fleet has NVLink at all), as the live store reads it.
            links[-1] = np.where(np.isnan(links[-1]), fill, links[-1]).astype(np.float32)
            part = gpu_hours(fleet, n, links)
        else:
            part = HOURLY[table.scope](fleet, n)
        x[:, a:b] = part.transpose(1, 0, 2)
    hours = table.first_hour + np.arange(n, dtype=np.int64)
    return RunFeatures(table.scope, x, (hours + 1).astype(np.float64) * HOUR,
                       [en.key for en in table.entities], [en.node for en in table.entities],
                       hours)
