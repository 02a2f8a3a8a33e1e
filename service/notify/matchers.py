"""Label matchers in Alertmanager's syntax (`name=value`, `name!=value`, `name=~regex`,
`name!~regex`; regexes anchored), plus numeric comparisons for our `level` label
(`level>=2`, `level<3`), since routing by level is what operators do most.

Every matcher comes from an operator (a silence through the API, a route or an inhibit rule in
the settings) and runs on every alert in the scoring tick, so its cost is bounded whatever is
typed: regexes are RE2 (linear in the label's length, as Alertmanager's Go regexps are, with
RE2's syntax: no backreferences, no lookaround), a compiled regex has at most
`MAX_PROGRAM` instructions, a value at most `MAX_VALUE` characters, and a list of matchers
at most `MAX_MATCHERS` entries. Numbers in comparisons are ASCII decimals and finite."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import re2

_OPS = ("=~", "!~", "!=", ">=", "<=", "=", ">", "<")
# The name and operator; the value is the rest. No lazy or backtracking group over the value:
# the split itself is linear whatever follows.
_HEAD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)[ \t]*(=~|!~|!=|>=|<=|=|>|<)[ \t]*")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)

MAX_MATCHERS = 64  # per silence, route or inhibit side: more than any operator writes
MAX_VALUE = 1024  # characters of one matcher's value (a regex included)
MAX_PROGRAM = 5000  # RE2 instructions of one compiled regex (`\p{L}+` is about 1,200)
_MAX_MEM = 1 << 20  # RE2's own budget per regex (program and DFA cache; NFA beyond it)


def _re2_options() -> re2.Options:
    o = re2.Options()
    o.log_errors = False  # a refusal is the caller's error, not a line on stderr
    o.max_mem = _MAX_MEM
    return o


_OPTIONS = _re2_options()


class Regex(Protocol):
    """What a compiled RE2 regex offers here (the package has no type hints)."""

    programsize: int

    def fullmatch(self, text: bytes) -> object | None: ...


def number(text: str) -> float | None:
    """`text` as a finite number written in ASCII decimals, else None (`float` would also take
    `nan`, `inf`, `1_0` and other scripts' digits)."""
    s = text.strip()
    if len(s) > 64 or not _NUMBER.fullmatch(s):
        return None
    x = float(s)
    return x if math.isfinite(x) else None


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def compile_regex(value: str) -> Regex:
    """An anchored RE2 regex (as Alertmanager anchors them); ValueError says why not."""
    if not _utf8(value):
        raise ValueError("not valid Unicode (a lone surrogate)")
    try:
        regex: Regex = re2.compile(value, _OPTIONS)  # fullmatch anchors both ends
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) \
            else str(e)
        raise ValueError(f"{why} (matchers use RE2 syntax: no backreferences or "
                         "lookaround)") from None
    if regex.programsize > MAX_PROGRAM:
        raise ValueError(f"compiles to {regex.programsize} instructions, more than "
                         f"{MAX_PROGRAM}: write a simpler regex")
    return regex


@dataclass(frozen=True, slots=True)
class Matcher:
    name: str
    op: str
    value: str
    _regex: Regex | None = field(default=None, compare=False, repr=False)
    _number: float | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def parse(text: str) -> Matcher:
        if not isinstance(text, str):
            raise ValueError(f"bad matcher {text!r}: not a string")
        shown = text if len(text) <= 80 else f"{text[:80]}..."
        if len(text) > MAX_VALUE + 200:
            raise ValueError(f"matcher {shown!r} is longer than {MAX_VALUE + 200} characters")
        if not _utf8(text):
            raise ValueError(f"matcher {shown!r} is not valid Unicode (a lone surrogate)")
        t = text.strip()
        m = _HEAD.match(t)
        if m is None or "\n" in t or "\r" in t:
            raise ValueError(f"bad matcher {shown!r}: expected name, one of {_OPS}, value")
        name, op = m.group(1), m.group(2)
        value = t[m.end():]
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if len(value) > MAX_VALUE:
            raise ValueError(f"matcher {shown!r}: its value is longer than {MAX_VALUE} "
                             "characters")
        regex, num = None, None
        if op in ("=~", "!~"):
            try:
                regex = compile_regex(value)
            except ValueError as e:
                raise ValueError(f"bad regex in matcher {shown!r}: {e}") from None
        if op in (">", ">=", "<", "<="):
            num = number(value)
            if num is None:
                raise ValueError(f"matcher {shown!r} compares with a non-number (a finite "
                                 "number in ASCII digits)")
        return Matcher(name, op, value, regex, num)

    def matches(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.name, "")
        if self._regex is not None:
            # As UTF-8 bytes: a label with a lone surrogate neither raises nor matches `.`.
            text = got.encode("utf-8", "surrogatepass")
            return (self._regex.fullmatch(text) is not None) == (self.op == "=~")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        x, y = number(got), self._number
        if x is None or y is None:
            return False  # a missing or non-numeric label never satisfies a comparison
        return {">": x > y, ">=": x >= y, "<": x < y, "<=": x <= y}[self.op]

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"


def parse_all(texts: Iterable[str]) -> tuple[Matcher, ...]:
    """Raises ValueError naming the first bad matcher, or when there are more than
    MAX_MATCHERS."""
    items = list(texts) if not isinstance(texts, list) else texts
    if len(items) > MAX_MATCHERS:
        raise ValueError(f"{len(items)} matchers: at most {MAX_MATCHERS} may be given")
    return tuple(Matcher.parse(t) for t in items)


def match_all(matchers: Iterable[Matcher], labels: Mapping[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)
