"""IpmiCollector: one BMC's supplies, fans, inlet/exhaust temperatures, redundancy and new SEL
entries, each collect().

A read runs `sdr elist`, every `thresholds_every` reads `sensor` (the fans' lower critical
thresholds), then `sel info` and, only when the log changed, `sel elist`. The whole read has one
budget, `timeout` (default 60 s: BMCs are slow), and each command gets what is left of it. A BMC
that times out, refuses the session or answers with no sensor gives `bmc_reachable` 0, up=False
and the reason (never the password); the SEL failing alone costs only the SEL. `read()` gives
the Points (the agreed wire schema: `psu`, `fan`, `node`, `sel` events); `collect()` maps them
onto the catalog as a Batch.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from collectors.base import CollectorStatus
from collectors.frames import Batch, Rejection
from collectors.ipmi.runner import Target, redact
from collectors.ipmi.sdr import parse_sdr_elist
from collectors.ipmi.sel import SelCursor, parse_sel_elist
from collectors.ipmi.sensors import map_rows
from collectors.ipmi.thresholds import parse_lower_critical
from collectors.lineprotocol import Point
from collectors.process import RunResult, run_process
from collectors.schema import SchemaMapper

log = logging.getLogger(__name__)

# (argv, timeout s, child environment or None to inherit) -> (exit status, stdout, stderr)
Runner = Callable[[Sequence[str], float, Mapping[str, str] | None], RunResult]


@dataclass(slots=True)
class Reading:
    points: list[Point] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    reachable: bool = True
    reason: str = ""


class _Unreachable(Exception):
    pass


class IpmiCollector:
    def __init__(
        self,
        target: Target | None = None,
        *,
        host: str | None = None,
        timeout: float = 60.0,
        thresholds_every: int = 10,
        sel: bool = True,
        runner: Runner = run_process,
        clock: Callable[[], int] = time.time_ns,
        monotonic: Callable[[], float] = time.monotonic,
        name: str = "ipmi",
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if thresholds_every < 0:
            raise ValueError("thresholds_every must be 0 (never) or more")
        self.target = target if target is not None else Target()
        self.host = host if host is not None else socket.gethostname()
        self.timeout = timeout
        self.thresholds_every = thresholds_every
        self.sel = sel
        self.name = name
        self.status = CollectorStatus()
        self.cursor = SelCursor()
        self.lower_critical: dict[str, float] = {}
        self._reads = 0
        self._sel_mark: tuple[str, str] | None = None  # (entries, last add time) of `sel info`
        self._runner = runner
        self._clock = clock
        self._monotonic = monotonic
        self._mapper = SchemaMapper()

    def collect(self) -> Batch:
        got = self.read()
        return self._mapper.to_batch(got.points, got.rejected)

    def read(self) -> Reading:
        ts_ns = self._clock()
        deadline = self._monotonic() + self.timeout
        out = Reading()
        try:
            env = self.target.env()
        except KeyError as exc:
            return self._down(out, str(exc.args[0]), ts_ns)
        try:
            sdr = self._run(("sdr", "elist"), deadline, env)
            rows = parse_sdr_elist(sdr, out.rejected)
            if not rows:
                raise _Unreachable(f"{self.target.label} listed no sensor")
            if self.thresholds_every and self._reads % self.thresholds_every == 0:
                self._thresholds(deadline, env, out)
            mapped = map_rows(rows, self.host, ts_ns, self.lower_critical)
        except _Unreachable as exc:
            return self._down(out, str(exc), ts_ns)
        self._reads += 1
        out.points = mapped.points
        out.rejected += mapped.skipped
        node = next((p for p in out.points if p.measurement == "node"), None)
        if node is None:
            out.points.append(Point("node", {"host": self.host}, {"bmc_reachable": 1}, ts_ns))
        else:
            node.fields["bmc_reachable"] = 1
        if self.sel:
            self._sel(deadline, env, ts_ns, out)
        if not self.status.up:
            log.info("%s: %s answers again", self.name, self.target.label)
        self.status = CollectorStatus(up=True)
        return out

    def _thresholds(self, deadline: float, env: Mapping[str, str] | None, out: Reading) -> None:
        try:
            self.lower_critical = parse_lower_critical(self._run(("sensor",), deadline, env))
        except _Unreachable as exc:  # the readings are still good; keep the last thresholds
            out.rejected.append(Rejection(f"thresholds not read: {exc}"))

    def _sel(self, deadline: float, env: Mapping[str, str] | None, ts_ns: int,
             out: Reading) -> None:
        try:
            info = self._run(("sel", "info"), deadline, env)
            mark = _sel_mark(info)
            if mark is not None and mark == self._sel_mark:
                return  # nothing added or cleared since the last read
            listing = self._run(("sel", "elist"), deadline, env)
        except _Unreachable as exc:
            out.rejected.append(Rejection(f"SEL not read: {exc}"))
            return
        self._sel_mark = mark
        for e in self.cursor.new(parse_sel_elist(listing, out.rejected)):
            if e.severity:
                out.points.append(Point("sel", {"host": self.host}, {"code": e.severity}, ts_ns))
            else:
                out.rejected.append(Rejection(
                    f"SEL record {e.record_id:x} not an event: {e.event} "
                    f"({'informational' if e.asserted else 'deasserted'})", entity=e.sensor))

    def _run(self, command: Sequence[str], deadline: float,
             env: Mapping[str, str] | None) -> str:
        left = deadline - self._monotonic()
        what = f"{self.target.label}: ipmitool {' '.join(command)}"
        if left <= 0:
            raise _Unreachable(f"{what}: no time left of the {self.timeout:g} s budget")
        secret = None if env is None else env.get("IPMI_PASSWORD")
        try:
            rc, stdout, stderr = self._runner(self.target.argv(*command), left, env)
        except TimeoutError:
            raise _Unreachable(f"{what} timed out after {left:.3g} s; killed") from None
        except OSError as exc:
            raise _Unreachable(f"{what}: cannot run: {exc.strerror or exc}") from None
        if rc != 0:
            detail = redact((stderr.strip() or stdout.strip())[:300], secret) or "no output"
            raise _Unreachable(f"{what} exited with status {rc}: {detail}")
        return stdout

    def _down(self, out: Reading, reason: str, ts_ns: int) -> Reading:
        if self.status.up or self.status.reason != reason:
            log.warning("collector %s down: %s", self.name, reason)
        self.status = CollectorStatus(up=False, reason=reason)
        out.reachable, out.reason = False, reason
        out.points = [Point("node", {"host": self.host}, {"bmc_reachable": 0}, ts_ns)]
        return out


def _sel_mark(info: str) -> tuple[str, str] | None:
    """(Entries, Last Add Time) of `ipmitool sel info`; None when either is missing."""
    got: dict[str, str] = {}
    for line in info.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            got[key.strip()] = value.strip()
    entries, added = got.get("Entries"), got.get("Last Add Time")
    return None if entries is None or added is None else (entries, added)
