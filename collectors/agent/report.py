"""What the agent says on stderr about itself (issue 33): at start, each source it found and
each it skipped and why; after `--once`, each source that failed and why; while replaying
or backfilling, a progress line every few seconds (rounds, lines, segments sent, spool left,
rate), since such a run otherwise prints nothing for minutes."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TextIO

from collectors import registry
from collectors.agent.loop import Agent
from collectors.base import Collector

# Why a source was not detected: what its registry.Source.detect looks for.
NOT_FOUND = {
    "nvidia-smi": "no nvidia-smi on PATH",
    "nvml": "NVML cannot be loaded (nvidia-ml-py not installed, or no driver: "
            "libnvidia-ml.so missing)",
    "kernel-log": "neither /dev/kmsg nor journalctl on this host",
    "dcgm-exporter": "nothing answers on http://127.0.0.1:9400/metrics",
    "infiniband": "no InfiniBand port under /sys/class/infiniband",
    "ibstat": "no ibstat on PATH",
    "ipmi": "no in-band BMC (ipmitool and /dev/ipmi0)",
    "redfish": "never detected: name it with --source and its BMCs in settings",
    "pcie": "no NVIDIA GPU under /sys/bus/pci/devices",
    "edac": "no EDAC driver in sysfs",
}


def survey() -> tuple[list[str], list[tuple[str, str]]]:
    """(the sources this host has, as registry.detected() gives them; (name, why) for each
    other source)."""
    found = [s.name for s in registry.SOURCES.values() if s.detect()]
    skipped = [(n, NOT_FOUND.get(n, "not found on this host"))
               for n in registry.SOURCES if n not in found]
    for n in list(found):
        better = registry.SUPERSEDED.get(n)
        if better in found:
            found.remove(n)
            skipped.append((n, f"{better} reads what it reads"))
    return found, skipped


def found_lines(found: Sequence[str], skipped: Sequence[tuple[str, str]]) -> list[str]:
    return ([f"source {n}: found" for n in found]
            + [f"source {n}: skipped: {why}" for n, why in skipped])


def failed_lines(collectors: Sequence[Collector]) -> list[str]:
    """After a round: each source that could not be read, and why (the others were read)."""
    return [f"source {c.name} is down: {c.status.reason or 'no reason given'}"
            for c in collectors if not c.status.up]


class Progress:
    """A line every `every_s` seconds of a replay or backfill: rounds, lines, segments sent,
    segments left in the spools and lines per second since the start."""

    def __init__(self, agent: Agent, out: TextIO, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.agent, self.out, self.every_s, self.clock = agent, out, every_s, clock
        self.started = self.last = clock()

    def line(self) -> str:
        s = self.agent.stats
        spooled = sum(t.spool.stats.segments for t in self.agent.targets)
        elapsed = max(self.clock() - self.started, 1e-9)
        return (f"agent: replay: {s.rounds} rounds, {s.lines} lines, {s.segments_sent} segments "
                f"sent, {spooled} left in the spool, {s.lines / elapsed:,.0f} lines/s")

    def __call__(self) -> None:
        """Print a line when `every_s` has passed since the last one."""
        now = self.clock()
        if now - self.last >= self.every_s:
            self.last = now
            print(self.line(), file=self.out, flush=True)
