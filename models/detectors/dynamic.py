"""Tier (b): dynamic thresholds. Per-device baselines that do not learn from flagged points,
peer comparison inside a node, sustained-duration rules, rate rules and step rules.

Rules that read rollups recompute once per minute of data time (the finest tier's bucket) and
reuse their findings in between, so a 5-s tick stays cheap at fleet scale.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.evidence import GPU_TEMP, HBM_ECC, IB_BER, MEM_TEMP, NVLINK_ERRORS
from models.detectors.findings import F64, Finding, kept
from models.detectors.growth import GrowthConfig, assess, level_risk
from models.detectors.view import (
    FleetView,
    ScopeView,
    recent,
    recent_sum,
    slot_ranges,
    tier_version,
)

B = npt.NDArray[np.bool_]
T = TypeVar("T")
HOUR = 3600.0
_NVL_ALL = ("nvlink_crc_flit", "nvlink_crc_data", "nvlink_replay", "nvlink_recovery")
# NVLink slots the hour-resolution rules read at once. At 180,000 links the four counters' 48-h
# windows, their float64 hourly sums and the growth fit's arrays were about 270 MB of
# temporaries at once, the process's peak at an hour's first tick; a slice's are about 15 MB.
# Every quantity is per link, so the slices give the whole's numbers.
SLOT_CHUNK = 16_384


@dataclass(frozen=True, slots=True)
class DynamicConfig:
    watch_risk: float = 0.35
    warn_risk: float = 0.65
    crit_risk: float = 0.95
    baseline_half_life_h: float = 72.0
    # Sustained HBM temperature (issue 2): above 85 degC for 3 h.
    hbm_temp_c: float = 85.0
    hbm_temp_hold_s: float = 3 * HOUR
    hbm_temp_risk: float = 0.25
    # Correctable ECC: bursts that recur and grow (docs/simulator.md, `failures.shapes`, M1).
    sbe_min_count: float = 20.0
    sbe_factor: float = 10.0
    sbe_recur_hours: int = 4  # of the last 6 h with errors: warning
    sbe_watch_hours: int = 2  # of the last 6 h with errors: watch (one burst is not growth)
    sbe_over_peak: float = 2.0  # and this many times the GPU's own (decaying) worst hour
    # ... and this many times its usual hour over its last finished days (the store's daily
    # buckets): a steady carrier's bursts stay within it; 0 turns the check off.
    sbe_over_usual: float = 10.0
    usual_days: int = 5
    # A GPU whose stream ran on at least this many of those days (an established carrier: its
    # heavy-tailed bursts set new records by chance) fires only on a fitted growth; 0: off.
    # Tuned on shifted 2003/2007 and ci 2000: 2 days cut the rules' watch false alarms per
    # 1,000 node-days from 323 to 138 and 266 to 151 at the same precursor recall, ci 2000
    # unchanged; 1 day cut more (97, 119) but lost a warning hit on ci 2000.
    sbe_established_days: int = 2
    sbe_burst_min: float = 5.0
    remap_window_s: float = 24 * HOUR
    remap_min: float = 2.0
    # Peer comparison: a GPU warmer than its node's median beyond its own usual offset.
    peer_window_s: float = 1800.0
    peer_watch_c: float = 5.0
    peer_warn_c: float = 10.0
    # InfiniBand: ibdiagnet's BER threshold 1e-12; a step of x1000 over the port's baseline.
    ber_limit: float = 1e-12
    ber_step: float = 1000.0
    ber_floor: float = 1e-15
    # NVLink: errors that recur on one link, or repeated recoveries (6.3, M3).
    nvl_min_errors: float = 50.0
    nvl_factor: float = 10.0
    nvl_recoveries: float = 2.0
    nvl_recur_hours: int = 4  # of the last 6 h with errors: recoveries recur with shrinking gaps
    # When: growth rules take their level from the predicted time (models/detectors/growth.py).
    growth: GrowthConfig = field(default_factory=GrowthConfig)
    # False: the recurrence tests alone set warning, estimate or not (the rules before they had
    # a time; kept to measure the change against).
    levels_follow_ttf: bool = True
    # The rules on which a stream the fit has read for min_blocks blocks, and whose point growth
    # says days (or no growth), stays at watch instead of taking the recurrence route to warning
    # (growth.settled). NVLink only: on the ci tuning seeds 2000-2002 it removes NVLink warning
    # false alarms raised days ahead, while on sbe_growth it cost an HBM detection (docs/design.md,
    # "growth"). Empty: the recurrence decides every stream with no estimate.
    fitted_days_keep_watch: tuple[str, ...] = ("nvlink_errors",)


class Baseline:
    """Per-entity EWMA of an hourly quantity; flagged entities do not pull it toward their
    anomaly, so a slowly developing fault cannot teach the baseline that it is normal."""

    def __init__(self, half_life_h: float) -> None:
        self.alpha = 1.0 - 0.5 ** (1.0 / half_life_h)
        self.mean: F64 = np.zeros(0)
        # The worst unflagged hour, decaying with the same half-life: bursty but stable sources
        # (benign correctable-ECC carriers) are judged against their own bursts, not their mean.
        self.peak: F64 = np.zeros(0)
        self.count: npt.NDArray[np.int64] = np.zeros(0, np.int64)

    def _fit(self, n: int) -> None:
        if n > len(self.mean):
            grow = n - len(self.mean)
            self.mean = np.concatenate([self.mean, np.zeros(grow)])
            self.peak = np.concatenate([self.peak, np.zeros(grow)])
            self.count = np.concatenate([self.count, np.zeros(grow, np.int64)])

    def take(self, keep: npt.NDArray[np.intp]) -> None:
        self.mean, self.peak, self.count = (kept(self.mean, keep), kept(self.peak, keep),
                                            kept(self.count, keep))

    def update(self, value: F64, flagged: B) -> None:
        self._fit(len(value))
        ok = np.isfinite(value) & ~flagged
        first = ok & (self.count[: len(value)] == 0)
        m = self.mean[: len(value)]
        m[first] = value[first]
        later = ok & ~first
        m[later] += self.alpha * (value[later] - m[later])
        pk = self.peak[: len(value)]
        pk[ok] = np.maximum(pk[ok] * (1.0 - self.alpha), value[ok])
        self.count[: len(value)] += ok

    def get(self, n: int) -> F64:
        self._fit(n)
        return np.where(self.count[:n] > 0, self.mean[:n], np.nan)

    def get_peak(self, n: int) -> F64:
        self._fit(n)
        return np.where(self.count[:n] > 0, self.peak[:n], np.nan)


def _nanmean(win: npt.NDArray[np.float32]) -> F64:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows stay NaN
        out: F64 = np.nanmean(win, axis=1).astype(np.float64)
        return out


def hourly(view: ScopeView, metric: str, hours: int,
           slots: slice | None = None) -> npt.NDArray[np.float64]:
    """[entity, hour] sums over the last `hours` hours, folded from whatever resolution covers
    them; missing buckets count as zero. `slots`: only those entity slots."""
    flat, per = _buckets(view, metric, hours, slots)
    out: F64 = flat.astype(np.float64).reshape(len(flat), hours, per).sum(axis=2)
    return out


def _buckets(view: ScopeView, metric: str, hours: int,
             slots: slice | None) -> tuple[npt.NDArray[np.float32], int]:
    """The last `hours` hours' buckets [entity, hours * per], missing ones zero, and how many
    buckets make an hour (`per`)."""
    win, res = recent(view, metric, hours * HOUR, slots=slots)
    step = view.step_s if res == "raw" else next(
        t.step_s for t in view.tier_specs if t.name == res)
    per = max(1, round(HOUR / step))
    flat = np.nan_to_num(win[:, -hours * per:])
    if flat.shape[1] < hours * per:
        flat = np.pad(flat, ((0, 0), (hours * per - flat.shape[1], 0)))
    return flat, per


def hourly_total(view: ScopeView, metrics: tuple[str, ...], hours: int,
                 slots: slice | None = None) -> F64:
    """sum(hourly(view, m, hours, slots) for m in metrics), from zeros and in the metrics'
    order (so the same numbers), added into one array rather than a new one per metric."""
    out: F64 | None = None
    for m in metrics:
        flat, per = _buckets(view, m, hours, slots)
        if out is None:
            out = np.zeros((len(flat), hours))
        if per == 1:
            # One bucket an hour (the hour tier): its sum is the bucket, and adding it into
            # zeros drops a -0.0 as the sum would; float32 widens to float64 exactly.
            np.add(out, flat, out=out)
        else:
            np.add(out, flat.astype(np.float64).reshape(len(flat), hours, per).sum(axis=2),
                   out=out)
    if out is None:
        raise ValueError("hourly_total needs at least one metric")
    return out


def _copied(value: T) -> T:
    """A copy of an array, or of a tuple's arrays."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple):
        return tuple(_copied(v) for v in value)  # type: ignore[return-value]
    return value


def node_median(values: F64, node_of: npt.NDArray[np.int32]) -> F64:
    """Median of each entity's node peers (itself included), vectorised over nodes."""
    n = len(values)
    if n == 0:
        return np.zeros(0)
    nodes = node_of[:n]
    order = np.argsort(nodes, kind="stable")
    sn = nodes[order]
    start = np.r_[0, np.flatnonzero(sn[1:] != sn[:-1]) + 1]
    seg = np.cumsum(np.r_[True, sn[1:] != sn[:-1]]) - 1
    rank = np.arange(n) - start[seg]
    grid = np.full((len(start), int(rank.max()) + 1), np.nan)
    grid[seg, rank] = values[order]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN nodes give NaN, as meant
        med = np.nanmedian(grid, axis=1)
    out = np.empty(n)
    out[order] = med[seg]
    return out


class DynamicThresholds:
    name = "dynamic"

    def __init__(self, config: DynamicConfig | None = None) -> None:
        self.c = config or DynamicConfig()
        hl = self.c.baseline_half_life_h
        self.sbe_base = Baseline(hl)
        self.peer_base = {m: Baseline(hl) for m in ("gpu_temp", "mem_temp")}
        self.ber_base = Baseline(hl)
        self.nvl_base = Baseline(hl)
        self.hbm_since: F64 = np.zeros(0)
        self._prev_drift: dict[str, F64] = {}
        self._minute = -1
        self._hour = -1
        self._cached: list[Finding] = []
        # What was made of hour-resolution windows, kept until the store's hour tier moves:
        # at 180,000 NVLink links their 48-hour growth fits were most of a minute's work.
        self._memos: dict[Hashable, tuple[Hashable, Any]] = {}

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        gpu = view.scope(Scope.GPU)
        out = [self._hbm_sustained(gpu, now)]
        minute, hour = int(now // 60), int(now // HOUR)
        sizes_changed = any(len(f.risk) != len(view.scope(f.scope)) for f in self._cached)
        if minute != self._minute or sizes_changed:
            self._minute = minute
            self._cached = (
                self._sbe(gpu) + self._peer(gpu)
                + self._ber(view.scope(Scope.IB_PORT))
                + self._nvlink(view.scope(Scope.NVLINK))
            )
            if hour != self._hour:
                self._hour = hour
                self._learn(view)
        return out + self._cached

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        if scope is Scope.GPU:
            for base in (self.sbe_base, *self.peer_base.values()):
                base.take(keep)
            self.hbm_since = kept(self.hbm_since, keep)
            self._prev_drift = {m: kept(d, keep) for m, d in self._prev_drift.items()}
        elif scope is Scope.IB_PORT:
            self.ber_base.take(keep)
        elif scope is Scope.NVLINK:
            self.nvl_base.take(keep)
        # The minute's findings are slot-indexed: made again on the next tick.
        self._minute = -1
        self._memos.clear()
        self._cached = [f for f in self._cached if f.scope is not scope]

    def _memo(self, key: Hashable, view: ScopeView, seconds: float, make: Callable[[], T]) -> T:
        """make(), or what it gave while the windows of the last `seconds` read the same
        (a copy: findings hold these arrays). Made anew where the view cannot tell."""
        stamp = tier_version(view, seconds)
        held = self._memos.get(key)
        if stamp is None or held is None or held[0] != stamp:
            value = make()
            if stamp is not None:
                self._memos[key] = (stamp, value)
            held = (stamp, value)
        return _copied(held[1])

    # ---- baselines ----------------------------------------------------------------------------
    def _flagged(self, rule: str, n: int) -> B:
        for f in self._cached:
            if f.rule == rule:
                return np.asarray(f.risk[:n] > 0)
        return np.zeros(n, bool)

    def _learn(self, view: FleetView) -> None:
        gpu, ib, nvl = (view.scope(s) for s in (Scope.GPU, Scope.IB_PORT, Scope.NVLINK))
        if len(gpu):
            self.sbe_base.update(self._sbe_hours(gpu, HOUR), self._flagged("sbe_growth", len(gpu)))
            for metric, base in self.peer_base.items():
                base.update(self._residual(gpu, metric), self._flagged(f"peer_{metric}", len(gpu)))
        if len(ib):
            ber = _nanmean(recent(ib, "ib_ber", HOUR)[0])
            self.ber_base.update(ber, self._flagged("ib_ber_step", len(ib)))
        if len(nvl):
            self.nvl_base.update(self._nvl_errors(nvl, HOUR),
                                 self._flagged("nvlink_errors", len(nvl)))

    # ---- GPU memory ---------------------------------------------------------------------------
    def _hbm_sustained(self, g: ScopeView, now: float) -> Finding:
        c, n = self.c, len(g)
        if len(self.hbm_since) < n:
            self.hbm_since = np.concatenate([self.hbm_since, np.full(n - len(self.hbm_since),
                                                                     np.nan)])
        temp = g.latest("mem_temp")
        since = self.hbm_since[:n]
        hot, cool = temp > c.hbm_temp_c, temp <= c.hbm_temp_c  # NaN is neither: a gap waits
        since[hot & np.isnan(since)] = now
        since[cool] = np.nan
        held = now - since
        # Below every alert level on its own: HBM temperature is a weak failure predictor
        # (Schroeder et al., DRAM Errors in the Wild, SIGMETRICS 2009); it shows in the risk
        # and explanation and adds to other signals.
        risk = np.where(held >= c.hbm_temp_hold_s, np.float32(c.hbm_temp_risk), np.float32(0))
        return Finding("hbm_temp_sustained", Scope.GPU, risk.astype(np.float32), held / HOUR,
                       c.hbm_temp_hold_s / HOUR,
                       f"hours with HBM temperature above {c.hbm_temp_c:g} degC",
                       evidence=MEM_TEMP)

    def _sbe_hours(self, g: ScopeView, seconds: float) -> F64:
        vol = recent_sum(g, "ecc_sbe_volatile", seconds)
        agg = recent_sum(g, "ecc_sbe_aggregate", seconds)
        return np.where(np.isnan(vol), agg, vol)

    def _sbe(self, g: ScopeView) -> list[Finding]:
        c, n = self.c, len(g)
        if n == 0:
            return []
        short = self._sbe_hours(g, HOUR)
        # Growth needs a past to grow from: until a GPU has a learned hour, it is not judged.
        learned = self.sbe_base.get(n)
        base = np.where(np.isnan(learned), np.inf, learned)
        recur = self._memo("sbe_recur", g, 6 * HOUR, lambda: np.sum(
            hourly(g, "ecc_sbe_volatile", 6) >= c.sbe_burst_min, axis=1))
        peak = np.nan_to_num(self.sbe_base.get_peak(n), nan=np.inf)
        usual_days, active_days = self._sbe_usual(g)
        usual = np.nan_to_num(usual_days, nan=0.0) if usual_days is not None else np.zeros(n)
        with np.errstate(invalid="ignore"):
            rising = ((short >= c.sbe_min_count) & (short >= c.sbe_factor * np.maximum(base, 1.0))
                      & (short >= c.sbe_over_peak * peak)
                      & (short >= c.sbe_over_usual * np.maximum(usual, 1.0)))
        rate, ttf, days = self._sbe_growth(g)
        fires = rising & (recur >= c.sbe_watch_hours)
        if c.sbe_established_days > 0 and active_days is not None:
            fires &= (active_days < c.sbe_established_days) | np.isfinite(ttf)
        # A stream with no finished day behind it (a fresh install, a swapped-in GPU) has no
        # usual to be judged against, and its level alone does not tell a steady carrier from a
        # new fault: until it has a day, only a fitted growth raises it past watch.
        has_day = np.ones(n, bool) if usual_days is None else ~np.isnan(usual_days)
        risk = self._level(fires, ttf, (recur >= c.sbe_recur_hours) & has_day, days,
                           "sbe_growth")
        remaps = recent_sum(g, "remapped_rows_correctable", c.remap_window_s)
        with np.errstate(invalid="ignore"):
            remapped = remaps >= c.remap_min
        return [
            Finding("sbe_growth", Scope.GPU, risk, short,
                    c.sbe_factor, "correctable ECC errors in the last hour (vs x baseline)",
                    ttf_h=ttf, growth=rate, mode="M1_hbm", evidence=HBM_ECC),
            # A second remap is evidence beyond one benign remap (docs/simulator.md, `benign`),
            # whose pending flag already shows in the hard rules. Remaps and correctable errors
            # come from one failing memory: the remaps' time is the errors' growth, and so they
            # are one piece of evidence with them (fusion counts it once).
            Finding("remap_step", Scope.GPU, self._level(remapped, ttf, None, days, "remap_step"),
                    remaps,
                    c.remap_min,
                    f"rows remapped in the last {c.remap_window_s / HOUR:g} h",
                    ttf_h=ttf, growth=rate, mode="M1_hbm", evidence=HBM_ECC),
        ]

    def _level(self, fires: B, ttf: F64, recurs: B | None = None, days: B | None = None,
               rule: str = "") -> npt.NDArray[np.float32]:
        """Level from the predicted time where there is one, else from `recurs` (the rule's
        recurrence test; None: watch at most) unless `days` says the fit reads as days and
        `rule` is one of fitted_days_keep_watch."""
        c = self.c
        days = days if rule in c.fitted_days_keep_watch else None
        return level_risk(fires, ttf, c.growth, c.watch_risk, c.warn_risk, c.crit_risk, recurs,
                          c.levels_follow_ttf, days)

    def _growth(self, per_hour: F64, floor: float = 1.0) -> tuple[F64, F64, B | None]:
        """(growth, time to failure, fitted-days mask or None when no rule uses it)."""
        rate, ttf, days = assess(per_hour, self.c.growth, floor)
        return rate, ttf, days if self.c.fitted_days_keep_watch else None

    def _history(self, v: ScopeView, metrics: tuple[str, ...]) -> F64:
        """[entity, hour] over the growth fit's span: the larger of the metrics' hourly sums
        (the volatile and aggregate counters count the same errors; either may be missing)."""
        hours = self.c.growth.block_h * self.c.growth.blocks
        out: F64 = np.max([hourly(v, m, hours) for m in metrics], axis=0)
        return out

    def _sbe_usual(self, g: ScopeView) -> tuple[F64 | None, npt.NDArray[np.int64] | None]:
        """The GPU's mean correctable errors per hour over its last `usual_days` finished days,
        from the store's daily buckets (NaN without them). Unlike the learned baseline, which
        does not learn while the rule flags the GPU, this follows a carrier that started
        flagged: a healthy GPU logging a steady stream (many bursts a day) is judged against
        its own stream after a day, not held at watch for good. Also, how many of those days
        had errors. None: the store keeps no daily buckets, or the check is off."""
        day = next((t for t in g.tier_specs if abs(t.step_s - 86400.0) < 1e-9), None)
        if day is None or self.c.sbe_over_usual <= 0:
            return None, None
        n = min(self.c.usual_days, day.length)
        days = np.fmax(*[g.window(m, n, tier=day.name) for m in ("ecc_sbe_volatile",
                                                                 "ecc_sbe_aggregate")])
        active: npt.NDArray[np.int64] = np.sum(np.nan_to_num(days) > 0, axis=1)
        return _nanmean(days) / 24.0, active

    def _sbe_growth(self, g: ScopeView) -> tuple[F64, F64, B | None]:
        return self._memo("sbe_growth", g, self._history_s(), lambda: self._growth(
            self._history(g, ("ecc_sbe_volatile", "ecc_sbe_aggregate"))))

    def _history_s(self) -> float:
        return self.c.growth.block_h * self.c.growth.blocks * HOUR

    # ---- peers --------------------------------------------------------------------------------
    def _residual(self, g: ScopeView, metric: str) -> F64:
        """Temperature above the node's median, less what the GPU's extra power explains:
        a GPU that runs warmer because it works harder than its peers is not anomalous."""
        level = _nanmean(recent(g, metric, self.c.peer_window_s)[0])
        power = _nanmean(recent(g, "power_draw", self.c.peer_window_s)[0])
        x = level - node_median(level, g.node_of)
        p = power - node_median(power, g.node_of)
        ok = np.isfinite(x) & np.isfinite(p)
        denom = float(np.sum(p[ok] ** 2))
        # One fleet-wide slope (degC per W), fitted through the origin on this minute's data.
        slope = float(np.clip(np.sum(x[ok] * p[ok]) / denom, 0.0, 0.5)) if denom > 0 else 0.0
        out: F64 = x - slope * np.nan_to_num(p)
        return out

    def _peer(self, g: ScopeView) -> list[Finding]:
        c, n, out = self.c, len(g), []
        if n == 0:
            return []
        for metric, base in self.peer_base.items():
            now_drift = self._residual(g, metric) - np.nan_to_num(base.get(n), nan=0.0)
            prev = self._prev_drift.get(metric, np.zeros(0))
            prev = np.concatenate([prev, np.full(max(0, n - len(prev)), np.nan)])[:n]
            self._prev_drift[metric] = now_drift
            # Persistent: the smaller of this and the previous evaluation must cross.
            drift = np.minimum(now_drift, np.where(np.isnan(prev), -np.inf, prev))
            with np.errstate(invalid="ignore"):
                risk = np.where(drift >= c.peer_warn_c, c.warn_risk,
                                np.where(drift >= c.peer_watch_c, c.watch_risk, 0.0))
            out.append(Finding(f"peer_{metric}", Scope.GPU, risk.astype(np.float32), drift,
                               c.peer_watch_c,
                               f"{metric} above the node median beyond its usual offset, degC",
                               evidence=GPU_TEMP if metric == "gpu_temp" else MEM_TEMP))
        return out

    # ---- InfiniBand -----------------------------------------------------------------------------
    def _ber(self, ib: ScopeView) -> list[Finding]:
        c, n = self.c, len(ib)
        if n == 0:
            return []
        ber = _nanmean(recent(ib, "ib_ber", HOUR)[0])
        flaps = recent_sum(ib, "ib_link_error_recovery", HOUR)
        flaps = np.nan_to_num(flaps) + np.nan_to_num(recent_sum(ib, "ib_link_downed", HOUR))
        # Short flaps seen by the collector between reads (no link_downed bump, under 30 s).
        flaps += np.nan_to_num(recent_sum(ib, "ib_link_flaps", HOUR))
        base = np.maximum(np.nan_to_num(self.ber_base.get(n), nan=c.ber_floor), c.ber_floor)
        with np.errstate(invalid="ignore"):
            high = ber > c.ber_limit
            step = ber >= c.ber_step * base
        over = np.where(high, c.warn_risk, 0.0)
        # With flaps the link is failing, but days can remain (LOS forecasting: 1-7 days):
        # urgent enough to drain at the next boundary, not to page.
        over = np.where(high & (flaps > 0), 0.8, over)
        # The BER is a rate, not a count: its growth is read above the floor of noise.
        rate, ttf, days = self._memo("ber_growth", ib, self._history_s(), lambda: self._growth(
            self._history(ib, ("ib_ber",)), c.ber_floor))
        return [
            Finding("ib_ber", Scope.IB_PORT, over.astype(np.float32), ber, c.ber_limit,
                    "bit-error rate over the last hour (higher with link flaps)",
                    ttf_h=ttf, growth=rate, mode="M4_ib_link", evidence=IB_BER),
            Finding("ib_ber_step", Scope.IB_PORT, self._level(step, ttf, None, days, "ib_ber_step"),
                    ber / base,
                    c.ber_step, "bit-error rate over the port's own baseline",
                    ttf_h=ttf, growth=rate, mode="M4_ib_link", evidence=IB_BER),
            Finding("ib_flaps", Scope.IB_PORT,
                    np.where(flaps > 0, np.float32(c.watch_risk - 0.05), np.float32(0)), flaps,
                    1.0, "link error recoveries and link-downed events in the last hour",
                    evidence=IB_BER),
        ]

    # ---- NVLink -------------------------------------------------------------------------------
    @staticmethod
    def _nvl_errors(nvl: ScopeView, seconds: float) -> F64:
        total: F64 = np.zeros(len(nvl))
        seen = np.zeros(len(nvl), bool)
        for metric in ("nvlink_crc_flit", "nvlink_crc_data", "nvlink_replay"):
            s = recent_sum(nvl, metric, seconds)
            seen |= ~np.isnan(s)
            total += np.nan_to_num(s)
        total[~seen] = np.nan
        return total

    def _nvlink(self, nvl: ScopeView) -> list[Finding]:
        c, n = self.c, len(nvl)
        if n == 0:
            return []
        errs = self._nvl_errors(nvl, HOUR)
        recov = np.nan_to_num(recent_sum(nvl, "nvlink_recovery", HOUR))
        learned = self.nvl_base.get(n)
        base = np.where(np.isnan(learned), np.inf, learned)
        hours = self._memo("nvl_hours", nvl, 6 * HOUR, lambda: _active_hours(nvl, 6))
        with np.errstate(invalid="ignore"):
            rising = (errs >= c.nvl_min_errors) & (errs >= c.nvl_factor * np.maximum(base, 1.0))
        recurs = (rising | (recov > 0)) & (hours >= c.nvl_recur_hours)
        fires = rising | (recov >= c.nvl_recoveries) | recurs
        rate, ttf, days = self._nvl_growth(nvl)
        return [Finding("nvlink_errors", Scope.NVLINK, self._level(fires, ttf, recurs, days,
                                                                     "nvlink_errors"), errs,
                        c.nvl_min_errors, "NVLink CRC and replay errors in the last hour",
                        ttf_h=ttf, growth=rate, mode="M3_nvlink", evidence=NVLINK_ERRORS)]

    def _nvl_growth(self, nvl: ScopeView) -> tuple[F64, F64, B | None]:
        hours = self.c.growth.block_h * self.c.growth.blocks

        def make() -> tuple[F64, F64, B | None]:
            n = len(nvl)
            rate, ttf = np.full(n, np.nan), np.full(n, np.nan)
            days: B | None = np.zeros(n, bool) if self.c.fitted_days_keep_watch else None
            for part in slot_ranges(nvl, SLOT_CHUNK):
                r, t, d = self._growth(hourly_total(nvl, _NVL_ALL, hours, part))
                rate[part], ttf[part] = r, t
                if days is not None and d is not None:
                    days[part] = d
            return rate, ttf, days

        return self._memo("nvl_growth", nvl, hours * HOUR, make)


def _active_hours(nvl: ScopeView, hours: int) -> npt.NDArray[np.int64]:
    """Per link, how many of the last `hours` hours had any NVLink error or recovery."""
    out = np.zeros(len(nvl), np.int64)
    for part in slot_ranges(nvl, SLOT_CHUNK):
        out[part] = np.sum(hourly_total(nvl, _NVL_ALL, hours, part) > 0, axis=1)
    return out
