"""The LSTM's memory: chunks of hours aligned to absolute time, so the hidden state can be
carried forward hour by hour instead of re-reading a window every hour.

Two states run per entity, restarted from zero every 2P hours each, P hours apart (P = the
artifact's `window_h`): state A at hours 0, 2P, 4P, ..., state B at P, 3P, 5P, ... The model's
answer at hour t comes from the older of the two, which has read the hours since its restart:
between P + 1 and 2P of them. So the model sees exactly what a sliding window of that length
would show it, a pure function of the window store (a fresh detector and one that has run for
a month give the same numbers), yet each new hour costs two LSTM steps per entity rather than a
24-step forward. Training samples use the same windows (`window_start`), so what is trained is
what runs.

Hours are absolute indices (the hour bucket's start / 3600), as the window store numbers them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def older_restart(hour: I64 | int, period: int) -> I64:
    """The hour at which the state that answers at `hour` last restarted."""
    h = np.asarray(hour, dtype=np.int64)
    out: I64 = period * (h // period) - period
    return out


def restart_of(hour: int, period: int, parity: int) -> int:
    """The newest restart at or before `hour` of state `parity` (0: A, 1: B)."""
    k = hour // period
    if k % 2 != parity:
        k -= 1
    return k * period


def restarts_at(hour: int, period: int) -> int | None:
    """The state (0 or 1) that restarts at this hour, None between restarts."""
    return (hour // period) % 2 if hour % period == 0 else None


def window_start(hour: I64, length: int, period: int) -> I64:
    """For windows of `length` hours ending at each `hour`: the index within the window at
    which the answering state begins (0 when its restart lies before the window)."""
    first = np.asarray(hour, np.int64) - length + 1
    out: I64 = np.clip(older_restart(hour, period) - first, 0, length - 1).astype(np.int64)
    return out
