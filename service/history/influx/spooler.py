"""Delivery of line protocol to InfluxDB through a durable spool.

Every chunk is written to the on-disk spool first, then a sender thread posts segments oldest
first and removes each once InfluxDB took it. While InfluxDB is unreachable segments pile up
on disk (bounded: past `spool_mb` the oldest go first, counted and logged) and are sent in
order when it returns. A segment resent after a lost reply carries the same series and
timestamps, which InfluxDB stores once (a point is its series plus its time), so a retry never
doubles a point.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from collectors.agent.push import Outcome, PushResult
from collectors.agent.spool import Spool

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SpoolerStats:
    lines_spooled: int = 0
    segments_spooled: int = 0
    segments_sent: int = 0
    segments_partial: int = 0  # InfluxDB kept part of a segment and refused some lines (400)
    segments_dropped: int = 0  # lost to the spool bound, or refused whole (413)
    retries: int = 0
    last_error: str = ""
    up: bool = True  # the last delivery attempt succeeded


class Spooler:
    def __init__(self, spool: Spool, send: Callable[[bytes], PushResult], *,
                 batch_lines: int = 50_000, backoff_s: tuple[float, float] = (0.5, 30.0),
                 before_send: Callable[[], bool] | None = None, start: bool = True) -> None:
        """`before_send` runs before a delivery round (schema set-up); False postpones it."""
        self.spool = spool
        self.send = send
        self.batch_lines = batch_lines
        self.backoff_min, self.backoff_max = backoff_s
        self.before_send = before_send
        self.stats = SpoolerStats()
        self._lock = threading.Lock()  # the spool is not thread-safe: append vs send/remove
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._thread: threading.Thread | None = None
        self._dropped_seen = spool.stats.dropped_segments
        if start:
            self.start()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="influx-sender", daemon=True)
            self._thread.start()

    def put(self, lines: Iterable[str]) -> int:
        """Spool lines in segments of `batch_lines`; returns how many were spooled."""
        n = 0
        chunk: list[str] = []
        for line in lines:
            chunk.append(line)
            if len(chunk) >= self.batch_lines:
                n += self._append(chunk)
                chunk = []
        if chunk:
            n += self._append(chunk)
        if n:
            self._idle.clear()
            self._wake.set()
        return n

    def _append(self, chunk: list[str]) -> int:
        with self._lock:
            self.spool.append("\n".join(chunk) + "\n")
            dropped = self.spool.stats.dropped_segments - self._dropped_seen
            self._dropped_seen = self.spool.stats.dropped_segments
        self.stats.lines_spooled += len(chunk)
        self.stats.segments_spooled += 1
        if dropped:
            self.stats.segments_dropped += dropped
            log.error("InfluxDB spool over %d MB: dropped the %d oldest segment(s) "
                      "(%d dropped in all) while InfluxDB is unreachable",
                      self.spool.max_bytes >> 20, dropped, self.stats.segments_dropped)
        return len(chunk)

    def pending(self) -> int:
        with self._lock:
            return self.spool.stats.segments

    def deliver(self) -> bool:
        """Send segments oldest first until the spool is empty (True) or a send fails."""
        if self.before_send is not None and not self.before_send():
            return False
        while True:
            with self._lock:
                seg = self.spool.oldest()
            if seg is None:
                return True
            seq, body = seg
            res = self.send(body)
            if res.outcome is Outcome.RETRY:
                self.stats.retries += 1
                self.stats.up = False
                self.stats.last_error = (f"{res.status}: {res.detail}" if res.status
                                         else res.detail)
                return False
            self.stats.up = True
            if res.outcome is Outcome.DROP:
                self.stats.segments_dropped += 1
                log.error("InfluxDB refused a segment whole (%s): %s", res.status, res.detail)
            elif res.status == 400:
                self.stats.segments_partial += 1
                log.warning("InfluxDB refused some lines: %s", res.detail)
            with self._lock:
                self.spool.remove(seq)
            self.stats.segments_sent += 1

    def _run(self) -> None:
        backoff = self.backoff_min
        while not self._stop.is_set():
            try:
                delivered = self.deliver()
            except Exception as exc:  # a sender that died would leave every later point spooled
                log.exception("InfluxDB delivery failed unexpectedly")
                self.stats.up, self.stats.last_error = False, f"{type(exc).__name__}: {exc}"
                delivered = False
            if delivered:
                backoff = self.backoff_min
                self._idle.set()
                self._wake.wait()
                self._wake.clear()
                continue
            log.warning("InfluxDB write failed (%s); %d segment(s) spooled, retrying in %.1f s",
                        self.stats.last_error, self.pending(), backoff)
            self._stop.wait(backoff)
            backoff = min(backoff * 2, self.backoff_max)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything spooled so far was delivered; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.pending() == 0:
                return True
            self._wake.set()
            self._idle.wait(min(0.05, max(deadline - time.monotonic(), 0)))
        return self.pending() == 0

    def close(self) -> None:
        """Stop the sender; what is still spooled stays on disk for the next start."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
