"""Are the failure windows right? Coverage and sharpness of what an alert showed.

A pre-failure alert is an escalation that carried at least one raw window (`AlertRecord.windows`)
and was followed by a failure it can predict (events.match_keys) between the minimum warning and
seven days later (the watch view's lead window); its failure time is the first such failure.
For those alerts this scores, per failure mode and overall:

- coverage: the share whose failure fell inside the window shown, and sharpness: the median
  width of that window in hours;
- the same for the raw (uncalibrated) windows, for the calibrated ones
  (models/predictor/interval.py) where a calibration is given, and for the constant baselines:
  the calibration's own per-mode constant at the same coverage, and the fixed "1-24 h";
- how many alerts showed no window because every source was hidden.

`pre_failure` also yields the (raw window, failure time) pairs a calibration is fitted on, so a
fit and a score read the same records.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from models.evaluation.events import AlertRecord, Failure, match_keys
from models.evaluation.matching import DAY, HOUR, MIN_WARNING_S, FailureIndex
from models.predictor.interval import Calibration, Interval, Pair, RawWindow, fit, shown

FIXED = (1.0, 24.0)  # the constant "1-24 h" the issue measured the windows against
OVERALL = "all"


@dataclass(frozen=True, slots=True)
class PreFailure:
    raws: tuple[RawWindow, ...]
    actual_h: float  # hours from the alert to the failure
    mode: str  # the failure's
    level: int = 0  # the level the alert escalated to (0: not recorded)

    def pairs(self) -> list[Pair]:
        return [Pair(r, self.actual_h) for r in self.raws]

    def to_dict(self) -> dict[str, Any]:
        return {"raws": [r.to_dict() for r in self.raws], "actual_h": self.actual_h,
                "mode": self.mode, "level": self.level}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> PreFailure:
        return PreFailure(tuple(RawWindow.from_dict(r) for r in d["raws"]),
                          float(d["actual_h"]), str(d["mode"]), int(d.get("level", 0)))


def pre_failure(alerts: Iterable[AlertRecord], failures: Sequence[Failure],
                index: FailureIndex, min_lead_s: float = MIN_WARNING_S,
                max_lead_s: float = 7 * DAY) -> list[PreFailure]:
    out = []
    for a in alerts:
        if not a.windows:
            continue
        hits = [i for k in match_keys(a.entity, a.scope, a.node)
                for i in index.between(k, a.time + min_lead_s, a.time + max_lead_s)]
        if hits:
            first = min(hits, key=lambda i: failures[i].time)
            out.append(PreFailure(a.windows, (failures[first].time - a.time) / HOUR,
                                  failures[first].mode, a.level))
    return out


def _side(intervals: Sequence[tuple[float, float, float] | None]) -> dict[str, Any]:
    """(lo, hi, actual) per alert, None where nothing was shown."""
    shown_ = [x for x in intervals if x is not None]
    if not shown_:
        return {"n": 0, "coverage": None, "median_width_h": None}
    return {"n": len(shown_),
            "coverage": sum(lo <= t <= hi for lo, hi, t in shown_) / len(shown_),
            "median_width_h": statistics.median(hi - lo for lo, hi, _ in shown_)}


def _as(iv: Interval | None, t: float) -> tuple[float, float, float] | None:
    return None if iv is None else (iv.lo_h, iv.hi_h, t)


def window_scores(pres: Sequence[PreFailure], cal: Calibration | None) -> dict[str, Any]:
    """Per failure mode and OVERALL: raw, calibrated and constant coverage and widths."""
    groups: dict[str, list[PreFailure]] = defaultdict(list)
    for p in pres:
        groups[p.mode].append(p)
        groups[OVERALL].append(p)
    out: dict[str, Any] = {}
    for mode, ps in sorted(groups.items()):
        row: dict[str, Any] = {
            "alerts": len(ps),
            "raw": _side([_as(shown(p.raws, None), p.actual_h) for p in ps]),
            "fixed_1_24h": _side([(*FIXED, p.actual_h) for p in ps])}
        if cal is not None:
            ivs = [shown(p.raws, cal) for p in ps]
            calibrated = [_as(iv, p.actual_h) for iv, p in zip(ivs, ps, strict=True)]
            row["calibrated"] = _side(calibrated)
            row["hidden"] = sum(c is None for c in calibrated)
            # Which source each shown window came from (constant: every source was hidden).
            row["sources"] = dict(Counter(iv.raw.source for iv in ivs if iv is not None))
            # The constant at the same coverage, for the mode the window named (what a reader
            # of the alert would have been told without any estimate).
            row["constant"] = _side([
                None if (b := cal.baseline(p.raws[0].mode)) is None else (*b, p.actual_h)
                for p in ps])
        out[mode] = row
    return {"coverage": cal.coverage if cal is not None else None, "by_mode": out}


def pooled(runs: Iterable[Sequence[Mapping[str, Any]]]) -> list[PreFailure]:
    """Pre-failure records of several runs (as kept in their outputs), in one list."""
    return [PreFailure.from_dict(d) for run in runs for d in run]


def split_in_time(runs: Iterable[Sequence[Mapping[str, Any]]]
                  ) -> tuple[list[PreFailure], list[PreFailure]]:
    """Each run's pre-failure records cut in two at its middle (they are kept in the order the
    alerts were raised, so the first half is the earlier), the halves of every run pooled."""
    earlier: list[PreFailure] = []
    later: list[PreFailure] = []
    for run in runs:
        xs = [PreFailure.from_dict(d) for d in run]
        earlier += xs[: len(xs) // 2]
        later += xs[len(xs) // 2:]
    return earlier, later


def recalibrated(runs: Sequence[Sequence[Mapping[str, Any]]],
                 coverage: float) -> dict[str, Any]:
    """What a fleet's own labels would give: a calibration fitted on the earlier half of the
    runs' pre-failure alerts (held out by time), scored on the later half."""
    earlier, later = split_in_time(runs)
    cal = fit((pair for p in earlier for pair in p.pairs()), coverage,
              f"the earlier half of the same runs' pre-failure alerts ({len(earlier)})")
    return window_scores(later, cal) | {"fitted_on": cal.fitted_on, "hidden": cal.hidden}
