"""Counts of what a lenient mapper ignored: measurements and fields the catalog does not track.

InfluxDB stores whatever a sender writes; we keep only what the catalog tracks and count the
rest per (measurement, field) so an operator can see what a Telegraf config sends for nothing.
Every name here comes from the wire, so the tally is bounded: names are cut to MAX_NAME
characters, and past `max_names` distinct pairs new ones are counted together under OTHER.
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_NAME = 100
OTHER = "(other)"  # parentheses: never a valid measurement or field name of ours
Key = tuple[str, str]


class IgnoredNames:
    """(measurement, field) -> how many values were ignored."""

    __slots__ = ("counts", "max_names")

    def __init__(self, max_names: int = 1000) -> None:
        self.max_names = max_names
        self.counts: dict[Key, int] = {}

    def add(self, measurement: str, field: str, n: int = 1) -> bool:
        """Count `n` values; whether the pair is new (an OTHER overflow counts as new once)."""
        key = (measurement[:MAX_NAME], field[:MAX_NAME])
        counts = self.counts
        if key in counts:
            counts[key] += n
            return False
        if len(counts) >= self.max_names:
            key = (OTHER, OTHER)
            if key in counts:
                counts[key] += n
                return False
        counts[key] = n
        return True

    def add_fields(self, measurement: str, fields: Iterable[str]) -> None:
        for f in fields:
            self.add(measurement, f)

    def merge(self, other: IgnoredNames) -> list[Key]:
        """Add another tally in; the pairs that are new here (OTHER included)."""
        new: list[Key] = []
        for (m, f), n in other.counts.items():
            if self.add(m, f, n):
                new.append((m, f) if (m, f) in self.counts else (OTHER, OTHER))
        return new

    def take(self) -> IgnoredNames:
        """This tally, leaving an empty one in its place."""
        out = IgnoredNames(self.max_names)
        out.counts, self.counts = self.counts, {}
        return out

    def __len__(self) -> int:
        return len(self.counts)

    def total(self) -> int:
        return sum(self.counts.values())
