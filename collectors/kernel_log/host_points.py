"""Host hardware errors of the kernel log as Points of the agreed wire schema.

Node scope (measurement `node`, tag `host`): `mce_total` (machine checks seen), `edac_ce_total`
and `edac_ue_total` (EDAC memory errors, the count each line gives); events: measurement `sxid`,
field `code`, one per SXid report (its Fatal / Non-fatal line, not its continuation lines).

The counters count what this reader saw since it started (a restart starts them again at 0,
which the catalog marks as resets). EDAC counts from the log are only for hosts whose EDAC
sysfs tree cannot be read: where it can, the `edac` source gives the same totals since boot and
the two must not both write `edac_*_total` of one node (`edac=False` here).
"""

from __future__ import annotations

from collectors.compat import dataclass
from collectors.kernel_log.records import ParseResult
from collectors.lineprotocol import FieldValue, Point

NODE = "node"
SXID = "sxid"


@dataclass(slots=True)
class HostErrorTally:
    edac: bool = True
    mce_total: int = 0
    edac_ce_total: int = 0
    edac_ue_total: int = 0

    def fields(self) -> dict[str, FieldValue]:
        out: dict[str, FieldValue] = {"mce_total": self.mce_total}
        if self.edac:
            out["edac_ce_total"] = self.edac_ce_total
            out["edac_ue_total"] = self.edac_ue_total
        return out

    def count(self, result: ParseResult) -> bool:
        """Add a parse's machine checks and EDAC reports; whether any counter moved."""
        before = (self.mce_total, self.edac_ce_total, self.edac_ue_total)
        self.mce_total += sum(1 for m in result.mces if not m.announced)
        if self.edac:
            self.edac_ce_total += sum(e.count for e in result.edac if e.kind == "CE")
            self.edac_ue_total += sum(e.count for e in result.edac if e.kind == "UE")
        return (self.mce_total, self.edac_ce_total, self.edac_ue_total) != before

    def round_point(self, host: str, ts_ns: int) -> Point:
        """The counters now, for a collector's round: one sample per round, in time order."""
        return Point(NODE, {"host": host}, self.fields(), ts_ns)

    def record_points(self, result: ParseResult, host: str) -> list[Point]:
        """A whole log (a capture): the counters after each line that moved them, at that line's
        time (one point per time stamp)."""
        steps: list[tuple[float, int, str, int]] = [
            (m.ts, m.line, "mce_total", 0 if m.announced else 1) for m in result.mces]
        if self.edac:
            steps += [(e.ts, e.line, f"edac_{e.kind.lower()}_total", e.count)
                      for e in result.edac]
        steps.sort(key=lambda s: (s[0], s[1]))
        points: list[Point] = []
        for ts, _, name, n in steps:
            if n == 0:  # a header its notice already counted
                continue
            setattr(self, name, getattr(self, name) + n)
            ts_ns = _ns(ts)
            if points and points[-1].ts_ns == ts_ns:
                points[-1].fields.update(self.fields())
            else:
                points.append(Point(NODE, {"host": host}, self.fields(), ts_ns))
        return points


def sxid_points(result: ParseResult, host: str) -> list[Point]:
    """One `sxid` event per SXid report."""
    return [Point(SXID, {"host": host}, {"code": s.code}, _ns(s.ts))
            for s in result.sxids if s.opens_report]


def _ns(ts: float) -> int:
    return int(ts * 1e9)
