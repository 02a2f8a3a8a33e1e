"""When, not only whether: extrapolating a rule's slow-growth signal to a time to failure.

A rule says whether an entity's error stream is abnormal; this module says how soon the
failure it announces is expected, from how fast the stream grows. The law is the seed
system's: correctable-ECC growth of 15 % a day predicts a failure 72 h ahead (issue 16,
"When, not only whether"). Read as an exponential extrapolation, a failure is expected once
the error rate has grown by a fixed factor beyond today's, so the time left is inversely
proportional to the growth rate:

    ttf_h = FAIL_EFOLDS / r,   r = relative growth per hour (e-folds per hour)
    FAIL_EFOLDS = 72 h * ln(1.15) / 24 h = 0.419 e-folds (a further x1.52 of the rate)

so 15 %/day -> 72 h, 40 %/day -> 30 h, doubling every 6 h -> 3.6 h.

The growth rate is the slope of an exponential fit (least squares of log1p(count) against
time) over blocks of hours of the entity's own 1-h history. Three guards keep noise and
steps from reading as growth:
- the fit starts at the first block with errors: a new error stream is a step from nothing,
  not growth (the rule's own gates judge the step), and it needs `min_blocks` blocks since;
- the slope used is the fit's lower confidence bound (slope - 2 standard errors), so a
  steady but bursty stream (a benign correctable-error carrier) reads as no growth;
- no positive lower bound, no estimate: NaN, and the rule stays at watch at most.
A stream with no estimate is not always one the fit knows nothing about: with `min_blocks`
blocks since its first errors, a point slope (the fit itself, not its lower bound) that puts
the failure beyond a day, or shows no growth, is evidence of days (`settled`); the levels may
then keep it at watch rather than let a recurrence test raise it (`level_risk`).

Vectorised over every entity (numpy only), a few array operations on [entity, block].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.predictor.interval import GROWTH, RawWindow, active_calibration, base_rate

F64 = npt.NDArray[np.float64]

# The seed's anchor (issue 16): 15 % a day -> failure 72 h ahead.
ANCHOR_GROWTH_PER_DAY = 0.15
ANCHOR_TTF_H = 72.0
FAIL_EFOLDS = ANCHOR_TTF_H * math.log1p(ANCHOR_GROWTH_PER_DAY) / 24.0
# A point estimate is read as the window from 1/WINDOW_FACTOR to WINDOW_FACTOR times it
# (`window_of`, design choice: the factor the seed's one anchor leaves open).
WINDOW_FACTOR = 2.0


@dataclass(frozen=True, slots=True)
class GrowthConfig:
    # Blocks of 3 h smooth a sparse burst process (the simulator's M1 bursts arrive at 0.5 to
    # a few per hour, docs/simulator.md `failures.shapes`) while 16 of them span 48 h, within
    # the 72 h an NVLink's 1-h tier holds: design choice.
    block_h: int = 3
    blocks: int = 16
    min_blocks: int = 4  # 12 h since the first errors before a growth is trusted
    # Two standard errors below the slope: a steady lognormal burst stream (sigma 1.7, the
    # simulator's burst law) then reads as growth 3 % of the time and as within a day 0.5 %
    # (tests/detectors/test_growth.py measures it); one standard error gave 17 % and 4 %.
    z: float = 2.0
    fail_efolds: float = FAIL_EFOLDS
    # Levels follow the predicted time (issue 16): beyond a day watch, within a day warning
    # (the point estimate), critical only when the whole window the explanation gives
    # (`window_of`: up to twice the estimate) lies within the hour. A page wakes a person and
    # drains a node: a "3-13 h" estimate is a warning however fast the growth.
    warn_within_h: float = 24.0
    crit_within_h: float = 1.0


def growth_rate(blocks: F64, c: GrowthConfig, floor: float = 1.0) -> F64:
    """Per entity, the lower confidence bound of the exponential growth rate (e-folds per
    hour) of [entity, block] values, oldest block first; NaN where too short a stream since
    its first errors or no positive growth. Values are read as log1p(x / floor): counts with
    floor 1, a rate such as a bit-error rate with the floor below which it is noise."""
    return _fit(blocks, c, floor)[0]


def _fit(blocks: F64, c: GrowthConfig, floor: float) -> tuple[F64, F64, F64]:
    """(lower-bound rate or NaN as in growth_rate, point slope, blocks since first errors)."""
    n, k = blocks.shape
    rate, slope, m = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n)
    if n == 0 or k == 0:
        return rate, slope, m
    # Only streams with errors have a fit: at fleet scale nearly every NVLink is silent.
    active = np.flatnonzero(np.nan_to_num(blocks).max(axis=1) > 0)
    rate[active], slope[active], m[active] = _fit_active(blocks[active], c, floor)
    return rate, slope, m


def _fit_active(blocks: F64, c: GrowthConfig, floor: float) -> tuple[F64, F64, F64]:
    k = blocks.shape[1]
    y = np.log1p(np.maximum(np.nan_to_num(blocks), 0.0) / floor)
    t = np.arange(k, dtype=np.float64) * c.block_h
    has = y > 0
    first = np.where(has.any(axis=1), np.argmax(has, axis=1), k)
    w = (np.arange(k)[None, :] >= first[:, None]).astype(np.float64)
    m = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tm = (w * t).sum(axis=1) / m
        ym = (w * y).sum(axis=1) / m
        dt = (t[None, :] - tm[:, None]) * w
        sxx = (dt**2).sum(axis=1)
        slope = (dt * (y - ym[:, None])).sum(axis=1) / sxx
        resid = (y - ym[:, None] - slope[:, None] * (t[None, :] - tm[:, None])) * w
        se = np.sqrt((resid**2).sum(axis=1) / np.maximum(m - 2, 1) / sxx)
        low = slope - c.z * se
    ok = (m >= c.min_blocks) & np.isfinite(low) & (low > 0)
    out: F64 = np.where(ok, low, np.nan)
    return out, slope, m


def settled(per_hour: F64, c: GrowthConfig, floor: float = 1.0) -> npt.NDArray[np.bool_]:
    """Per entity, from its hourly history as in `estimate`: no estimate, yet `min_blocks`
    blocks since the first errors whose point slope puts the failure beyond `warn_within_h`
    (or shows no growth). Such a stream was fitted and reads as days, not as unknown."""
    return _settled(*_fit(in_blocks(per_hour, c), c, floor), c)


def assess(per_hour: F64, c: GrowthConfig, floor: float = 1.0) -> tuple[F64, F64, npt.NDArray[
        np.bool_]]:
    """(growth, time to failure, settled) as `estimate` and `settled` give them, from one fit."""
    rate, slope, m = _fit(in_blocks(per_hour, c), c, floor)
    return rate, time_to_failure(rate, c), _settled(rate, slope, m, c)


def _settled(rate: F64, slope: F64, m: F64, c: GrowthConfig) -> npt.NDArray[np.bool_]:
    with np.errstate(invalid="ignore"):
        out: npt.NDArray[np.bool_] = (np.isnan(rate) & (m >= c.min_blocks) & np.isfinite(slope)
                                      & (slope <= c.fail_efolds / c.warn_within_h))
    return out


def time_to_failure(rate: F64, c: GrowthConfig) -> F64:
    """Hours until the failure the growth announces (NaN where no growth)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out: F64 = np.where(rate > 0, c.fail_efolds / rate, np.nan)
    return out


def in_blocks(per_hour: F64, c: GrowthConfig) -> F64:
    """[entity, hour] (oldest first, a multiple of block_h long) summed into blocks."""
    n, h = per_hour.shape
    out: F64 = per_hour.reshape(n, h // c.block_h, c.block_h).sum(axis=2)
    return out


def estimate(per_hour: F64, c: GrowthConfig, floor: float = 1.0) -> tuple[F64, F64]:
    """(growth e-folds per hour, time to failure in hours) per entity from its hourly
    history [entity, block_h * blocks hours], oldest first."""
    rate = growth_rate(in_blocks(per_hour, c), c, floor)
    return rate, time_to_failure(rate, c)


def level_risk(fires: npt.NDArray[np.bool_], ttf_h: F64, c: GrowthConfig, watch: float,
               warn: float, crit: float, recurs: npt.NDArray[np.bool_] | None = None,
               follow_ttf: bool = True,
               days: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.float32]:
    """A rule that fires is at watch. Two routes raise it:
    (a) a time estimate exists: the level follows it, warning within a day, critical when its
        window's upper bound (`window_of`) is within the hour; an estimate of days keeps it
        at watch;
    (b) no estimate (too little history since the first errors, or too noisy a stream):
        the rule's own recurrence test (`recurs`) decides warning, as before levels had a time;
        except where `days` (see `settled`) says the fit reads as days: that stays at watch.
    With follow_ttf False only (b) holds, estimate or not, `days` ignored: the rules before
    they had a time."""
    n = len(fires)
    known = np.isfinite(ttf_h) if follow_ttf else np.zeros(n, bool)
    rec = np.zeros(n, bool) if recurs is None else recurs
    if follow_ttf and days is not None:
        rec = rec & ~days
    with np.errstate(invalid="ignore"):
        risk = np.where(fires, watch, 0.0)
        risk = np.where(fires & ~known & rec, warn, risk)
        risk = np.where(fires & known & (ttf_h <= c.warn_within_h), warn, risk)
        risk = np.where(fires & known & (ttf_h * WINDOW_FACTOR <= c.crit_within_h), crit, risk)
    return risk.astype(np.float32)


def when_text(ttf_h: float, mode: str | None = None) -> str:
    """'failure expected in 1-3 days' from a point estimate. Read raw, half to twice it (the
    factor the seed's one anchor leaves open); where the shipped window calibration knows the
    mode (models/predictor/interval.py), the interval that held the failure for its stated
    share of held-out alerts, or none at all where that is no sharper than a constant."""
    lo, hi = window_of(ttf_h)
    cal = active_calibration() if mode is not None else None
    if cal is None or mode is None:
        return f"failure expected in {_span(lo, hi)}"
    raw = RawWindow(GROWTH, mode, lo, hi, ttf_h, math.nan)
    iv = cal.apply(raw) or base_rate(raw, cal)
    if iv is None:
        return "no failure window: this rule's are no sharper than a constant one"
    if iv.raw.source != GROWTH:
        share = f"{iv.coverage:.0%} of such alerts" if iv.coverage is not None else ""
        return (f"failure expected in {_span(iv.lo_h, iv.hi_h)} ({share}; this rule's own "
                "estimates are no sharper)")
    share = f"{iv.coverage:.0%} of such alerts" if iv.coverage is not None else "uncalibrated"
    if not math.isfinite(iv.hi_h):
        lo_text = f"{_round(iv.lo_h)} h" if iv.lo_h < 48 else f"{_round(iv.lo_h / 24)} days"
        return f"failure expected in more than {lo_text} ({share})"
    return f"failure expected in {_span(iv.lo_h, iv.hi_h)} ({share})"


def window_of(ttf_h: float) -> tuple[float, float]:
    """(after_h, within_h) around a point estimate: half to twice it."""
    return ttf_h / WINDOW_FACTOR, ttf_h * WINDOW_FACTOR


def _span(lo: float, hi: float) -> str:
    if hi < 48:
        return f"{_round(lo)}-{_round(hi)} h"
    return f"{_round(lo / 24)}-{_round(hi / 24)} days"


def _round(x: float) -> str:
    return f"{x:.0f}" if x >= 10 or x == int(x) else f"{x:.1f}".rstrip("0").rstrip(".")


def growth_per_day(rate_per_h: float) -> float:
    """e-folds per hour as a daily growth in percent: 0.00582/h -> 15 %/day."""
    return 100.0 * math.expm1(rate_per_h * 24.0)
