"""Why samples were refused: the `rejected` count of the demo and of a replay, explained.

A RefusalTally rides on a Pipeline as a sink (it sees every round's IngestResult) and as a tick
observer (the tick that follows an ingest carries the round's data time). It groups refusals by
reason, with the nodes and the time span each reason hit, and says which injected trap of a
simulated trace (its labels) was under way there, so `984 rejected` reads as what it was.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.stages.ingest import IngestResult
from service.tick import TickResult

# The parts of a reason that differ row by row: a timestamp, a count of undetailed rows.
_VARIABLE = re.compile(r": (ts=\S+|\d+ more (rows|values))$")
SHOWN = 5  # reasons listed; the rest are summed on one line

# What an injected trap does to the data that gets refused (the simulator's trap names).
TRAP_EFFECT = {
    "clock_skew": "its clock ran a sample ahead and, when set right, stamped new samples "
                  "with times it had already sent",
    "driver_reload": "the node's driver reloaded and its counters restarted",
    "telemetry_gap": "the node went silent and then sent what it had held back",
}


@dataclass(slots=True)
class Refusals:
    """Samples refused for one reason."""

    reason: str
    samples: int = 0
    nodes: set[str] = field(default_factory=set)
    first: float | None = None  # data time of the first and last round it hit
    last: float | None = None

    def at(self, t: float) -> None:
        self.first = t if self.first is None else min(self.first, t)
        self.last = t if self.last is None else max(self.last, t)


def reason_kind(reason: str) -> str:
    return _VARIABLE.sub("", reason)


class RefusalTally:
    def __init__(self) -> None:
        self.by_reason: dict[str, Refusals] = {}
        self._unstamped: list[Refusals] = []  # refused by this round, before its tick

    @property
    def samples(self) -> int:
        return sum(r.samples for r in self.by_reason.values())

    def write(self, result: IngestResult) -> None:
        """Sink: split the round's refused samples over its reasons, in proportion to the
        refusals recorded for each (exact when a round has one reason, as most do)."""
        if not result.rejected:
            return
        kinds: Counter[str] = Counter()
        nodes: dict[str, set[str]] = {}
        for r in result.rejections:
            kind = reason_kind(r.reason)
            kinds[kind] += 1
            if r.entity:
                nodes.setdefault(kind, set()).add(r.entity.split(":")[0])
        if not kinds:
            kinds["reason not recorded"] = 1
        total, left = sum(kinds.values()), result.rejected
        ranked = kinds.most_common()
        for i, (kind, n) in enumerate(ranked):
            share = left if i == len(ranked) - 1 else result.rejected * n // total
            left -= share
            group = self.by_reason.setdefault(kind, Refusals(kind))
            group.samples += share
            group.nodes |= nodes.get(kind, set())
            self._unstamped.append(group)

    def observe(self, tick: TickResult) -> None:
        """Observer: the round just refused was scored at `tick.at`."""
        for group in self._unstamped:
            group.at(tick.at)
        self._unstamped.clear()

    def close(self) -> None:
        pass

    def lines(self, clock: Callable[[float], str],
              labels: Sequence[dict[str, Any]] = (), step_s: float = 0.0) -> list[str]:
        """One line per reason, most samples first; `clock` formats a data time; `labels`
        (a simulated trace's) name the trap under way on those nodes at that time."""
        groups = sorted(self.by_reason.values(), key=lambda g: -g.samples)
        if not groups:
            return []
        out = [f"{self.samples:,} samples refused:"]
        for g in groups[:SHOWN]:
            nodes = f" on {', '.join(sorted(g.nodes))}" if g.nodes else ""
            when = ("" if g.first is None or g.last is None
                    else f" at {clock(g.first)}" if g.first == g.last
                    else f" from {clock(g.first)} to {clock(g.last)}")
            line = f"  {g.samples:,}: {g.reason}{nodes}{when}"
            trap = _trap(g, labels, step_s)
            if trap is not None:
                effect = TRAP_EFFECT.get(str(trap["trap"]), "")
                line += (f", during the injected {trap['trap']} on {trap['entity']} "
                         f"({clock(float(trap['start']))}-{clock(float(trap['end']))})"
                         f"{': ' + effect if effect else ''}")
            out.append(line)
        rest = groups[SHOWN:]
        if rest:
            out.append(f"  {sum(g.samples for g in rest):,} for {len(rest)} other reasons")
        return out

    def as_list(self) -> list[dict[str, Any]]:
        return [{"reason": g.reason, "samples": g.samples, "nodes": sorted(g.nodes),
                 "first": g.first, "last": g.last}
                for g in sorted(self.by_reason.values(), key=lambda g: -g.samples)]


def _trap(g: Refusals, labels: Sequence[dict[str, Any]], step_s: float) -> dict[str, Any] | None:
    """The node-wide benign trap (of a simulated trace) on one of the group's nodes whose span,
    widened by a step each side, holds every round the group hit; one whose effect on the
    data is known first. Device traps (a noisy port, a carrier GPU) never refuse samples."""
    if g.first is None or g.last is None:
        return None
    found = [lab for lab in labels
             if lab.get("kind") == "benign" and lab.get("scope") == "node"
             and lab.get("node") in g.nodes
             and float(lab.get("start", 0.0)) - step_s <= g.first
             and g.last <= float(lab.get("end", 0.0)) + step_s]
    found.sort(key=lambda lab: lab.get("trap") not in TRAP_EFFECT)
    return found[0] if found else None
