"""Split the simulator's multi-timestamp chunks into rounds, one per sample step, as a live
collector would deliver them.

Each frame is sorted by step index once (one argsort, one gather) and every round is then a
contiguous slice of it, so the split costs one copy of the chunk however many rounds it holds.
A round that a chunk boundary cuts in two is held back and joined with the next chunk's first.
Rows are bucketed as the window store does (nearest step), so a clock-skewed sample lands in the
round it belongs to instead of creating a round of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors import identity
from collectors.catalog import Scope
from collectors.frames import Batch, EventFrame, Frame, concat

I64 = npt.NDArray[np.int64]


@dataclass(slots=True)
class Round:
    step: int  # round(ts / step_s)
    now: float  # newest timestamp in the round: the data time it is scored at
    batch: Batch


def _steps(ts: npt.NDArray[np.float64], step_s: float) -> I64:
    return np.floor(ts / step_s + 0.5).astype(np.int64)


def split(batch: Batch, step_s: float) -> list[Round]:
    """The rounds of one chunk, in time order."""
    parts: dict[Scope, tuple[Frame, I64, I64]] = {}
    ks: list[I64] = []
    for scope, f in batch.frames.items():
        k = _steps(f.ts, step_s)
        order = np.argsort(k, kind="stable")
        k = k[order]
        sorted_frame = Frame(f.entities, f.rows[order], f.ts[order], f.values[order])
        uniq, starts = np.unique(k, return_index=True)
        parts[scope] = (sorted_frame, uniq, np.r_[starts, len(k)].astype(np.int64))
        ks.append(uniq)
    ev = batch.events
    ev_k = _steps(np.asarray(ev.ts, dtype=np.float64), step_s) if len(ev) else np.zeros(0, int)
    ks.append(np.unique(ev_k))
    # A GPU's identity goes with the round of its time (a round of its own when no sample
    # shares it: an identity sent alone is still delivered).
    id_keys = list(batch.identity)
    id_k = _steps(np.asarray([batch.identity[k].at for k in id_keys], np.float64), step_s)
    ks.append(np.unique(id_k))
    all_k = np.unique(np.concatenate(ks)) if ks else np.zeros(0, np.int64)
    out = [Round(int(k), -np.inf, Batch()) for k in all_k]
    pos = {int(k): i for i, k in enumerate(all_k)}
    for f, uniq, bounds in parts.values():
        for j, k in enumerate(uniq.tolist()):
            a, b = int(bounds[j]), int(bounds[j + 1])
            r = out[pos[k]]
            r.batch.add(Frame(f.entities, f.rows[a:b], f.ts[a:b], f.values[a:b]))
            r.now = max(r.now, float(f.ts[a:b].max()))
    for i in np.argsort(ev_k, kind="stable").tolist():
        r = out[pos[int(ev_k[i])]]
        r.batch.events.add(ev.keys[i], ev.ts[i], ev.metrics[i], ev.values[i])
        r.now = max(r.now, float(ev.ts[i]))
    for key, k in zip(id_keys, id_k.tolist(), strict=True):
        r = out[pos[k]]
        r.batch.identity[key] = batch.identity[key]
        if not len(r.batch.events) and not r.batch.frames:
            r.now = max(r.now, batch.identity[key].at)
    if out and batch.rejected:
        out[0].batch.rejected.extend(batch.rejected)
    return out


def _join(a: Round, b: Round) -> Round | None:
    """One round from two halves of the same step, or None when their tables differ."""
    frames: dict[Scope, Frame] = dict(a.batch.frames)
    for scope, f in b.batch.frames.items():
        g = frames.get(scope)
        if g is not None and g.entities is not f.entities:
            return None
        frames[scope] = f if g is None else concat([g, f])
    events = EventFrame()
    events.extend(a.batch.events)
    events.extend(b.batch.events)
    idents = dict(a.batch.identity)
    identity.merge_into(idents, b.batch.identity)
    return Round(a.step, max(a.now, b.now),
                 Batch(frames, events, a.batch.rejected + b.batch.rejected, idents))


class Rounder:
    """Turns a stream of chunks into a stream of whole rounds."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self._held: Round | None = None

    def feed(self, chunk: Batch) -> Iterator[Round]:
        rounds = split(chunk, self.step_s)
        if not rounds:
            return
        if self._held is not None:
            if rounds[0].step == self._held.step:
                joined = _join(self._held, rounds[0])
                if joined is not None:
                    rounds[0] = joined
                else:
                    yield self._held
            else:
                yield self._held
        self._held = rounds.pop()
        yield from rounds

    def close(self) -> Iterator[Round]:
        if self._held is not None:
            yield self._held
            self._held = None


def feed_rounds(chunks: Iterable[Batch], step_s: float) -> Iterator[Round]:
    """Every round of a stream of chunks, in time order."""
    rounder = Rounder(step_s)
    for chunk in chunks:
        yield from rounder.feed(chunk)
    yield from rounder.close()
