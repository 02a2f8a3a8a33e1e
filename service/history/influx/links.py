"""NVLink rows as they were ingested, from what the sink stored (service.history.influx.sparse):
a link's last written point carried forward to every round its GPU's `nvlink_mask` says it
reported. Points written before masks existed (every link every round) come back as they are,
so both layouts read the same; export, warm start and the history API all read through here.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from service.history.influx.client import Series
from service.history.influx.influxql import ident, string
from service.history.influx.sparse import HEARTBEAT_S, MASK_BITS, MASK_FIELD

# How far before a range a link's carried point may lie: a heartbeat, with room for a late round.
LOOKBACK_S = 2 * HEARTBEAT_S
Masks = dict[tuple[str, str], list[tuple[int, int]]]  # (host, gpu) -> [(time, mask)] in order


def mask_query(cond: str, host: str | None = None, gpu: str | None = None) -> str:
    """The statement reading GPUs' masks under `cond` (optionally of one GPU)."""
    more = "".join(f" AND {ident(k)} = {string(v)}" for k, v in (("host", host), ("gpu", gpu))
                   if v is not None)
    return (f"SELECT {ident(MASK_FIELD)} FROM {ident('gpu')} WHERE {cond}{more} "
            f"GROUP BY {ident('host')}, {ident('gpu')}")


def read_masks(series: Sequence[Series]) -> Masks:
    out: Masks = {}
    for s in series:
        j = s.columns.index(MASK_FIELD)
        rows = [(int(r[0]), int(r[j])) for r in s.values if isinstance(r[j], int)]
        out.setdefault((s.tags.get("host", ""), s.tags.get("gpu", "")), []).extend(rows)
    for v in out.values():
        v.sort()
    return out


def _bit(link: str) -> int | None:
    return int(link) if (link.isascii() and link.isdigit()) and int(link) < MASK_BITS else None


def fill(series: Sequence[Series], masks: Masks, start: int) -> list[Series]:
    """Each link series (times as integers, any epoch the masks share) with its rows from
    `start` on: the stored ones, and the last stored row before each round its GPU's mask
    names the link in without a stored row. Rows before `start` only serve to carry."""
    out = []
    for s in series:
        rows = sorted(s.values, key=lambda r: int(r[0]))
        bit = _bit(s.tags.get("link", ""))
        gm = masks.get((s.tags.get("host", ""), s.tags.get("gpu", "")), [])
        have = {int(r[0]) for r in rows}
        rounds = [] if bit is None else [t for t, m in gm if t >= start and m >> bit & 1
                                         and t not in have]
        times = [int(r[0]) for r in rows]
        filled = [r for r in rows if int(r[0]) >= start]
        for t in rounds:
            k = bisect.bisect_left(times, t) - 1
            if k >= 0:
                filled.append([t, *rows[k][1:]])
        filled.sort(key=lambda r: int(r[0]))
        out.append(Series(s.name, s.tags, s.columns, filled))
    return out


def bucket(series: Sequence[Series], name: str, agg: str, step_ns: int) -> list[tuple[int, float]]:
    """One field's rows aggregated into `step_ns` buckets aligned to the epoch, as InfluxDB's
    GROUP BY time() fill(none) would over rows all stored: (bucket start, value)."""
    got: dict[int, list[float]] = {}
    for s in series:
        if name not in s.columns:
            continue
        j = s.columns.index(name)
        for r in s.values:
            v = r[j]
            if isinstance(v, int | float) and not isinstance(v, bool):
                t = int(r[0])
                got.setdefault(t - t % step_ns, []).append(float(v))
    reduce: dict[str, Callable[[list[float]], float]] = {
        "mean": lambda v: sum(v) / len(v), "max": max, "min": min, "last": lambda v: v[-1]}
    return [(t, reduce[agg](v)) for t, v in sorted(got.items())]
