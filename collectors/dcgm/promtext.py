"""Prometheus text exposition read line by line: each whole sample is kept, each bad line refused.

prometheus_client's parser stops at the first bad line, so a page cut in its last sample lost
every sample before it. Here a bad line becomes a Rejection naming its 1-based line and the rest
of the page is still read. The format is small:

    # HELP <name> <doc>
    # TYPE <name> counter|gauge|histogram|summary|untyped|...
    <name>[{<label>="<value>",...}] <value> [<timestamp>]

with `\\\\`, `\\"` and `\\n` as the escapes of a label value. The name a sample is read under
follows prometheus_client (the parser this replaced) exactly, so a whole page reads the same: a
sample belongs to the family its last `# HELP`/`# TYPE` opened while its name is one that family
may use (a histogram's `_bucket`, `_count` and `_sum` are the family's, not fields of their own, so
they are dropped), else it stands alone under its own name and closes the family; a counter family
named `<x>_total` gives its samples the name `<x>`.

The last line of a page ends with a line feed. A page whose last line has none was cut (a scrape
or a copy cut short), and the line may be a cut value that still reads as a number (`8` of `81`):
it is refused.

Work per line is bounded: a line longer than MAX_LINE is refused unread, names are at most
MAX_NAME characters, a sample has at most MAX_LABELS labels, and the patterns never backtrack
(possessive quantifiers), so a hostile page costs time linear in its size.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from collectors.compat import dataclass
from collectors.frames import Rejection

MAX_LINE = 16_384
MAX_NAME = 200
MAX_LABELS = 64
_SHOW = 80  # characters of a refused line quoted in its Rejection

_METRIC = re.compile(rf"[a-zA-Z_:][a-zA-Z0-9_:]{{0,{MAX_NAME - 1}}}+(?![a-zA-Z0-9_:])")
_LABEL = re.compile(
    rf'[ \t]*+([a-zA-Z_][a-zA-Z0-9_]{{0,{MAX_NAME - 1}}}+)[ \t]*+=[ \t]*+'
    r'"([^"\\]*+(?:\\.[^"\\]*+)*+)"[ \t]*+')
_NUMBER = re.compile(
    r"[+-]?+(?:[0-9]++\.?+[0-9]*+(?:[eE][+-]?+[0-9]++)?+|\.[0-9]++(?:[eE][+-]?+[0-9]++)?+"
    r"|(?i:inf(?:inity)?+|nan))", re.ASCII)
_INTEGER = re.compile(r"[+-]?+[0-9]++", re.ASCII)
_ESCAPE = re.compile(r'\\[\\n"]')
_UNESCAPE = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
# The samples a family of each type may hold besides its own name (prometheus_client's table).
_SUFFIXES = {"summary": ("_count", "_sum", ""), "histogram": ("_count", "_sum", "_bucket")}
_TYPES = frozenset({"counter", "gauge", "summary", "histogram", "gaugehistogram", "untyped",
                    "unknown", "info", "stateset"})


@dataclass(frozen=True, slots=True)
class Sample:
    name: str  # the name the sample is read under (see the module doc)
    labels: dict[str, str]
    value: float
    line: int  # 1-based


class _Bad(ValueError):
    pass


@dataclass(slots=True)
class _Family:
    name: str = ""
    kind: str = "untyped"
    allowed: tuple[str, ...] = ()

    def open(self, name: str, kind: str) -> None:
        self.name, self.kind = name, kind
        self.allowed = tuple(name + s for s in _SUFFIXES.get(kind, ("",)))

    def close(self) -> None:
        self.open("", "untyped")
        self.allowed = ()

    def read_as(self, sample: str) -> str | None:
        """The name a sample of this family is read under; None for a histogram's or summary's
        parts. Called only for names the family allows."""
        if self.kind == "counter":
            return self.name[:-6] if self.name.endswith("_total") else self.name
        return sample if sample == self.name else None


def read_samples(text: str, rejected: list[Rejection]) -> Iterator[Sample]:
    """Every whole sample of the page in order; each bad line appended to `rejected`."""
    family = _Family()
    lines = text.split("\n")
    cut = len(lines) if lines[-1].strip() else 0  # the last line, when no line feed ends it
    for n, raw in enumerate(lines, 1):
        if len(raw) > MAX_LINE:
            rejected.append(Rejection(f"line longer than {MAX_LINE} characters", n))
            continue
        line = raw.strip()
        if not line:
            continue
        try:
            if n == cut:
                raise _Bad("the page ends inside this line (no line feed after it): it was cut")
            if line.startswith("#"):
                _comment(line, family)
                continue
            name, labels, value = _sample(line)
        except _Bad as exc:
            rejected.append(Rejection(f"{exc}: {line[:_SHOW]!r}", n))
            continue
        if name in family.allowed:
            read_as = family.read_as(name)
            if read_as is not None:
                yield Sample(read_as, labels, value, n)
        else:  # a sample of no open family stands alone, and ends the family
            family.close()
            yield Sample(name, labels, value, n)


def _comment(line: str, family: _Family) -> None:
    parts = line.split(None, 3)
    if len(parts) < 2 or parts[1] not in ("HELP", "TYPE"):
        return  # a free comment
    if len(parts) < 3 or not _METRIC.fullmatch(parts[2]):
        family.close()
        raise _Bad(f"# {parts[1]} without a valid metric name")
    name = parts[2]
    if parts[1] == "HELP":
        if name != family.name:
            family.open(name, "untyped")
        return
    kind = parts[3] if len(parts) == 4 else ""
    if kind not in _TYPES:
        family.close()
        raise _Bad(f"# TYPE {name} with no known type")
    family.open(name, kind)


def _sample(line: str) -> tuple[str, dict[str, str], float]:
    m = _METRIC.match(line)
    if m is None:
        raise _Bad("not a sample: no metric name")
    pos = m.end()
    labels: dict[str, str] = {}
    if line.startswith("{", pos):
        pos = _labels(line, pos + 1, labels)
    elif not line.startswith((" ", "\t"), pos):
        raise _Bad("not a sample: the metric name runs into other text")
    tokens = line[pos:].split()
    if not tokens:
        raise _Bad("sample without a value")
    if len(tokens) > 2:
        raise _Bad("sample with more than a value and a timestamp")
    if not all(_NUMBER.fullmatch(t) for t in tokens):
        raise _Bad("sample value or timestamp is not a number")
    return m.group(), labels, _value(tokens[0])


def _labels(line: str, pos: int, labels: dict[str, str]) -> int:
    """Reads `name="value",...}` from pos into labels; returns the position after the brace."""
    while True:
        while line.startswith((" ", "\t"), pos):
            pos += 1
        if line.startswith("}", pos):
            return pos + 1
        m = _LABEL.match(line, pos)
        if m is None:
            raise _Bad(f"label {len(labels) + 1} is not name=\"value\" (cut or malformed)")
        name = m.group(1)
        if name.startswith("__"):
            raise _Bad(f"reserved label name {name!r}")
        if name in labels:
            raise _Bad(f"label {name!r} given twice")
        if len(labels) == MAX_LABELS:
            raise _Bad(f"more than {MAX_LABELS} labels")
        value = m.group(2)
        labels[name] = _ESCAPE.sub(lambda e: _UNESCAPE[e.group()], value) if "\\" in value \
            else value
        pos = m.end()
        if line.startswith(",", pos):
            pos += 1
        elif not line.startswith("}", pos):
            raise _Bad("labels not closed by '}'")


def _value(token: str) -> float:
    """The value as prometheus_client read it: an integer through int (so `-0` is 0), which may
    be too large for a float (infinite, and skipped later as such)."""
    if _INTEGER.fullmatch(token):
        try:
            return float(int(token))
        except OverflowError:
            return float("inf") if not token.startswith("-") else float("-inf")
        except ValueError:  # more digits than int() reads: far past the float range
            return float(token)
    return float(token)
