"""The baselines docs/evaluation.md compares with, as Detectors, so they run through the same
pipeline and alert machine as ours and are scored the same way.

- StaticThresholds: vendor / GCM defaults, each a binary health check that fails at full
  certainty (a hard rule: it pages at once).
- EwmaZScore: a per-entity EWMA mean and variance of every health metric's per-step value
  (counter increases, temperatures); risk rises with the largest z-score. It learns from every
  point, flagged or not, as a textbook EWMA chart does: that is what it is a baseline for.
- RandomScore: random alerts at a fixed rate (a protocol sanity check, Kim et al. AAAI 2022):
  whatever it scores is what the protocol gives away for free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.findings import F32, F64, Finding, fired, kept
from models.detectors.view import FleetView, ScopeView, recent
from models.detectors.xid import CRITICAL

SCOPES = (Scope.GPU, Scope.NVLINK, Scope.IB_PORT)
NVLINK_ERRORS = ("nvlink_crc_flit", "nvlink_crc_data", "nvlink_replay", "nvlink_recovery")


@dataclass(frozen=True, slots=True)
class StaticConfig:
    retired_pages: float = 10.0  # Meta GCM health checks: more than 10 retired pages
    ber_limit: float = 1e-12  # NVIDIA ibdiagnet's default BER threshold
    ber_window_s: float = 300.0  # BER over 5 min: one 5-s sample holds too few bits to judge
    ib_down_s: float = 30.0  # NVIDIA health validation: an RDMA link outage of 30 s fails
    xid_hold_s: float = 3600.0


class StaticThresholds:
    name = "static"

    def __init__(self, config: StaticConfig | None = None) -> None:
        self.c = config or StaticConfig()

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        c = self.c
        g, nvl, ib = (view.scope(s) for s in SCOPES)
        remap = np.fmax(g.latest("remapped_rows_pending"), g.latest("remapped_rows_failure"))
        retired = g.latest("retired_pages_sbe") + np.nan_to_num(g.latest("retired_pages_dbe"))
        dbe = np.fmax(g.latest("ecc_dbe_volatile"), _last_step(g, "ecc_dbe_aggregate"))
        out = [
            _hard("static_remap", Scope.GPU, fired(remap, 1, 1.0), remap, 1,
                  "row remap pending or failed"),
            _hard("static_retired", Scope.GPU, fired(retired, c.retired_pages + 1e-9, 1.0),
                  retired, c.retired_pages, "retired pages (more than the limit)"),
            _hard("static_dbe", Scope.GPU, fired(dbe, 1, 1.0), dbe, 1, "double-bit ECC errors"),
            self._xid(view, g, now),
        ]
        if len(nvl):
            errs = sum(np.nan_to_num(_last_step(nvl, m)) for m in NVLINK_ERRORS)
            errs = np.asarray(errs, np.float64)
            out.append(_hard("static_nvlink", Scope.NVLINK, fired(errs, 1e-9, 1.0), errs, 0,
                             "NVLink error counters increased in the last step"))
        if len(ib):
            ber = _nanmean(recent(ib, "ib_ber", c.ber_window_s)[0])
            n = max(1, math.ceil(c.ib_down_s / ib.step_s))
            st = ib.window("ib_state", n).astype(np.float64)
            down = np.all((st != 4) & ~np.isnan(st), axis=1).astype(np.float64)
            out += [
                _hard("static_ber", Scope.IB_PORT, fired(ber, c.ber_limit * (1 + 1e-9), 1.0),
                      ber, c.ber_limit, "IB bit-error rate above the ibdiagnet limit"),
                _hard("static_ib_down", Scope.IB_PORT, fired(down, 1, 1.0), down, 1,
                      f"IB port not active for {c.ib_down_s:g} s"),
            ]
        return out

    def _xid(self, view: FleetView, g: ScopeView, now: float) -> Finding:
        code: F64 = np.full(len(g), np.nan)
        events = [e for e in view.events_since(now - self.c.xid_hold_s)
                  if e.metric == "xid" and e.ts <= now and int(e.value) in CRITICAL]
        if events:
            index = {e.key: i for i, e in enumerate(g.entities)}
            for ev in events:
                i = index.get(ev.entity)
                if i is not None:
                    code[i] = ev.value
        return _hard("static_xid", Scope.GPU, fired(np.where(np.isnan(code), np.nan, 1.0), 1, 1.0),
                     code, math.nan, "critical Xid logged")


def _hard(rule: str, scope: Scope, risk: F32, value: F64, threshold: float,
          signal: str) -> Finding:
    return Finding(rule, scope, risk, np.asarray(value, np.float64), threshold, signal, hard=True)


def _last_step(v: ScopeView, metric: str) -> F64:
    out: F64 = v.window(metric, 1)[:, 0].astype(np.float64)
    return out


def _nanmean(win: npt.NDArray[np.float32]) -> F64:
    present = ~np.isnan(win)
    total = np.where(present, win, 0).sum(axis=1, dtype=np.float64)
    cnt = present.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: F64 = np.where(cnt > 0, total / np.maximum(cnt, 1), np.nan)
    return out


# ---- EWMA z-score ------------------------------------------------------------------------------

# Health metrics only: load (utilization, power, clocks, traffic) moves with jobs, not faults.
EWMA_METRICS: dict[Scope, tuple[str, ...]] = {
    Scope.GPU: ("gpu_temp", "mem_temp", "ecc_sbe_volatile", "ecc_dbe_volatile",
                "ecc_sram_correctable", "retired_pages_sbe", "retired_pages_dbe",
                "remapped_rows_correctable", "remapped_rows_uncorrectable", "pcie_replay"),
    Scope.NVLINK: NVLINK_ERRORS,
    Scope.IB_PORT: ("ib_symbol_error", "ib_link_error_recovery", "ib_link_downed",
                    "ib_port_rcv_errors", "ib_local_link_integrity_errors",
                    "ib_excessive_buffer_overrun_errors"),
}


@dataclass(frozen=True, slots=True)
class EwmaConfig:
    half_life_s: float = 24 * 3600.0  # design choice: a day, so the diurnal cycle is learned
    warmup_s: float = 6 * 3600.0  # design choice: no judgement before 6 h of history
    z: tuple[float, float, float] = (4.0, 6.0, 10.0)  # watch, warning, critical
    risk: tuple[float, float, float] = (0.35, 0.65, 0.95)  # above the alert enter thresholds
    sd_floor: float = 1.0  # one count per step, or 1 degC: a quiet counter's variance is 0
    # A point's risk is held this long, so the alert machine's for-durations (2 min for a
    # warning) can pass: a one-step spike would otherwise never rise above level 1.
    hold_s: float = 600.0


@dataclass(slots=True)
class _Stats:
    mean: F64 = field(default_factory=lambda: np.zeros((0, 0)))
    var: F64 = field(default_factory=lambda: np.zeros((0, 0)))
    count: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 0), np.int64))

    def fit(self, n: int, m: int) -> None:
        if self.mean.shape[0] < n:
            pad = n - self.mean.shape[0]
            self.mean = np.vstack([self.mean.reshape(-1, m), np.zeros((pad, m))])
            self.var = np.vstack([self.var.reshape(-1, m), np.zeros((pad, m))])
            self.count = np.vstack([self.count.reshape(-1, m), np.zeros((pad, m), np.int64)])

    def take(self, keep: npt.NDArray[np.intp]) -> None:
        self.mean, self.var, self.count = (kept(self.mean, keep), kept(self.var, keep),
                                           kept(self.count, keep))


class EwmaZScore:
    name = "ewma"

    def __init__(self, config: EwmaConfig | None = None) -> None:
        self.c = config or EwmaConfig()
        self._stats = {s: _Stats() for s in SCOPES}
        self._head: dict[Scope, int] = {}
        self._fired: dict[Scope, F64] = {s: np.zeros((0, 3)) for s in SCOPES}

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        return [self._scope(view.scope(s), now) for s in SCOPES]

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        self._stats[scope].take(keep)
        self._fired[scope] = kept(self._fired[scope], keep)

    def _scope(self, v: ScopeView, now: float) -> Finding:
        c, n, metrics = self.c, len(v), EWMA_METRICS[v.scope]
        st = self._stats[v.scope]
        st.fit(n, len(metrics))
        x = np.stack([_last_step(v, m) for m in metrics], axis=1) if n else np.zeros((0, 1))
        mean, var, count = st.mean[:n], st.var[:n], st.count[:n]
        warm = count >= max(1, round(c.warmup_s / v.step_s))
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.where(warm, (x - mean) / np.maximum(np.sqrt(var), c.sd_floor), 0.0)
        zmax: F64 = np.max(np.nan_to_num(z, nan=0.0), axis=1, initial=0.0)
        fired = self._fired[v.scope]
        if len(fired) < n:
            fired = self._fired[v.scope] = np.vstack([fired, np.full((n - len(fired), 3),
                                                                     -np.inf)])
        risk = np.zeros(n, np.float32)
        for i, (zt, r) in enumerate(zip(c.z, c.risk, strict=True)):
            fired[:n, i][zmax >= zt] = now
            risk[now - fired[:n, i] <= c.hold_s] = r
        if self._head.get(v.scope) != v.head:  # learn each step once, from every point
            self._head[v.scope] = v.head
            alpha = 1.0 - 0.5 ** (v.step_s / c.half_life_s)
            ok = np.isfinite(x)
            first = ok & (count == 0)
            d = np.where(ok, x - mean, 0.0)
            mean += np.where(ok & ~first, alpha * d, np.where(first, d, 0.0))
            var[:] = np.where(ok & ~first, (1 - alpha) * (var + alpha * d * d), var)
            count += ok
        return Finding(f"ewma_{v.scope.value}", v.scope, risk, zmax.astype(np.float64), c.z[0],
                       "largest EWMA z-score of the entity's health metrics")


# ---- random ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RandomConfig:
    alerts_per_node_day: float = 0.01  # design choice: a noisy detector's watch-level rate
    hold_s: float = 3600.0  # long enough for the warning level's for-duration
    seed: int = 0


class RandomScore:
    """Alerts arrive as a Poisson process over the fleet; each picks a scope, then an entity,
    uniformly, and a level 1-3 uniformly, and holds that risk for hold_s."""

    name = "random"
    _RISK = (0.35, 0.65, 1.0)

    def __init__(self, config: RandomConfig | None = None) -> None:
        self.c = config or RandomConfig()
        self.rng = np.random.default_rng(self.c.seed)
        self._until: dict[Scope, F64] = {s: np.zeros(0) for s in SCOPES}
        self._risk: dict[Scope, F32] = {s: np.zeros(0, np.float32) for s in SCOPES}
        self._last: float | None = None

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        scopes = [view.scope(s) for s in SCOPES]
        for v in scopes:
            self._fit(v.scope, len(v))
        nodes = max((int(v.node_of[: len(v)].max()) + 1 for v in scopes if len(v)), default=0)
        dt = scopes[0].step_s if self._last is None else max(now - self._last, 0.0)
        self._last = now
        live = [v for v in scopes if len(v)]
        hold = max(self.c.hold_s, 3 * scopes[0].step_s)
        for _ in range(int(self.rng.poisson(self.c.alerts_per_node_day * nodes * dt / 86400))):
            v = live[int(self.rng.integers(len(live)))]
            i = int(self.rng.integers(len(v)))
            self._until[v.scope][i] = now + hold
            self._risk[v.scope][i] = self._RISK[int(self.rng.integers(3))]
        out = []
        for v in scopes:
            n = len(v)
            risk = np.where(self._until[v.scope][:n] > now, self._risk[v.scope][:n], 0)
            risk = risk.astype(np.float32)
            out.append(_hard(f"random_{v.scope.value}", v.scope, risk, risk.astype(np.float64),
                             0.0, "random score (protocol sanity check)"))
        return out

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        self._until[scope] = kept(self._until[scope], keep)
        self._risk[scope] = kept(self._risk[scope], keep)

    def _fit(self, scope: Scope, n: int) -> None:
        grow = n - len(self._until[scope])
        if grow > 0:
            self._until[scope] = np.r_[self._until[scope], np.zeros(grow)]
            self._risk[scope] = np.r_[self._risk[scope], np.zeros(grow, np.float32)]
