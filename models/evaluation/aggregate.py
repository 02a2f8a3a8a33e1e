"""Results over several generator seeds: mean and a 95 % Student-t interval of every figure
(docs/evaluation.md, Metrics: confidence intervals over at least 5 seeds), leaf by leaf over
the nested score dicts. A figure that is None for a seed (nothing to divide by) is left out of
that figure's interval, and `n` says how many seeds it had."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

Scores = dict[str, Any]


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Scores:
    a = np.asarray(values, dtype=np.float64)
    n = len(a)
    if n == 0:
        return {"mean": None, "lo": None, "hi": None, "n": 0}
    mean = float(a.mean())
    if n == 1:
        return {"mean": mean, "lo": None, "hi": None, "n": 1}
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * a.std(ddof=1) / math.sqrt(n))
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "n": n}


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def combine(per_seed: Sequence[Any]) -> Any:
    """Same shape as one seed's scores, with every numeric leaf replaced by its t_interval."""
    present = [s for s in per_seed if s is not None]
    if not present:
        return None
    if all(isinstance(s, dict) for s in present):
        keys: dict[str, None] = {}
        for s in present:
            keys.update(dict.fromkeys(s))
        return {k: combine([s.get(k) for s in present]) for k in keys}
    if all(_number(s) for s in present):
        return t_interval([float(s) for s in present])
    return present[0]


def mean_of(cell: Any) -> float | None:
    """The mean of a combined leaf, or the plain number of a single-seed one."""
    if isinstance(cell, dict):
        m: Any = cell.get("mean")
        return float(m) if _number(m) else None
    return float(cell) if _number(cell) else None
