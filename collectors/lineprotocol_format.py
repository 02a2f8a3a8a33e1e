"""InfluxDB line protocol: the formatter, the inverse of collectors.lineprotocol.parse.

    measurement[,tag=value...] field=value[,field=value...] [timestamp]

Names and string values are escaped as InfluxDB expects; what line protocol cannot carry (a
newline, an empty name, NaN or infinity, a measurement starting with '#') raises ValueError
instead of writing a line that would parse differently or not at all.

Fields of our own measurements are written with the catalog's one type (FieldType), whatever
type a parser gave them: nvidia-smi's text gives floats, dcgm-exporter's integers, and InfluxDB
refuses a point whose field type differs from the one it holds. Every writer formats through
here (`format_line`, or `format_number` for the columnar writers).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache

from collectors.catalog import CATALOG, FieldType
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


_I63 = 2.0**63  # a whole number at or past this has no `i` form


def format_number(t: FieldType, v: float) -> str | None:
    """A number as a field of type `t`; None where it has no such form (NaN, infinity, a
    fraction or out of range for an integer): the writer leaves the field out rather than
    write a type InfluxDB would refuse."""
    if v != v or v in (math.inf, -math.inf):
        return None
    if t is FieldType.FLOAT:
        return repr(float(v))
    if float(v).is_integer() and -_I63 <= v < _I63:
        return f"{int(v)}i"
    return None


def typed(t: FieldType, name: str, v: FieldValue) -> FieldValue:
    """`v` as the catalog types field `name`; ValueError when it cannot be."""
    if isinstance(v, str):
        raise ValueError(f"field {name}: the catalog stores numbers, not {v!r}")
    if t is FieldType.FLOAT:
        return float(v)
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        if v >= 2**63:
            raise ValueError(f"field {name}: {v} is out of the 64-bit integer range")
        return int(v)
    if format_number(t, v) is None:
        raise ValueError(f"field {name}: the catalog stores whole numbers, not {v!r}")
    return int(v)


def format_line(
    measurement: str,
    tags: Mapping[str, str],
    fields: Mapping[str, FieldValue],
    ts_ns: int | None = None,
) -> str:
    """One line; tags sorted by key (InfluxDB's preferred order), empty tag values dropped;
    the fields of our own measurements in the catalog's types."""
    if not fields:
        raise ValueError(f"a {measurement!r} point needs at least one field")
    types = CATALOG.line_types(measurement)
    if types:
        fields = {k: typed(types[k], k, v) if k in types else v for k, v in fields.items()}
    head = escape_measurement(measurement)
    if tags:
        head += "".join(f",{escape_key(k)}={escape_key(v)}" for k, v in sorted(tags.items()) if v)
    body = ",".join(f"{escape_key(k)}={format_value(v)}" for k, v in fields.items())
    return f"{head} {body}" if ts_ns is None else f"{head} {body} {ts_ns}"


def format_point(p: Point) -> str:
    return format_line(p.measurement, p.tags, p.fields, p.ts_ns)


def format_points(points: Iterable[Point]) -> Iterator[str]:
    return (format_point(p) for p in points)
