"""One BMC's read, gathered per entity and turned into line-protocol points in the agreed
schema: measurement `psu` (tags host, psu), `fan` (host, fan), `node` (host) and the `sel` event
(host; field `code` 1 warning, 2 critical)."""

from __future__ import annotations

from dataclasses import field

from collectors.compat import dataclass
from collectors.lineprotocol import FieldValue, Point


@dataclass(slots=True)
class Reading:
    psus: dict[str, dict[str, float | int]] = field(default_factory=dict)
    fans: dict[str, dict[str, float | int]] = field(default_factory=dict)
    node: dict[str, float | int] = field(default_factory=dict)
    events: list[tuple[int, int]] = field(default_factory=list)  # (ts_ns, severity code)

    def psu(self, psu: str) -> dict[str, float | int]:
        return self.psus.setdefault(psu, {})

    def fan(self, fan: str) -> dict[str, float | int]:
        return self.fans.setdefault(fan, {})

    def redundancy(self, metric: str, value: int | None) -> None:
        """Several groups (or chassis): lost in any one is lost."""
        if value is not None:
            self.node[metric] = min(value, int(self.node.get(metric, 1)))

    def temperature(self, metric: str, celsius: float) -> None:
        """Several inlet (or exhaust) sensors: the hottest is the one that matters."""
        self.node[metric] = max(celsius, float(self.node.get(metric, celsius)))

    def points(self, host: str, ts_ns: int) -> list[Point]:
        out: list[Point] = []
        for psu, f in sorted(self.psus.items()):
            if f:
                out.append(Point("psu", {"host": host, "psu": psu}, _fields(f), ts_ns))
        for fan, f in sorted(self.fans.items()):
            if f:
                out.append(Point("fan", {"host": host, "fan": fan}, _fields(f), ts_ns))
        if self.node:
            out.append(Point("node", {"host": host}, _fields(self.node), ts_ns))
        out += [Point("sel", {"host": host}, {"code": code}, ts) for ts, code in self.events]
        return out


def _fields(f: dict[str, float | int]) -> dict[str, FieldValue]:
    return dict(f)
