"""InfluxQL quoting. Every identifier and value that reaches a query goes through here: tag
values come from the network (an agent names its own host), so a quote in one must not end
the literal it sits in."""

from __future__ import annotations

import math
import re


def ident(name: str) -> str:
    """A double-quoted identifier (measurement, field, tag key, database, policy)."""
    _no_control(name)
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def string(value: str) -> str:
    """A single-quoted string literal (a tag value in WHERE)."""
    _no_control(value)
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def regex_exact(value: str) -> str:
    """`/^value$/` matching the value literally, slashes included."""
    _no_control(value)
    return "/^" + re.escape(value).replace("/", "\\/") + "$/"


def time_ns(ts: float) -> str:
    """An absolute time bound: integer nanoseconds since the epoch."""
    if not math.isfinite(ts):
        raise ValueError(f"not a finite time: {ts!r}")
    return f"{round(ts * 1e9)}"


def duration(seconds: float) -> str:
    """A GROUP BY time() / retention duration in whole seconds (InfluxQL `60s`)."""
    if not math.isfinite(seconds) or seconds < 1 or seconds != int(seconds):
        raise ValueError(f"a duration must be a whole number of seconds >= 1, got {seconds!r}")
    return f"{int(seconds)}s"


_UNITS = {"ns": 1e-9, "u": 1e-6, "µ": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
          "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+)(ns|u|µ|ms|s|m|h|d|w)")


def parse_duration(text: str) -> float | None:
    """An InfluxQL duration literal (`14d`, `1h30m`) in seconds; `INF` (keep forever) is None.
    Raises ValueError for anything else, so a typo in a retention setting fails at start."""
    t = text.strip()
    if t.upper() == "INF":
        return None
    parts = _DURATION.findall(t)
    if not t or "".join(n + u for n, u in parts) != t:
        raise ValueError(f"{text!r} is not an InfluxQL duration (like 14d, 1h30m or INF)")
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    return None if seconds == 0 else seconds  # InfluxDB reads a zero duration as infinite


def _no_control(s: str) -> None:
    # A newline inside a literal is legal InfluxQL but never a real name here; refusing it
    # keeps multi-statement tricks out of every query we build.
    if any(c in s for c in "\n\r\x00"):
        raise ValueError(f"control character in an InfluxQL name or value: {s!r}")
