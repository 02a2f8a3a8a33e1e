"""The node agent: collect every source each round, spool the round as gzip line protocol,
and push the spool oldest first, backing off while the target is unreachable.

Each round also reports every collector as one `gpuhealth_collector` point (up, scrape
duration, samples, last error; collectors.collector_status), so the service exports node
agents' collectors as it does its own, and an InfluxDB target stores them like any point.

What the round's sources say of each GPU's identity (UUID, serial, ...: collectors.identity)
is joined over the sources and goes as `gpu_info` points when it is new or changed, else at
most every `identity_every_s` (collectors.agent.identity_gate), decided before the round is
spooled.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from collectors import identity
from collectors.agent.identity_gate import IDENTITY_EVERY_S, IdentityGate
from collectors.agent.push import Pusher
from collectors.agent.spool import Spool
from collectors.agent.target import Target
from collectors.base import Collector
from collectors.collector_status import status_line
from collectors.compat import dataclass
from collectors.frames import Batch
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
                 wall_ns: Callable[[], int] = time.time_ns,
                 also: Sequence[tuple[Spool, Pusher]] = (),
                 identity_every_s: float = IDENTITY_EVERY_S) -> None:
        """`host` tags the status points (default: the first collector's `host`, else this
        machine's name); `timer` times each collect(); `wall_ns` stamps the status points;
        `also`: more targets, each with a spool of its own (an HA pair's other replica);
        `identity_every_s`: an unchanged GPU identity goes again after this long (`clock`)."""
        self.collectors = list(collectors)
        self.host = host or _host_of(self.collectors)
        self.timer, self.wall_ns = timer, wall_ns
        self.spool = spool  # the first target's
        self.pusher = pusher
        self.clock, self.sleep = clock, sleep
        self.targets = [Target(sp, pu, backoff_s=backoff_s, clock=clock)
                        for sp, pu in [(spool, pusher), *also]]
        for t in self.targets:
            if t.pusher is not None and t.pusher.host is None:
                # A sharded service sends this node's pushes to the shard that owns it.
                t.pusher.set_host(self.host)
        self.interval_s = interval_s
        self.identities = IdentityGate(identity_every_s, clock)
        self.stats = AgentStats()
        self._refused_whole = 0  # segments targets refused whole (413), over all targets

    def lines(self) -> list[str]:
        """One round from every collector, as line protocol, each followed by its status
        point; a source that is down adds only the status, which says why. Then the GPU
        identities the gate lets through (joined over the sources)."""
        out: list[str] = []
        said: dict[str, identity.GpuIdentity] = {}
        ts_ns = self.wall_ns()
        for c in self.collectors:
            t0 = self.timer()
            try:
                batch = c.collect()
                if batch.identity:
                    identity.merge_into(said, batch.identity)
                    batch = replace(batch, identity={})
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
        if said:
            out.extend(batch_to_lines(Batch(identity=self.identities.take(said))))
        return out

    def collect_round(self) -> int:
        lines = self.lines()
        self.stats.rounds += 1
        if lines:
            text = "\n".join(lines) + "\n"
            for t in self.targets:
                t.spool.append(text)
            self.stats.lines += len(lines)
        self.stats.segments_dropped = self._refused_whole + sum(
            t.spool.stats.dropped_segments for t in self.targets)
        return len(lines)

    def flush(self) -> int:
        """Each target: send its spooled segments in order until one fails; returns how many
        went, over all targets."""
        total = 0
        for t in self.targets:
            got = t.flush()
            total += got.sent
            self.stats.segments_sent += got.sent
            self.stats.segments_rejected_lines += got.rejected_lines
            self.stats.segments_dropped += got.dropped
            self._refused_whole += got.dropped
            if got.failed:
                self.stats.push_failures += 1
                self.stats.last_error = got.error
        return total

    def run(self, stop: Callable[[], bool], rounds: int | None = None,
            each_round: Callable[[], None] | None = None) -> AgentStats:
        """Every interval: one round, then a flush, then `each_round()` (a progress line);
        until `stop()` or `rounds` rounds."""
        next_at = self.clock()
        while not stop() and (rounds is None or self.stats.rounds < rounds):
            self.collect_round()
            self.flush()
            if each_round is not None:
                each_round()
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
