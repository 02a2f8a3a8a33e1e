"""Label matchers in Alertmanager's syntax (`name=value`, `name!=value`, `name=~regex`,
`name!~regex`; regexes anchored), plus numeric comparisons for our `level` label
(`level>=2`, `level<3`), since routing by level is what operators do most."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_OPS = ("=~", "!~", "!=", ">=", "<=", "=", ">", "<")
_SPLIT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|>=|<=|=|>|<)\s*(.*?)\s*$")


@dataclass(frozen=True, slots=True)
class Matcher:
    name: str
    op: str
    value: str
    _regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def parse(text: str) -> Matcher:
        m = _SPLIT.match(text)
        if m is None:
            raise ValueError(f"bad matcher {text!r}: expected name, one of {_OPS}, value")
        name, op, value = m.groups()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        regex = None
        if op in ("=~", "!~"):
            try:
                regex = re.compile(f"^(?:{value})$")
            except re.error as e:
                raise ValueError(f"bad regex in matcher {text!r}: {e}") from None
        if op in (">", ">=", "<", "<="):
            try:
                float(value)
            except ValueError:
                raise ValueError(f"matcher {text!r} compares with a non-number") from None
        return Matcher(name, op, value, regex)

    def matches(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.name, "")
        if self._regex is not None:
            return bool(self._regex.match(got)) == (self.op == "=~")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        try:
            x, y = float(got), float(self.value)
        except ValueError:
            return False  # a missing or non-numeric label never satisfies a comparison
        return {">": x > y, ">=": x >= y, "<": x < y, "<=": x <= y}[self.op]

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"


def parse_all(texts: Iterable[str]) -> tuple[Matcher, ...]:
    return tuple(Matcher.parse(t) for t in texts)


def match_all(matchers: Iterable[Matcher], labels: Mapping[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)
