"""Kernel-log line prefixes: find the time stamp, return it as epoch seconds plus the message.

Five spellings reach us. `dmesg` prints `[  123.456789]` seconds since boot; `dmesg -T` (and
`--time-format ctime`) prints the local time as `[Sun Feb 23 16:24:18 2025]`; `dmesg --time-format
iso` and `journalctl -o short-iso` print ISO-8601; syslog files and `journalctl -o short` print
`Mon DD HH:MM:SS host kernel:` with neither year nor zone; `/dev/kmsg` records are
`priority,seq,usec,flags;message` with microseconds since boot. `dmesg --decode` adds a
`kern  :warn  : ` facility/level prefix in front of any of the dmesg forms.
"""

from __future__ import annotations

import math
import re
import time
from datetime import datetime, tzinfo

from collectors.compat import UTC, dataclass

_DECODE = re.compile(r"^[a-z]+\s*:[a-z]+\s*: ")
_KMSG = re.compile(r"^(?P<pri>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<msg>.*)$")
_UPTIME = re.compile(r"^\[\s*(?P<sec>\d+\.\d+)\]\s?(?P<msg>.*)$")
# dmesg -T: ctime(3) in brackets, the day of the month padded with a space.
_CTIME = re.compile(
    r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>\d{1,2}) "
    r"(?P<hms>\d{2}:\d{2}:\d{2}) (?P<year>\d{4})\]\s?(?P<msg>.*)$"
)
_ISO = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"
    r"\s+(?P<msg>.*)$"
)
_SYSLOG = re.compile(
    r"^(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>\d{1,2}) (?P<hms>\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d+))?"
    r"\s+(?P<msg>.*)$"
)
# journald and syslog put "host kernel: " (or "host kernel[0]: ") between stamp and message.
_SOURCE = re.compile(r"^\S+ kernel(?:\[\d+\])?: ")
_MONTHS = {m: i + 1 for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"))}


@dataclass(frozen=True, slots=True)
class TimeContext:
    """What the prefixes leave out. `boot_time` (epoch seconds) places uptime and kmsg stamps;
    syslog stamps take `year` when given, else the latest year that does not put the line more
    than a day after `now` (a December line read in January belongs to last year); `tz` is the
    zone syslog, `dmesg -T` and zone-less ISO stamps were written in."""

    boot_time: float | None = None
    year: int | None = None
    now: float | None = None
    tz: tzinfo = UTC


@dataclass(frozen=True, slots=True)
class Stamped:
    ts: float
    message: str


def split_stamp(line: str, ctx: TimeContext) -> Stamped | str | None:
    """The time and message of a line; a reason string when the stamp is there but unusable;
    None when the line has no stamp we know (the caller decides if that matters)."""
    text = line.rstrip("\r\n")
    m = _KMSG.match(text)
    if m is not None:
        if ctx.boot_time is None:
            return "kmsg record needs the boot time"
        return _checked(ctx.boot_time + float(m["usec"]) / 1e6, m["msg"])
    text = _DECODE.sub("", text, count=1)
    m = _UPTIME.match(text)
    if m is not None:
        if ctx.boot_time is None:
            return "uptime stamp needs the boot time"
        return _checked(ctx.boot_time + float(m["sec"]), m["msg"])
    m = _CTIME.match(text)
    if m is not None and m["mon"] in _MONTHS:
        hh, mm, ss = (int(x) for x in m["hms"].split(":"))
        try:
            when = datetime(int(m["year"]), _MONTHS[m["mon"]], int(m["day"]), hh, mm, ss,
                            tzinfo=ctx.tz)
        except ValueError:
            return f"bad dmesg -T time {text[1:25]!r}"
        return Stamped(when.timestamp(), m["msg"])
    m = _ISO.match(text)
    if m is not None:
        try:
            when = datetime.fromisoformat(m["ts"].replace(",", "."))
        except ValueError:
            return f"bad ISO time {m['ts']!r}"
        if when.tzinfo is None:
            when = when.replace(tzinfo=ctx.tz)
        return Stamped(when.timestamp(), _SOURCE.sub("", m["msg"], count=1))
    m = _SYSLOG.match(text)
    if m is not None and m["mon"] in _MONTHS:
        return _syslog(m, ctx)
    return None


# Seconds since boot past this are a corrupt line, not a machine up for 300 years; a float
# would turn a 400-digit count into infinity.
_MAX_UPTIME_S = 1e10


def _checked(ts: float, message: str) -> Stamped | str:
    if not math.isfinite(ts) or abs(ts) > _MAX_UPTIME_S * 2:
        return "time stamp out of range (seconds since boot too large)"
    return Stamped(ts, message)


def _syslog(m: re.Match[str], ctx: TimeContext) -> Stamped | str:
    hh, mm, ss = (int(x) for x in m["hms"].split(":"))
    frac = float("0." + m["frac"]) if m["frac"] else 0.0
    mon, day = _MONTHS[m["mon"]], int(m["day"])
    ref = time.time() if ctx.now is None else ctx.now
    if ctx.year is not None:
        years = [ctx.year]
    else:
        this_year = datetime.fromtimestamp(ref, ctx.tz).year
        years = [this_year, this_year - 1]
    for year in years:
        try:
            when = datetime(year, mon, day, hh, mm, ss, tzinfo=ctx.tz)
        except ValueError:  # Feb 29 in a non-leap year: try the year before
            continue
        if ctx.year is None and when.timestamp() > ref + 86400:
            continue
        return Stamped(when.timestamp() + frac, _SOURCE.sub("", m["msg"], count=1))
    return f"no year fits syslog date {m['mon']} {day}"
