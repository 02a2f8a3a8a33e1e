"""Folding Xid storms into events: one event per (GPU, code) per window, with a repeat count.

A single fault often prints the same code dozens of times (the Xid 13 fixture has 629 lines in
minutes; one Xid 94 prints once per channel). Downstream rules count *incidents*, so repeats
inside the window are absorbed into the first event. The window is anchored at the first line,
not slid with each repeat, so an endless storm still yields one event per window instead of one
event forever. The first line is emitted at once: a critical Xid must not wait for the window.
"""

from __future__ import annotations

from collectors.kernel_log.records import XidEvent, XidRecord

DEFAULT_WINDOW_S = 60.0


class Coalescer:
    """Stateful across calls, so a storm split between two reads is still one event."""

    def __init__(self, window_s: float = DEFAULT_WINDOW_S) -> None:
        if window_s < 0:
            raise ValueError(f"coalescing window must be >= 0, got {window_s}")
        self.window_s = window_s
        self._open: dict[tuple[str, int], XidEvent] = {}

    def push(self, key: str, rec: XidRecord) -> XidEvent | None:
        """The new event this record opens, or None when it was folded into an open one."""
        slot = (key, rec.code)
        ev = self._open.get(slot)
        if ev is not None and abs(rec.ts - ev.ts) <= self.window_s:
            ev.repeats += 1
            ev.last_ts = max(ev.last_ts, rec.ts)
            return None
        ev = XidEvent(key=key, ts=rec.ts, code=rec.code, bus_id=rec.bus_id, gpu=rec.gpu,
                      pid=rec.pid, process=rec.process, detail=rec.detail, line=rec.line,
                      last_ts=rec.ts)
        self._open[slot] = ev
        return ev

    def expire(self, now: float) -> None:
        """Forget windows that closed before `now`, so memory stays bounded on a long run."""
        stale = [k for k, ev in self._open.items() if now - ev.ts > self.window_s]
        for k in stale:
            del self._open[k]
