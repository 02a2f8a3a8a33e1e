"""InfluxDB line protocol: the formatter, the inverse of collectors.lineprotocol.parse.

    measurement[,tag=value...] field=value[,field=value...] [timestamp]

Names and string values are escaped as InfluxDB expects; what line protocol cannot carry (a
newline, an empty name, NaN or infinity, a measurement starting with '#') raises ValueError
instead of writing a line that would parse differently or not at all.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache

from collectors.lineprotocol import FieldValue, Point, UInt

_ESC_MEAS = re.compile(r"([\\ ,])")
_ESC_KEY = re.compile(r"([\\ ,=])")
_ESC_STR = re.compile(r'([\\"])')


@lru_cache(maxsize=65536)
def escape_measurement(s: str) -> str:
    _no_newline(s)
    if s[0] == "#":
        raise ValueError(f"measurement {s!r} would read as a comment")
    return _ESC_MEAS.sub(r"\\\1", s)


@lru_cache(maxsize=65536)
def escape_key(s: str) -> str:
    """Escape a tag key, tag value or field key."""
    _no_newline(s)
    return _ESC_KEY.sub(r"\\\1", s)


def _no_newline(s: str) -> None:
    if "\n" in s or "\r" in s:
        raise ValueError(f"line protocol cannot carry a newline: {s!r}")
    if not s:
        raise ValueError("line protocol names cannot be empty")


def format_value(v: FieldValue) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, UInt):
        return f"{int(v)}u"
    if isinstance(v, int):
        return f"{v}i"
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"line protocol cannot carry {v}")
        return repr(v)
    if "\n" in v:
        raise ValueError(f"line protocol cannot carry a newline: {v!r}")
    return '"' + _ESC_STR.sub(r"\\\1", v) + '"'


def format_line(
    measurement: str,
    tags: Mapping[str, str],
    fields: Mapping[str, FieldValue],
    ts_ns: int | None = None,
) -> str:
    """One line; tags sorted by key (InfluxDB's preferred order), empty tag values dropped."""
    if not fields:
        raise ValueError(f"a {measurement!r} point needs at least one field")
    head = escape_measurement(measurement)
    if tags:
        head += "".join(f",{escape_key(k)}={escape_key(v)}" for k, v in sorted(tags.items()) if v)
    body = ",".join(f"{escape_key(k)}={format_value(v)}" for k, v in fields.items())
    return f"{head} {body}" if ts_ns is None else f"{head} {body} {ts_ns}"


def format_point(p: Point) -> str:
    return format_line(p.measurement, p.tags, p.fields, p.ts_ns)


def format_points(points: Iterable[Point]) -> Iterator[str]:
    return (format_point(p) for p in points)
