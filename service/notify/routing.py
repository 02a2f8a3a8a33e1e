"""The routing tree: an alert walks from the root to the deepest matching routes (siblings
after a match only when it says `continue`), as in Alertmanager. Children inherit the
receiver, grouping and timing they do not set."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from service.notify.config import RouteSettings
from service.notify.matchers import Matcher, match_all, parse_all


@dataclass(frozen=True, slots=True)
class Route:
    id: str  # position in the tree ("0", "0.1", ...): part of every group key
    receiver: str
    matchers: tuple[Matcher, ...]
    group_by: tuple[str, ...]
    group_wait_s: float
    group_interval_s: float
    repeat_interval_s: float
    continue_: bool
    children: tuple[Route, ...]

    @staticmethod
    def build(s: RouteSettings, parent: Route | None = None, rid: str = "0") -> Route:
        def inherit(mine: object, theirs: object, default: object) -> object:
            if mine is not None:
                return mine
            return theirs if parent is not None else default

        receiver = s.receiver or (parent.receiver if parent else "")
        if not receiver:
            raise ValueError("the root route needs a receiver")
        group_by = tuple(s.group_by) if s.group_by is not None else (
            parent.group_by if parent else ("node",))
        wait = inherit(s.group_wait_s, parent and parent.group_wait_s, 30.0)
        interval = inherit(s.group_interval_s, parent and parent.group_interval_s, 300.0)
        repeat = inherit(s.repeat_interval_s, parent and parent.repeat_interval_s, 14400.0)
        assert isinstance(wait, float | int) and isinstance(interval, float | int)
        assert isinstance(repeat, float | int)
        shell = Route(rid, receiver, parse_all(s.matchers), group_by, float(wait),
                      float(interval), float(repeat), s.continue_, ())
        kids = tuple(Route.build(c, shell, f"{rid}.{i}") for i, c in enumerate(s.routes))
        return Route(rid, receiver, shell.matchers, group_by, float(wait), float(interval),
                     float(repeat), s.continue_, kids)

    def match(self, labels: Mapping[str, str]) -> list[Route]:
        """The routes an alert with these labels reaches (empty if this route does not
        match)."""
        if not match_all(self.matchers, labels):
            return []
        found: list[Route] = []
        for child in self.children:
            got = child.match(labels)
            if got:
                found += got
                if not child.continue_:
                    break
        return found or [self]

    def group_key(self, labels: Mapping[str, str]) -> tuple[str, dict[str, str]]:
        """The aggregation group an alert falls in on this route, and its group labels."""
        if self.group_by == ("...",):  # Alertmanager's "group by every label"
            chosen = dict(sorted(labels.items()))
        else:
            chosen = {k: labels.get(k, "") for k in self.group_by}
        body = ",".join(f"{k}={v!r}" for k, v in chosen.items())
        return f"{self.id}:{{{body}}}", chosen

    def walk(self) -> list[Route]:
        out = [self]
        for c in self.children:
            out += c.walk()
        return out
