"""Kernel log lines -> Xid events (coalesced), SXid records and host hardware errors (machine
checks, EDAC memory errors), rejecting what cannot be read.

`KernelLogParser` keeps its state between calls (line numbers, open coalescing windows, which
unmapped bus ids it already warned about) so the collector can feed it a few lines at a time;
`parse_kernel_log` is the one-shot form for a whole file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import tzinfo

from collectors.compat import UTC
from collectors.frames import Entity, Rejection
from collectors.kernel_log.busmap import UNMAPPED_BASE, BusMap, How
from collectors.kernel_log.coalesce import DEFAULT_WINDOW_S, Coalescer
from collectors.kernel_log.host_errors import (
    HW_ERR_TAG,
    MceKind,
    is_mce_line,
    parse_edac,
    parse_mce,
)
from collectors.kernel_log.messages import parse_sxid, parse_xid
from collectors.kernel_log.records import (
    EdacRecord,
    MceRecord,
    ParseResult,
    SXidRecord,
    XidRecord,
)
from collectors.kernel_log.timestamps import Stamped, TimeContext, split_stamp

log = logging.getLogger(__name__)

XID_METRIC = "xid"
# A machine check's detail follows its "events logged" notice within the same notifier call
# (microseconds); seconds allow for stamps of one-second resolution (syslog, dmesg -T).
MCE_NOTICE_S = 2.0


class KernelLogParser:
    def __init__(
        self,
        host: str,
        *,
        gpu_index: Mapping[str, int] | BusMap | None = None,
        time: TimeContext | None = None,
        window_s: float = DEFAULT_WINDOW_S,
    ) -> None:
        self.host = host
        self.time = time or TimeContext()
        self._gpus = gpu_index if isinstance(gpu_index, BusMap) else BusMap(gpu_index)
        self.coalescer = Coalescer(window_s)
        self._line = 0
        self._warned: set[str] = set()
        self._notices: list[float] = []  # machine-check notices no header has claimed yet

    def feed(self, lines: Iterable[str]) -> ParseResult:
        """Parse more lines. Events returned are new; repeats of an event returned by an earlier
        call only raise that event's `repeats`."""
        out = ParseResult()
        for line in lines:
            self._line += 1
            out.lines += 1
            # Cheap substring tests first: nearly every kernel line is not about Xids.
            is_sxid = "SXid" in line
            if not is_sxid and "NVRM: Xid" not in line:
                if not self._host_error(line, out):
                    out.ignored += 1
                continue
            stamped = split_stamp(line, self.time)
            if not isinstance(stamped, Stamped):
                reason = stamped or "Xid line without a known time stamp"
                out.rejected.append(Rejection(reason, line=self._line))
                continue
            if is_sxid:
                self._sxid(stamped, out)
            else:
                self._xid(stamped, out)
        return out

    def _xid(self, stamped: Stamped, out: ParseResult) -> None:
        msg = parse_xid(stamped.message)
        if isinstance(msg, str):
            out.rejected.append(Rejection(msg, line=self._line, metric=XID_METRIC))
            return
        # A bus id the map lacks is delivered all the same, most often it is the GPU that fell
        # off the bus (BusMap.resolve says where it goes).
        where = self._gpus.resolve(msg.bus_id)
        if where.how is not How.MAPPED and msg.bus_id not in self._warned:
            self._warned.add(msg.bus_id)
            note = _unmapped_note(self.host, msg.bus_id, where.index, where.how)
            out.notes.append(note)
            log.warning(note)
        gpu = None if where.how is How.UNMAPPED else where.index
        rec = XidRecord(ts=stamped.ts, bus_id=msg.bus_id, code=msg.code, gpu=gpu, pid=msg.pid,
                        process=msg.process, detail=msg.detail, line=self._line)
        ev = self.coalescer.push(Entity.gpu(self.host, where.index).key, rec)
        if ev is not None:
            out.events.append(ev)

    def _sxid(self, stamped: Stamped, out: ParseResult) -> None:
        msg = parse_sxid(stamped.message)
        if isinstance(msg, str):
            out.rejected.append(Rejection(msg, line=self._line, metric="sxid"))
            return
        out.sxids.append(SXidRecord(ts=stamped.ts, switch=msg.switch, bus_id=msg.bus_id,
                                    code=msg.code, fatal=msg.fatal, detail=msg.detail,
                                    line=self._line))


    def _host_error(self, line: str, out: ParseResult) -> bool:
        """Take a machine-check or EDAC CE/UE line; False for any other line (a report's
        detail lines and EDAC driver notices included), which the caller counts as ignored."""
        if "EDAC" in line:
            edac = parse_edac(line)
            if edac is None:
                return False
            metric = "edac_ue_total" if " UE" in line else "edac_ce_total"
            stamped = self._stamp(line, out, metric)
            if stamped is None:
                return True
            edac = parse_edac(stamped.message)
            if isinstance(edac, str) or edac is None:
                out.rejected.append(Rejection(edac or "EDAC line in an unknown format",
                                              line=self._line, metric=metric))
                return True
            out.edac.append(EdacRecord(ts=stamped.ts, mc=edac.mc, kind=edac.kind,
                                       count=edac.count, detail=edac.detail, line=self._line))
            return True
        if HW_ERR_TAG not in line or not is_mce_line(line):
            return False
        if parse_mce(line).kind is MceKind.DETAIL:
            return False
        stamped = self._stamp(line, out, "mce_total")
        if stamped is None:
            return True
        mce = parse_mce(stamped.message)
        announced = False
        # Notices older than the window can no longer be claimed: forget them.
        self._notices = [t for t in self._notices if stamped.ts - t <= MCE_NOTICE_S]
        if mce.kind is MceKind.NOTICE:
            self._notices.append(stamped.ts)
        else:
            claim = next((t for t in self._notices if t <= stamped.ts), None)
            if claim is not None:
                self._notices.remove(claim)
                announced = True
        out.mces.append(MceRecord(ts=stamped.ts, cpu=mce.cpu, bank=mce.bank, status=mce.status,
                                  exception=mce.exception, uncorrected=mce.uncorrected,
                                  announced=announced, line=self._line))
        return True

    def _stamp(self, line: str, out: ParseResult, metric: str) -> Stamped | None:
        stamped = split_stamp(line, self.time)
        if isinstance(stamped, Stamped):
            return stamped
        out.rejected.append(Rejection(stamped or "hardware-error line without a known time "
                                      "stamp", line=self._line, metric=metric))
        return None


def _unmapped_note(host: str, bus_id: str, index: int, how: How) -> str:
    if how is How.REMEMBERED:
        return (f"{host}: PCI {bus_id} has left the GPU map (fallen off the bus?); its Xids go "
                f"to gpu{index}, the index it had")
    return (f"{host}: PCI {bus_id} is not in the GPU map; its Xids go to gpu{index} "
            f"({UNMAPPED_BASE} + its PCI address)")


def parse_kernel_log(
    lines: Iterable[str],
    host: str,
    *,
    gpu_index: Mapping[str, int] | None = None,
    boot_time: float | None = None,
    year: int | None = None,
    now: float | None = None,
    tz: tzinfo = UTC,
    window_s: float = DEFAULT_WINDOW_S,
) -> ParseResult:
    """Parse a whole log. `gpu_index` maps PCI bus ids (as nvidia-smi prints them, or as the
    kernel does) to GPU indices; `boot_time` (epoch s) is needed for `[uptime]` and kmsg
    stamps; `year`/`now` date syslog stamps. Result events carry final repeat counts."""
    parser = KernelLogParser(host, gpu_index=gpu_index,
                             time=TimeContext(boot_time, year, now, tz), window_s=window_s)
    return parser.feed(lines)
