"""The node agent: collect every source each round, spool the round as gzip line protocol,
and push the spool oldest first, backing off while the target is unreachable.

Each round also reports every collector as one `gpuhealth_collector` point (up, scrape
duration, samples, last error; collectors.collector_status), so the service exports node
agents' collectors as it does its own, and an InfluxDB target stores them like any point.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collectors.agent.push import Outcome, Pusher
from collectors.agent.spool import Spool
from collectors.base import Collector
from collectors.collector_status import status_line
from collectors.schema import batch_to_lines

log = logging.getLogger(__name__)


@dataclass(slots=True)
class AgentStats:
    rounds: int = 0
    lines: int = 0
    segments_sent: int = 0
    segments_rejected_lines: int = 0  # sent, but the target refused some lines (400)
    segments_dropped: int = 0  # refused whole (413) or lost to the spool bound
    push_failures: int = 0
    last_error: str = ""


class Agent:
    def __init__(self, collectors: Sequence[Collector], spool: Spool, pusher: Pusher | None, *,
                 interval_s: float = 5.0, backoff_s: tuple[float, float] = (1.0, 60.0),
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, host: str | None = None,
                 timer: Callable[[], float] = time.perf_counter,
                 wall_ns: Callable[[], int] = time.time_ns) -> None:
        """`host` tags the status points (default: the first collector's `host`, else this
        machine's name); `timer` times each collect(); `wall_ns` stamps the status points."""
        self.collectors = list(collectors)
        self.host = host or _host_of(self.collectors)
        self.timer, self.wall_ns = timer, wall_ns
        self.spool = spool
        self.pusher = pusher
        if pusher is not None and pusher.host is None:
            # A sharded service sends this node's pushes to the shard that owns it.
            pusher.set_host(self.host)
        self.interval_s = interval_s
        self.backoff_min, self.backoff_max = backoff_s
        self._backoff = self.backoff_min
        self._retry_at = float("-inf")
        self.clock, self.sleep = clock, sleep
        self.stats = AgentStats()

    def lines(self) -> list[str]:
        """One round from every collector, as line protocol, each followed by its status
        point; a source that is down adds only the status, which says why."""
        out: list[str] = []
        ts_ns = self.wall_ns()
        for c in self.collectors:
            t0 = self.timer()
            try:
                batch = c.collect()
                lines = list(batch_to_lines(batch))
                up, reason, samples = c.status.up, c.status.reason, batch.samples
            except Exception as exc:  # a collector bug: the other sources' round still goes
                log.exception("collector %s failed this round", c.name)
                lines, up, samples = [], False, 0
                reason = f"collector raised {type(exc).__name__}: {exc}"
            seconds = max(self.timer() - t0, 0.0)
            if not up:
                log.warning("collector %s is down: %s", c.name, reason)
            out.extend(lines)
            out.append(status_line(self.host, c.name, up, seconds, samples,
                                   reason or "down, no reason given", ts_ns))
        return out

    def collect_round(self) -> int:
        lines = self.lines()
        self.stats.rounds += 1
        if lines:
            self.spool.append("\n".join(lines) + "\n")
            self.stats.lines += len(lines)
        self.stats.segments_dropped = self.spool.stats.dropped_segments
        return len(lines)

    def flush(self) -> int:
        """Send spooled segments in order until one fails; returns how many went."""
        if self.pusher is None or self.clock() < self._retry_at:
            return 0
        sent = 0
        while (seg := self.spool.oldest()) is not None:
            seq, body = seg
            res = self.pusher.push(body)
            if res.outcome is Outcome.RETRY:
                self.stats.push_failures += 1
                self.stats.last_error = f"{res.status}: {res.detail}" if res.status else res.detail
                self._retry_at = self.clock() + self._backoff
                log.warning("push failed (%s); retrying in %.0f s", self.stats.last_error,
                            self._backoff)
                self._backoff = min(self._backoff * 2, self.backoff_max)
                return sent
            if res.outcome is Outcome.DROP:
                self.stats.segments_dropped += 1
                log.error("target refused a segment whole (%s): %s", res.status, res.detail)
            elif res.status == 400:
                self.stats.segments_rejected_lines += 1
                log.warning("target refused some lines: %s", res.detail)
            self.spool.remove(seq)
            self.stats.segments_sent += 1
            sent += 1
        self._backoff = self.backoff_min
        return sent

    def run(self, stop: Callable[[], bool], rounds: int | None = None) -> AgentStats:
        """Every interval: one round, then a flush; until `stop()` or `rounds` rounds."""
        next_at = self.clock()
        while not stop() and (rounds is None or self.stats.rounds < rounds):
            self.collect_round()
            self.flush()
            next_at += self.interval_s
            delay = next_at - self.clock()
            if delay > 0:
                self.sleep(delay)
            else:  # fell behind (a slow source): skip rather than pile rounds up
                next_at = self.clock()
        return self.stats


def _host_of(collectors: Sequence[Collector]) -> str:
    for c in collectors:
        host = getattr(c, "host", None)
        if isinstance(host, str) and host:
            return host
    return socket.gethostname()
