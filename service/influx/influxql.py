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


def _no_control(s: str) -> None:
    # A newline inside a literal is legal InfluxQL but never a real name here; refusing it
    # keeps multi-statement tricks out of every query we build.
    if any(c in s for c in "\n\r\x00"):
        raise ValueError(f"control character in an InfluxQL name or value: {s!r}")
