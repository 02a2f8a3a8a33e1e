"""Recording a long history's hourly features a day of data time at a time, resumably.

Each finished day's features are saved in the work directory (day-NNNN.npz, written whole then
renamed into place) before the next day is replayed. A rerun skips the finished days: it
replays a warm-up span before the first unfinished day without keeping what it records, so the
window store holds what the hourly features read (the entity's last USUAL_DAYS finished days,
models/predictor/long_memory.py, and the hour's own buckets) and the resumed days come out bit
for bit as one uninterrupted run records them.

A day is [UTC midnight, next midnight) clipped to the span; a recorded hour belongs to the day
in which its features became available (its prediction time), so the split is by data time,
never by how the work happened to be cut.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from collectors.catalog import Scope
from models.predictor.dataset import HourlyRecorder, RunFeatures
from models.predictor.features import n_hourly
from models.predictor.long_memory import USUAL_DAYS

log = logging.getLogger(__name__)
DAY = 86400.0
# The days before an hour's own day that its features read, its own day, and one to spare.
WARMUP_DAYS = USUAL_DAYS + 2
SCOPES = (Scope.GPU, Scope.IB_PORT)
MANIFEST = "manifest.json"


class WorkMismatch(ValueError):
    """The work directory holds the days of another run (span, cluster, step)."""


def day_edges(start: float, end: float) -> list[tuple[float, float]]:
    """[start, end) cut at UTC midnights."""
    out = []
    a = start
    while a < end:
        b = min(end, (math.floor(a / DAY) + 1) * DAY)
        out.append((a, b))
        a = b
    return out


class DayBook:
    """The work directory: a manifest naming the run and one npz per finished day."""

    def __init__(self, work: Path, key: dict[str, Any]) -> None:
        self.work = work
        self.key = key
        work.mkdir(parents=True, exist_ok=True)
        path = work / MANIFEST
        if path.exists():
            held = json.loads(path.read_text(encoding="utf-8"))
            if held != key:
                diff = sorted(k for k in {*held, *key} if held.get(k) != key.get(k))
                raise WorkMismatch(f"--work {work} holds the days of another run (it differs "
                                   f"in {', '.join(diff)}): give another --work or remove it")
        else:
            path.write_text(json.dumps(key, indent=1, sort_keys=True), encoding="utf-8")

    @staticmethod
    def held(work: Path) -> dict[str, Any] | None:
        """The manifest of a work directory, None when there is none (or it is unreadable:
        DayBook then refuses it)."""
        try:
            d = json.loads((work / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return d if isinstance(d, dict) else None

    def path(self, day: int) -> Path:
        return self.work / f"day-{day:04d}.npz"

    def done(self, day: int) -> bool:
        return self.path(day).exists()

    def save(self, day: int, runs: dict[Scope, RunFeatures]) -> None:
        arrays: dict[str, Any] = {}
        for scope, r in runs.items():
            p = scope.value
            arrays |= {f"{p}.x": r.x, f"{p}.t": r.t_pred, f"{p}.hour": r.hour_index,
                       f"{p}.keys": np.asarray(r.keys, dtype=str),
                       f"{p}.nodes": np.asarray(r.nodes, dtype=str)}
        tmp = self.work / f".day-{day:04d}.tmp.npz"
        np.savez(tmp, **arrays)
        os.replace(tmp, self.path(day))  # a day is there whole or not at all

    def load(self, days: Sequence[int]) -> dict[Scope, RunFeatures]:
        """The days' features joined into one run per scope; entities in key order (the
        same whatever order a store met them in), NaN for hours an entity was absent."""
        out: dict[Scope, RunFeatures] = {}
        for scope in SCOPES:
            p = scope.value
            owners: dict[str, str] = {}
            hours = 0
            for d in days:
                with np.load(self.path(d)) as z:
                    if f"{p}.x" not in z:
                        continue
                    hours += int(z[f"{p}.x"].shape[0])
                    owners.update(zip(z[f"{p}.keys"].tolist(), z[f"{p}.nodes"].tolist(),
                                      strict=True))
            keys = sorted(owners)
            col = {k: i for i, k in enumerate(keys)}
            x = np.full((hours, len(keys), n_hourly(scope)), np.nan, np.float32)
            t = np.zeros(hours, np.float64)
            hr = np.zeros(hours, np.int64)
            at = 0
            for d in days:
                with np.load(self.path(d)) as z:
                    if f"{p}.x" not in z:
                        continue
                    dx = z[f"{p}.x"]
                    n = int(dx.shape[0])
                    cols = np.array([col[k] for k in z[f"{p}.keys"].tolist()], np.int64)
                    x[at:at + n, cols] = dx
                    t[at:at + n] = z[f"{p}.t"]
                    hr[at:at + n] = z[f"{p}.hour"]
                    at += n
            if hours:
                out[scope] = RunFeatures(scope, x, t, keys, [owners[k] for k in keys], hr)
        return out


@dataclass(slots=True)
class Recorded:
    days: list[int]  # indices of every finished day, in order
    replayed_h: float  # data hours replayed by this call (warm-up included)
    warmup_h: float
    rounds: int
    stopped: bool  # stopped early, as asked (--stop-after-days)


def replay_plan(book: DayBook, days: Sequence[tuple[float, float]],
                warmup_days: float = WARMUP_DAYS) -> tuple[int, int] | None:
    """(the day the replay starts at, the first day to record); None when all are done. The
    warm-up is whole days, so chunk edges fall where an uninterrupted run has them."""
    todo = [i for i in range(len(days)) if not book.done(i)]
    if not todo:
        return None
    first = todo[0]
    since = days[first][0] - warmup_days * DAY
    start_day = next(i for i, (_, b) in enumerate(days) if b > since)
    return min(start_day, first), first


Replay = Callable[[float, float], Any]  # (start, end) -> Iterable[Batch]
Progress = Callable[[float, str], None]  # (data hours replayed so far, note)


def record_days(batches: Replay, book: DayBook, days: Sequence[tuple[float, float]],
                step_s: float, *, warmup_days: float = WARMUP_DAYS,
                stop_after: int | None = None,
                progress: Progress | None = None) -> Recorded:
    """Replay the unfinished days (and the warm-up before the first of them) through a window
    store, saving each day's hourly features as it finishes."""
    from models.evaluation.rounds import Rounder
    from service.assembly import Wiring
    from service.pipeline import build_pipeline
    from service.settings import Settings
    from service.stages.windows import window_config_for

    plan = replay_plan(book, days, warmup_days)
    if plan is None:
        return Recorded(list(range(len(days))), 0.0, 0.0, 0, False)
    start_day, first = plan
    replay_from = days[start_day][0]
    settings = Settings(window=window_config_for(step_s),
                        detectors={"model": {"path": "none"}})  # type: ignore[arg-type]
    pipe = build_pipeline(settings, Wiring.offline())
    rec = HourlyRecorder(SCOPES)
    rounder = Rounder(step_s)
    rounds = recorded = 0
    reached = replay_from
    stopped = False
    day = start_day

    def finish(upto: float) -> bool:
        """Close every day that ends at or before `upto`; False once asked to stop."""
        nonlocal day, recorded
        while day < len(days) and days[day][1] <= upto:
            runs = rec.take()
            if not book.done(day):
                book.save(day, runs)
                recorded += 1
                log.info("day %d of %d recorded", day + 1, len(days))
            day += 1
            if stop_after is not None and recorded >= stop_after:
                return False
        return True

    try:
        for i in range(start_day, len(days)):
            a, b = days[i]
            for chunk in batches(a, b):
                for r in rounder.feed(chunk):
                    if not finish(r.now):
                        stopped = True
                        break
                    pipe.ingest(r.batch, r.now)
                    rec.observe(pipe.scorer.view, r.now)
                    rounds += 1
                if stopped:
                    break
            if stopped:
                break
            reached = b
            if progress is not None:
                progress((b - replay_from) / 3600.0,
                         f"day {i + 1}/{len(days)}" + (" (warm-up)" if i < first else ""))
        if not stopped:
            for r in rounder.close():
                pipe.ingest(r.batch, r.now)
                rec.observe(pipe.scorer.view, r.now)
                rounds += 1
            finish(math.inf)
    finally:
        pipe.close()
    done = [i for i in range(len(days)) if book.done(i)]
    return Recorded(done, (reached - replay_from) / 3600.0,
                    (days[first][0] - replay_from) / 3600.0, rounds, stopped)
