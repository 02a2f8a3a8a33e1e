"""Workload: jobs that hold whole nodes, and the load they put on them (docs/simulator.md,
`workload`).

A job's load is piecewise constant: a warm-up at reduced load, then its level, with synchronized
checkpoint dips every period. Its integral has a closed form, so the mean load over any sample
window is exact at any step: the 300-s stream averages the very load the 5-s stream samples.
Jobs never run on a node while it is down (failure until repair, maintenance, reset); a node
going down ends the job on all its nodes, as a real interruption does.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.simulator.config import SimConfig
from models.simulator.topology import rng_for

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
STREAM_JOBS = 300
_BATCH = 1024
_WARM_FLEET_S = 2 * 86400.0  # start scheduling before the trace so it opens on a busy fleet


@dataclass(slots=True)
class Jobs:
    start: F64
    end: F64
    level: F64
    dip_level: F64
    period: F64
    phase: F64  # first dip, seconds after start (after the warm-up)
    dip: F64
    warm: F64
    warm_level: float
    nodes: list[I64]

    def __len__(self) -> int:
        return len(self.start)

    def integral(self, j: int, t: F64) -> F64:
        """Load-seconds job j put on each of its nodes from its start up to times t."""
        s, e = self.start[j], self.end[j]
        lv, dl, p, ph, d, w = (self.level[j], self.dip_level[j], self.period[j], self.phase[j],
                               self.dip[j], self.warm[j])
        tau = np.clip(t, s, e) - s
        u = tau - ph
        n = np.floor(np.maximum(u, 0.0) / p)
        dips = np.where(u < 0, 0.0, n * d + np.minimum(u - n * p, d))
        return np.asarray(lv * tau - (lv - self.warm_level) * np.minimum(tau, w) - (lv - dl) * dips)

    def active(self, ta: float, tb: float) -> I64:
        return np.flatnonzero((self.start < tb) & (self.end > ta))


class _Down:
    """Per-node sorted down intervals, with 'first time at or after t the node is up'."""

    def __init__(self, down: list[list[tuple[float, float]]]) -> None:
        self.starts = [[a for a, _ in d] for d in down]
        self.ivs = down

    def up_at(self, node: int, t: float) -> float:
        i = bisect.bisect_right(self.starts[node], t) - 1
        while 0 <= i < len(self.ivs[node]) and self.ivs[node][i][0] <= t < self.ivs[node][i][1]:
            t = self.ivs[node][i][1]
            i += 1
        return t

    def next_down(self, node: int, t: float) -> float:
        i = bisect.bisect_right(self.starts[node], t)
        return self.starts[node][i] if i < len(self.starts[node]) else np.inf


def schedule(cfg: SimConfig, down: list[list[tuple[float, float]]]) -> Jobs:
    w = cfg.workload
    n_nodes = cfg.fleet.nodes
    rng = rng_for(cfg.seed, STREAM_JOBS)
    sizes = np.array([k for k in w.job_nodes if k <= n_nodes] or [n_nodes])
    weights = np.array([p for k, p in zip(w.job_nodes, w.job_weights, strict=True)
                        if k <= n_nodes] or [1.0])
    dn = _Down(down)
    t_end = cfg.time.end_s
    t0 = cfg.time.start_s - _WARM_FLEET_S
    free = np.array([dn.up_at(n, t0 + rng.exponential(w.queue_gap_mean_s)) for n in range(n_nodes)])
    cols: dict[str, list[float]] = {k: [] for k in ("s", "e", "lv", "dl", "p", "ph", "d", "w")}
    members: list[I64] = []
    buf: dict[str, F64] = {}
    i = _BATCH
    while np.isfinite(free).any():
        if i == _BATCH:
            buf = _draw(rng, cfg, sizes, weights)
            i = 0
        size = min(int(buf["size"][i]), int(np.isfinite(free).sum()))
        order = np.argsort(free, kind="stable")
        while size > 1 and free[order[size - 1]] - free[order[0]] > w.max_wait_s:
            size = int(sizes[sizes < size].max()) if (sizes < size).any() else 1
        pick = order[:size]
        s = float(np.round(free[pick].max() + buf["gap"][i]))
        for _ in range(4 * size):  # move the start past any down interval of a picked node
            moved = max(dn.up_at(int(n), s) for n in pick)
            if moved == s:
                break
            s = moved
        if s >= t_end:
            free[pick] = np.inf
            i += 1
            continue
        e = min(s + buf["dur"][i], min(dn.next_down(int(n), s) for n in pick))
        e = float(np.round(e))
        if e > s:
            for k, v in zip(cols, (s, e, buf["lv"][i], buf["dl"][i], buf["p"][i], buf["ph"][i],
                                   buf["d"][i], buf["w"][i]), strict=True):
                cols[k].append(float(v))
            members.append(np.sort(pick).astype(np.int64))
        for n in pick:
            free[n] = dn.up_at(int(n), max(e, s + 1.0))
        i += 1
    a = {k: np.array(v, dtype=np.float64) for k, v in cols.items()}
    return Jobs(a["s"], a["e"], a["lv"], a["dl"], a["p"], a["ph"], a["d"], a["w"],
                w.warmup_level, members)


def _draw(rng: np.random.Generator, cfg: SimConfig, sizes: I64, weights: F64) -> dict[str, F64]:
    w = cfg.workload
    n = _BATCH
    period = rng.uniform(w.checkpoint_min_s, w.checkpoint_max_s, n)
    warm = rng.uniform(w.warmup_min_s, w.warmup_max_s, n)
    level = rng.uniform(w.util_min, w.util_max, n)
    hours = np.minimum(w.job_hours_median * np.exp(w.job_hours_sigma * rng.standard_normal(n)),
                       w.job_hours_max)
    return {
        "size": rng.choice(sizes, n, p=weights / weights.sum()).astype(np.float64),
        "gap": rng.exponential(w.queue_gap_mean_s, n),
        "dur": hours * 3600.0,
        "lv": level,
        "dl": level * rng.uniform(w.dip_level_min, w.dip_level_max, n),
        "p": period,
        "ph": warm + rng.uniform(0.0, 1.0, n) * period,
        "d": rng.uniform(w.dip_min_s, w.dip_max_s, n),
        "w": warm,
    }
