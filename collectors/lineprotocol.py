"""InfluxDB line protocol: a strict parser (collectors.lineprotocol_format has the formatter).

    measurement[,tag=value...] field=value[,field=value...] [timestamp]

The parser never raises on bad input: each refused line becomes a Rejection naming its 1-based
line number and the reason, and the good lines around it are kept. Lines without a backslash or
a double quote (nearly all of them) take a str.split fast path; the rest go through a scanner
that understands escapes and quoted strings.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import field
from typing import NamedTuple, NoReturn, Union

from collectors.compat import dataclass
from collectors.frames import Rejection


class UInt(int):
    """An unsigned integer field (`42u`), kept distinct from `42i` so formatting round-trips."""

    __slots__ = ()


FieldValue = Union[float, int, bool, str]

# InfluxDB 1.x's default max-body-size for /write; a trace reader parses in smaller chunks.
DEFAULT_MAX_BYTES = 25_000_000
DEFAULT_MAX_LINES = 1_000_000

PRECISION_NS: dict[str, int] = {
    "ns": 1, "n": 1,
    "us": 1_000, "u": 1_000, "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}

_I64_MIN, _I64_MAX, _U64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
_I64_MAX_TEXT = str(_I64_MAX)
# The longest number token (value or timestamp) parsed. A float Python writes is at most 24
# characters, a 64-bit integer 20 and a suffix; anything longer is refused before any regex or
# int() sees it: Python refuses int() of over 4,300 digits with a ValueError, and a long run
# of digits is where a pattern could backtrack.
MAX_NUMBER_CHARS = 64
_SHOWN_CHARS = 40  # how much of a refused token a reason quotes
# One way to match each text (digits, then an optional '.' and digits): no backtracking.
_FLOAT = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_INT = re.compile(r"-?[0-9]+")
_TRUE = frozenset(("t", "T", "true", "True", "TRUE"))
_FALSE = frozenset(("f", "F", "false", "False", "FALSE"))
_NON_FINITE = frozenset(("nan", "inf", "infinity"))
_FLOAT_END = frozenset("0123456789.")
_FLOAT_START = frozenset("-.0123456789")
_DIGITS = frozenset("0123456789")

# Parsed key sections (measurement and tags) by their text; cleared when full. Two flat dicts,
# not (measurement, tags) tuples: a tuple holding a dict stays tracked by the garbage collector,
# and 200,000 of them made every full collection scan them (a stall of the whole process).
_HEAD_MEAS: dict[str, str] = {}
_HEAD_TAGS: dict[str, dict[str, str]] = {}
_HEADS_MAX = 200_000

# Slow-path tokens. A backslash escapes the next character; a lone trailing one is literal.
_MEAS_TOK = re.compile(r"(?:[^\\ ,]|\\.|\\$)+")
_KEY_TOK = re.compile(r"(?:[^\\ ,=]|\\.|\\$)+")
_STR_TOK = re.compile(r'"((?:[^"\\]|\\.)*)"')
_VAL_TOK = re.compile(r"[^ ,]*")
_UNESC_MEAS = re.compile(r"\\([\\ ,])")
_UNESC_KEY = re.compile(r"\\([\\ ,=])")
_UNESC_STR = re.compile(r'\\([\\"])')


@dataclass(slots=True)
class Point:
    """One parsed line. `ts_ns` is None when the line had no timestamp and no default was given."""

    measurement: str
    tags: dict[str, str]
    fields: dict[str, FieldValue]
    ts_ns: int | None = None
    line: int = field(default=0, compare=False)
    source: str = field(default="", compare=False)  # the file it came from, for messages


class Parsed(NamedTuple):
    points: list[Point]
    rejected: list[Rejection]


class _Bad(Exception):
    def __init__(self, reason: str, metric: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.metric = metric


# ---- parsing ---------------------------------------------------------------------------------

def parse(
    data: str | bytes | Iterable[str] | Iterable[bytes],
    *,
    first_line: int = 1,
    default_ts_ns: int | None = None,
    precision: str = "ns",
    max_lines: int | None = DEFAULT_MAX_LINES,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    source: str = "",
) -> Parsed:
    """Parse line protocol. Lines past `max_lines` or `max_bytes` are refused, not parsed.
    `source` (a file name) prefixes rejection reasons and is kept on each point."""
    mult = precision_ns(precision)
    points: list[Point] = []
    rejected: list[Rejection] = []
    last_line = sys.maxsize if max_lines is None else first_line - 1 + max_lines
    byte_limit = sys.maxsize if max_bytes is None else max_bytes
    size = 0
    where = f"{source}: " if source else ""
    lines = _lines(data)
    for lineno, raw in enumerate(lines, first_line):
        if max_bytes is not None:
            size += 1 + (len(raw) if isinstance(raw, bytes) or raw.isascii()
                         else len(raw.encode()))
        if lineno > last_line or size > byte_limit:
            rejected.append(_oversized(where, lineno, lineno + sum(1 for _ in lines),
                                       f"{max_lines} lines" if lineno > last_line
                                       else f"{max_bytes} bytes"))
            break
        if isinstance(raw, bytes):
            try:
                line = raw.decode()
            except UnicodeDecodeError as exc:
                rejected.append(Rejection(f"{where}not valid UTF-8 ({exc.reason})", lineno))
                continue
        else:
            line = raw
        _one(line, lineno, mult, default_ts_ns, source, where, points, rejected)
    return Parsed(points, rejected)


def parse_numbered(
    lines: Iterable[tuple[int, str]],
    *,
    default_ts_ns: int | None = None,
    precision: str = "ns",
    source: str = "",
) -> Parsed:
    """Parse lines that carry their own 1-based numbers (a subset of a body, in order); no
    limits apply, the caller has applied them."""
    mult = precision_ns(precision)
    points: list[Point] = []
    rejected: list[Rejection] = []
    where = f"{source}: " if source else ""
    for lineno, line in lines:
        _one(line, lineno, mult, default_ts_ns, source, where, points, rejected)
    return Parsed(points, rejected)


def precision_ns(precision: str) -> int:
    try:
        return PRECISION_NS[precision]
    except KeyError:
        raise ValueError(
            f"unknown precision {precision!r}; expected one of {sorted(PRECISION_NS)}"
        ) from None


def timestamp_ns(ts: str, mult: int) -> int | None:
    """A timestamp token in nanoseconds, or None where parse would refuse it."""
    try:
        return _ts(ts, mult)
    except _Bad:
        return None


def _one(line: str, lineno: int, mult: int, default_ts_ns: int | None, source: str, where: str,
         points: list[Point], rejected: list[Rejection]) -> None:
    s = line.strip(" \t\r\n")
    if not s or s[0] == "#":
        return
    try:
        if "\\" in s or '"' in s:
            meas, tags, fields, ts = _scan(s)
        else:
            meas, tags, fields, ts = _split(s)
        ts_ns = default_ts_ns if ts is None else _ts(ts, mult)
    except _Bad as bad:
        rejected.append(Rejection(where + bad.reason, lineno, metric=bad.metric))
        return
    points.append(Point(meas, tags, fields, ts_ns, lineno, source))


def _ts(ts: str, mult: int) -> int:
    # The common case first: a positive nanosecond stamp of this century (19 digits).
    if mult == 1 and ts.isdigit() and ts.isascii() and (
            len(ts) < 19 or (len(ts) == 19 and ts <= _I64_MAX_TEXT)):
        return int(ts)
    return _timestamp(ts, mult)


def oversized(first: int, last: int, limit: str) -> Rejection:
    """The one rejection for lines `first`..`last` past a batch limit (`limit` names it)."""
    return _oversized("", first, last, limit)


def _oversized(where: str, first: int, last: int, limit: str) -> Rejection:
    span = f"line {first}" if last == first else f"lines {first}-{last}"
    return Rejection(f"{where}batch exceeds the limit of {limit}; {span} not parsed", first)


def _lines(data: str | bytes | Iterable[str] | Iterable[bytes]) -> Iterator[str | bytes]:
    if isinstance(data, (bytes, bytearray)):
        raw = bytes(data)
        try:
            data = raw.decode()
        except UnicodeDecodeError:  # keep the good lines: decode line by line
            split = raw.split(b"\n")
            return iter(split[:-1] if split[-1] == b"" else split)
    if isinstance(data, str):
        text = data.split("\n")
        return iter(text[:-1] if text[-1] == "" else text)  # a final newline ends, not adds
    return iter(data)


def _split(s: str) -> tuple[str, dict[str, str], dict[str, FieldValue], str | None]:
    """Fast path for lines without escapes or quoted strings."""
    parts = s.split(" ")
    if "" in parts:  # runs of spaces between sections
        parts = [p for p in parts if p]
    if len(parts) < 2:
        raise _Bad("missing field set")
    if len(parts) > 3:
        raise _Bad(f"unexpected text after the timestamp: {_shown(' '.join(parts[3:]))} "
                   "(unescaped space?)")
    key = parts[0]
    meas = _HEAD_MEAS.get(key)
    if meas is None:
        meas, tags = _head(key)
    tags = _HEAD_TAGS[key].copy()
    fields: dict[str, FieldValue] = {}
    for item in parts[1].split(","):
        k, _, v = item.partition("=")
        if not k or not v or k in fields:
            _field_error(item, k, v)
        # Inline fast cases (non-negative integers, plain decimals); _value has the full rules.
        last = v[-1]
        if last == "i":
            body = v[:-1]
            if body.isdigit() and body.isascii() and len(body) < 19:
                fields[k] = int(body)
                continue
        elif (last in _DIGITS and v[0] in _FLOAT_START and len(v) <= MAX_NUMBER_CHARS
              and v.isascii() and "_" not in v):
            try:
                x = float(v)
            except ValueError:
                pass
            else:
                if x - x == 0.0:  # finite
                    fields[k] = x
                    continue
        fields[k] = _value(v, k)
    return meas, tags, fields, parts[2] if len(parts) == 3 else None


def _head(key: str) -> tuple[str, dict[str, str]]:
    """Measurement and tags of a key section; cached, since a fleet repeats the same series
    every round and tag parsing is a third of the work."""
    tags: dict[str, str] = {}
    meas, *pairs = key.split(",")
    if not meas:
        raise _Bad("missing measurement")
    for pair in pairs:
        k, eq, v = pair.partition("=")
        if not k or not v or "=" in v or k in tags:
            _tag_error(k, eq, v, pair, tags)
        tags[k] = v
    if len(_HEAD_MEAS) >= _HEADS_MAX:
        _HEAD_MEAS.clear()
        _HEAD_TAGS.clear()
    _HEAD_MEAS[key], _HEAD_TAGS[key] = meas, tags
    return meas, tags


def _field_error(item: str, k: str, v: str) -> NoReturn:
    if "=" not in item:
        raise _Bad(f"field {item!r} has no '=' (missing field set?)")
    if not k:
        raise _Bad(f"field with an empty name: {item!r}")
    if not v:
        raise _Bad("field has no value", k)
    raise _Bad("duplicate field", k)


def _tag_error(k: str, eq: str, v: str, pair: str, tags: Mapping[str, str]) -> NoReturn:
    if not eq or not v:
        raise _Bad(f"tag {k!r} has no value")
    if not k:
        raise _Bad(f"tag with an empty key: {pair!r}")
    if "=" in v:
        raise _Bad(f"tag {k!r} value {v!r} holds an unescaped '='")
    raise _Bad(f"duplicate tag {k!r}")


def _scan(s: str) -> tuple[str, dict[str, str], dict[str, FieldValue], str | None]:
    """Slow path: escapes in names and quoted string fields."""
    n = len(s)
    m = _MEAS_TOK.match(s)
    if m is None:
        raise _Bad("missing measurement")
    meas = _UNESC_MEAS.sub(r"\1", m.group())
    pos = m.end()
    tags: dict[str, str] = {}
    while pos < n and s[pos] == ",":
        k, pos = _key(s, pos + 1)
        if pos >= n or s[pos] != "=":
            raise _Bad(f"tag {k!r} has no value")
        m = _KEY_TOK.match(s, pos + 1)
        if m is None:
            raise _Bad(f"tag {k!r} has no value")
        pos = m.end()
        if pos < n and s[pos] == "=":
            raise _Bad(f"tag {k!r} value holds an unescaped '='")
        if k in tags:
            raise _Bad(f"duplicate tag {k!r}")
        tags[k] = _UNESC_KEY.sub(r"\1", m.group())
    if pos >= n:
        raise _Bad("missing field set")
    while pos < n and s[pos] == " ":
        pos += 1
    fields: dict[str, FieldValue] = {}
    while True:
        k, pos = _key(s, pos)
        if pos >= n or s[pos] != "=":
            raise _Bad(f"field {k!r} has no '=' (missing field set?)")
        pos += 1
        if k in fields:
            raise _Bad("duplicate field", k)
        if pos < n and s[pos] == '"':
            m = _STR_TOK.match(s, pos)
            if m is None:
                raise _Bad("unterminated string", k)
            fields[k] = _UNESC_STR.sub(r"\1", m.group(1))
        else:
            m = _VAL_TOK.match(s, pos)
            assert m is not None  # matches the empty string at worst
            fields[k] = _value(m.group(), k)
        pos = m.end()
        if pos < n and s[pos] == ",":
            pos += 1
            continue
        break
    if pos < n and s[pos] != " ":
        raise _Bad(f"unexpected text after the field value: {_shown(s[pos:])}", k)
    rest = s[pos:].strip(" ")
    if not rest:
        return meas, tags, fields, None
    if " " in rest:
        raise _Bad(f"unexpected text after the timestamp: {_shown(rest.split(' ', 1)[1])} "
                   "(unescaped space?)")
    return meas, tags, fields, rest


def _key(s: str, pos: int) -> tuple[str, int]:
    m = _KEY_TOK.match(s, pos)
    if m is None:
        raise _Bad(f"empty tag or field key at column {pos + 1}")
    return _UNESC_KEY.sub(r"\1", m.group()), m.end()


def _value(v: str, name: str) -> FieldValue:
    if not v:
        raise _Bad("field has no value", name)
    if len(v) > MAX_NUMBER_CHARS:
        raise _Bad(_too_long("field value", v), name)
    last = v[-1]
    if last in _FLOAT_END:
        if _FLOAT.fullmatch(v) is None:
            raise _Bad(f"field value {v!r} is not a number", name)
        x = float(v)
        if not math.isfinite(x):
            raise _Bad(f"field value {v!r} is not finite", name)
        return x
    if last == "i" or last == "u":
        body = v[:-1]
        if _INT.fullmatch(body) is None:
            raise _Bad(f"field value {v!r} is not an integer", name)
        i = int(body)
        if last == "u":
            if not 0 <= i <= _U64_MAX:
                raise _Bad(f"field value {v!r} is out of the unsigned 64-bit range", name)
            return UInt(i)
        if not _I64_MIN <= i <= _I64_MAX:
            raise _Bad(f"field value {v!r} is out of the 64-bit integer range", name)
        return i
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    if v.lstrip("+-").lower() in _NON_FINITE:
        raise _Bad(f"field value {v!r} is not a number (line protocol has no NaN or infinity)",
                   name)
    raise _Bad(f"field value {v!r} is not a number", name)


def _timestamp(ts: str, mult: int) -> int:
    if len(ts) > MAX_NUMBER_CHARS:
        raise _Bad(_too_long("timestamp", ts))
    if _INT.fullmatch(ts) is None:
        raise _Bad(f"timestamp {ts!r} is not an integer")
    t = int(ts) * mult
    if not _I64_MIN <= t <= _I64_MAX:
        raise _Bad(f"timestamp {ts!r} is out of the 64-bit nanosecond range")
    return t


def _too_long(what: str, token: str) -> str:
    return (f"number too long: {what} {token[:_SHOWN_CHARS]!r}... has {len(token)} "
            f"characters (at most {MAX_NUMBER_CHARS})")


def _shown(text: str) -> str:
    """`text` quoted for a reason, cut short: a refused line may be megabytes long."""
    if len(text) <= _SHOWN_CHARS:
        return repr(text)
    return repr(text[:_SHOWN_CHARS]) + f"... ({len(text)} characters)"
