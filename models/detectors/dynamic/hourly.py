"""Hour sums and means of the window store's windows, read from whatever resolution covers
them: what the dynamic rules judge and fit growth on."""

from __future__ import annotations

import warnings

import numpy as np
import numpy.typing as npt

from models.detectors.findings import F64
from models.detectors.view import ScopeView, recent

HOUR = 3600.0


def nanmean(win: npt.NDArray[np.float32]) -> F64:
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
