"""IpmiCollector: one BMC's supplies, fans, inlet/exhaust temperatures, redundancy and new SEL
entries, each collect(), through ipmitool (the default) or freeipmi (`Target.tool`).

With ipmitool a read runs `sdr elist`, every `thresholds_every` reads `sensor` (the fans' lower
critical thresholds), then `sel info` and, only when the log changed, `sel elist`. With freeipmi
it runs `ipmi-sensors` as CSV (readings and thresholds in one), every `thresholds_every` reads
(and whenever a record is new to it) `ipmi-sensors -v` for the sensors' entities, then `ipmi-sel
--info` and, only when the log changed, `ipmi-sel -v` as CSV; the password goes in a freeipmi
config file (mode 0600, in a private directory the collector owns, removed after the read), the
SDR cache in that directory too. Both give the same rows to the same mapping. The whole read has one
budget, `timeout` (default 60 s: BMCs are slow), and each command gets what is left of it. A BMC
that times out, refuses the session or answers with no sensor gives `bmc_reachable` 0, up=False
and the reason (never the password); the SEL failing alone costs only the SEL. `read()` gives
the Points (the agreed wire schema: `psu`, `fan`, `node`, `sel` events); `collect()` maps them
onto the catalog as a Batch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Optional

from collectors.base import CollectorStatus
from collectors.compat import dataclass
from collectors.frames import Batch, Rejection
from collectors.ipmi.freeipmi_sel import parse_sel_csv
from collectors.ipmi.freeipmi_sel import sel_mark as freeipmi_sel_mark
from collectors.ipmi.freeipmi_sensors import Placement, parse_placements, parse_sensors_csv
from collectors.ipmi.runner import Target, freeipmi_config, redact
from collectors.ipmi.sdr import SdrRow, parse_sdr_elist
from collectors.ipmi.sel import SelCursor, SelEntry, parse_sel_elist
from collectors.ipmi.sensors import map_rows
from collectors.ipmi.thresholds import parse_lower_critical
from collectors.lineprotocol import Point
from collectors.process import RunResult, run_process
from collectors.schema import SchemaMapper

log = logging.getLogger(__name__)

# (argv, timeout s, child environment or None to inherit) -> (exit status, stdout, stderr)
Runner = Callable[[Sequence[str], float, Optional[Mapping[str, str]]], RunResult]


@dataclass(slots=True)
class Reading:
    points: list[Point] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    reachable: bool = True
    reason: str = ""


class _Unreachable(Exception):
    pass


class _NoPassword(Exception):
    """The password could not be had; the message never holds it."""


SENSORS_CSV = ("--comma-separated-output", "--output-sensor-thresholds", "--non-abbreviated-units")
SEL_CSV = ("-v", "--comma-separated-output", "--system-event-only")


@dataclass(slots=True)
class _Call:
    """How this read reaches the BMC: ipmitool's child environment, or freeipmi's config
    file; `secret` is what redact() cuts out of any message."""

    env: Mapping[str, str] | None = None
    config: Path | None = None
    secret: str | None = None


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
        self._placements: dict[int, Placement] = {}
        self._workdir: Path | None = None  # freeipmi's SDR cache and config file

    def close(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def collect(self) -> Batch:
        got = self.read()
        return self._mapper.to_batch(got.points, got.rejected)

    def read(self) -> Reading:
        ts_ns = self._clock()
        deadline = self._monotonic() + self.timeout
        out = Reading()
        try:
            with self._call() as call:
                return self._read(call, deadline, ts_ns, out)
        except _NoPassword as exc:
            return self._down(out, str(exc), ts_ns)

    def _read(self, call: _Call, deadline: float, ts_ns: int, out: Reading) -> Reading:
        try:
            if self.target.tool == "freeipmi":
                rows = self._freeipmi_sensors(call, deadline, out)
            else:
                rows = parse_sdr_elist(self._run(("sdr", "elist"), deadline, call), out.rejected)
                if not rows:
                    raise _Unreachable(f"{self.target.label} listed no sensor")
                if self.thresholds_every and self._reads % self.thresholds_every == 0:
                    self._thresholds(deadline, call, out)
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
            self._sel(deadline, call, ts_ns, out)
        if not self.status.up:
            log.info("%s: %s answers again", self.name, self.target.label)
        self.status = CollectorStatus(up=True)
        return out

    @contextlib.contextmanager
    def _call(self) -> Iterator[_Call]:
        """ipmitool: the child environment. freeipmi over the LAN: the password in a config
        file only this user reads, removed when the read ends, whatever happens."""
        freeipmi = self.target.tool == "freeipmi"
        env: Mapping[str, str] | None = None
        text: str | None = None
        try:
            if freeipmi:
                password = self.target.password()
                text = None if password is None else freeipmi_config(password)
            else:
                env = self.target.env()
                password = None if env is None else env.get("IPMI_PASSWORD")
        except KeyError as exc:
            raise _NoPassword(exc.args[0]) from None
        except OSError as exc:
            raise _NoPassword(f"password file of {self.target.label} unreadable: "
                              f"{exc.strerror or exc}") from None
        except ValueError as exc:
            raise _NoPassword(f"{self.target.label}: {exc}") from None
        if text is None:  # ipmitool, or freeipmi in band
            yield _Call(env=env, secret=password)
            return
        fd, name = tempfile.mkstemp(prefix="read-", suffix=".conf", dir=self._private())
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:  # mkstemp: mode 0600, O_EXCL
                f.write(text)
            yield _Call(config=Path(name), secret=password)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    def _private(self) -> Path:
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="gpuhealth-freeipmi-"))  # mode 0700
            (self._workdir / "sdr-cache").mkdir(mode=0o700)
            weakref.finalize(self, shutil.rmtree, self._workdir, True)
        return self._workdir

    def _freeipmi_argv(self, program: str, args: Sequence[str], call: _Call) -> list[str]:
        return self.target.freeipmi_argv(program, *args, config=call.config,
                                         cache=self._private() / "sdr-cache")

    def _freeipmi_sensors(self, call: _Call, deadline: float, out: Reading) -> list[SdrRow]:
        csv = self._run(self._freeipmi_argv("ipmi-sensors", SENSORS_CSV, call), deadline, call)
        listing = parse_sensors_csv(csv, None, self._placements)
        due = self.thresholds_every and self._reads % self.thresholds_every == 0
        if due or not self._placements or any(r.entity == 0 and r.instance == 0
                                               for r in listing.rows):
            try:
                verbose = self._run(self._freeipmi_argv("ipmi-sensors", ("-v",), call),
                                    deadline, call)
                self._placements = parse_placements(verbose)
            except _Unreachable as exc:  # the readings still map, by sensor type and name
                out.rejected.append(Rejection(f"sensor entities not read: {exc}"))
        listing = parse_sensors_csv(csv, out.rejected, self._placements)
        if not listing.rows:
            raise _Unreachable(f"{self.target.label} listed no sensor")
        self.lower_critical = listing.lower_critical
        return listing.rows

    def _thresholds(self, deadline: float, call: _Call, out: Reading) -> None:
        try:
            self.lower_critical = parse_lower_critical(self._run(("sensor",), deadline, call))
        except _Unreachable as exc:  # the readings are still good; keep the last thresholds
            out.rejected.append(Rejection(f"thresholds not read: {exc}"))

    def _sel(self, deadline: float, call: _Call, ts_ns: int, out: Reading) -> None:
        freeipmi = self.target.tool == "freeipmi"
        try:
            if freeipmi:
                info = self._run(self._freeipmi_argv("ipmi-sel", ("--info",), call), deadline,
                                 call)
                mark = freeipmi_sel_mark(info)
            else:
                mark = _sel_mark(self._run(("sel", "info"), deadline, call))
            if mark is not None and mark == self._sel_mark:
                return  # nothing added or cleared since the last read
            listing = self._run(self._freeipmi_argv("ipmi-sel", SEL_CSV, call) if freeipmi
                                else ("sel", "elist"), deadline, call)
        except _Unreachable as exc:
            out.rejected.append(Rejection(f"SEL not read: {exc}"))
            return
        self._sel_mark = mark
        entries: list[SelEntry] = (parse_sel_csv(listing, out.rejected) if freeipmi
                                   else parse_sel_elist(listing, out.rejected))
        for e in self.cursor.new(entries):
            if e.severity:
                out.points.append(Point("sel", {"host": self.host}, {"code": e.severity}, ts_ns))
            else:
                out.rejected.append(Rejection(
                    f"SEL record {e.record_id:x} not an event: {e.event} "
                    f"({'informational' if e.asserted else 'deasserted'})", entity=e.sensor))

    def _run(self, command: Sequence[str], deadline: float, call: _Call) -> str:
        """An ipmitool subcommand ("sdr", "elist"), or a whole freeipmi argv (it starts with
        its program's name, "ipmi-...")."""
        left = deadline - self._monotonic()
        freeipmi = command[0].startswith("ipmi-")
        argv = list(command) if freeipmi else self.target.argv(*command)
        shown = ([command[0], *(a for a in command[1:] if a.startswith("-v") or a == "--info")]
                 if freeipmi else ["ipmitool", *command])
        what = f"{self.target.label}: {' '.join(shown)}"
        if left <= 0:
            raise _Unreachable(f"{what}: no time left of the {self.timeout:g} s budget")
        secret = call.secret
        try:
            rc, stdout, stderr = self._runner(argv, left, call.env)
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
