"""Checks what an InfluxQL query names against the storage contract: its measurements, the
fields it selects or filters on, the tags it filters or groups by. Enough InfluxQL for the
dashboards' queries (SELECT with functions, aliases, arithmetic, ::field/::tag casts and
subqueries; SHOW TAG VALUES), with Grafana's macros and variables left in or expanded.
Anything else it does not understand is reported as a problem, never passed silently."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from service.grafana.contract import MEASUREMENTS, Measurement

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<ident>"(?:[^"\\]|\\.)*")
  | (?P<str>'(?:[^'\\]|\\.)*')
  | (?P<macro>\$\{\w+\}|\$\w+)
  | (?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:ns|ms|u|µ|s|m|h|d|w)?\b)
  | (?P<word>[A-Za-z_]\w*)
  | (?P<op>::|=~|!~|!=|<>|<=|>=|[=<>+\-*/%(),;.])
""", re.VERBOSE)
_REGEX = re.compile(r"/(?:\\.|[^/\\])*/")
_KEYWORDS = frozenset((
    "select", "from", "where", "group", "by", "order", "limit", "slimit", "offset", "soffset",
    "fill", "tz", "into", "as", "and", "or", "not", "true", "false", "asc", "desc", "time",
    "now", "null", "none", "previous", "linear", "show", "tag", "values", "with", "key", "in",
    "distinct"))
_CLAUSES = ("from", "where", "group", "fill", "order", "limit", "slimit", "offset", "soffset",
            "tz", "into")


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # ident (quoted), word, str, regex, macro, num, op
    text: str  # an identifier unquoted, a word lower-cased, anything else as written

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.text in words


@dataclass(frozen=True, slots=True)
class _Schema:
    """What a FROM source offers: a measurement, or a subquery's output columns."""
    name: str
    tags: frozenset[str]
    fields: frozenset[str]


def tokenize(query: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    while pos < len(query):
        if query[pos] == "/" and out and out[-1].text in ("=~", "!~"):
            r = _REGEX.match(query, pos)
            if r is None:
                raise ValueError(f"unterminated regex at {pos}")
            out.append(Token("regex", r.group()))
            pos = r.end()
            continue
        m = _TOKEN.match(query, pos)
        if m is None:
            raise ValueError(f"cannot read the query at {pos}: {query[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup or ""
        text = m.group()
        if kind == "ws":
            continue
        if kind == "ident":
            text = re.sub(r"\\(.)", r"\1", text[1:-1])
        elif kind == "word":
            text = text.lower() if text.lower() in _KEYWORDS else text
        out.append(Token(kind, text))
    return out


def _split(tokens: Sequence[Token], sep: str = ",") -> list[list[Token]]:
    """Split at `sep` outside parentheses."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for t in tokens:
        depth += (t.text == "(") - (t.text == ")")
        if depth == 0 and t.kind == "op" and t.text == sep:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def _refs(tokens: Sequence[Token]) -> list[tuple[str, str]]:
    """(name, cast) of every identifier that names a column: not a function, keyword or alias."""
    out: list[tuple[str, str]] = []
    for i, t in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        after_as = i > 0 and tokens[i - 1].is_word("as")
        name_like = t.kind == "ident" or (t.kind == "word" and t.text not in _KEYWORDS)
        if not name_like or after_as or (nxt is not None and nxt.text == "("):
            continue
        cast = ""
        if nxt is not None and nxt.text == "::" and i + 2 < len(tokens):
            cast = tokens[i + 2].text
        if i > 0 and tokens[i - 1].text == "::":
            continue  # the `field`/`tag` of a cast
        out.append((t.text, cast))
    return out


def _resolve(name: str, cast: str, src: _Schema, *, where: str,
             tags_only: bool = False) -> str | None:
    both = name in src.tags and name in src.fields
    if cast not in ("", "field", "tag"):
        return f"{where}: unknown cast {name}::{cast}"
    if tags_only or cast == "tag":
        return None if name in src.tags else f"{where}: {name!r} is not a tag of {src.name!r}"
    if cast == "field":
        return None if name in src.fields else (
            f"{where}: {name!r} is not a field of {src.name!r}")
    if both:
        return (f"{where}: {name!r} is both a tag and a field of {src.name!r}; "
                "say ::field or ::tag")
    if name in src.fields or name in src.tags:
        return None
    return f"{where}: {name!r} is neither a field nor a tag of {src.name!r}"


def _clauses(tokens: Sequence[Token]) -> dict[str, list[Token]]:
    """SELECT ... split into its clauses at top-level keywords."""
    out: dict[str, list[Token]] = {"select": []}
    current = "select"
    depth = 0
    for t in tokens[1:]:
        if depth == 0 and t.kind == "word" and t.text in _CLAUSES and current != t.text:
            current = t.text
            out[current] = []
            if current != "fill":
                continue
        depth += (t.text == "(") - (t.text == ")")
        out[current].append(t)
    return out


def _source(tokens: Sequence[Token], contract: Mapping[str, Measurement],
            problems: list[str]) -> _Schema | None:
    if tokens and tokens[0].text == "(" and tokens[-1].text == ")":
        return _select(tokens[1:-1], contract, problems)
    names = [t for t in tokens if t.kind in ("ident", "word")]
    if not names or len(tokens) != 2 * len(names) - 1:
        problems.append(f"FROM: expected one measurement, got {' '.join(t.text for t in tokens)}")
        return None
    name = names[-1].text  # "db"."rp"."measurement"
    m = contract.get(name)
    if m is None:
        problems.append(f"FROM: unknown measurement {name!r}")
        return None
    return _Schema(m.name, m.tags, m.fields)


def _select(tokens: Sequence[Token], contract: Mapping[str, Measurement],
            problems: list[str]) -> _Schema | None:
    if not tokens or not tokens[0].is_word("select"):
        problems.append("expected SELECT")
        return None
    parts = _clauses(tokens)
    if "into" in parts:
        problems.append("SELECT INTO writes: a dashboard only reads")
    src = _source(parts.get("from", []), contract, problems)
    if src is None:
        return None
    outputs: set[str] = set()
    for item in _split(parts["select"]):
        refs = _refs(item)
        for name, cast in refs:
            if (p := _resolve(name, cast, src, where="SELECT")) is not None:
                problems.append(p)
        alias = next((item[i + 1].text for i, t in enumerate(item[:-1]) if t.is_word("as")),
                     None)
        func = next((t.text for i, t in enumerate(item[:-1])
                     if t.kind == "word" and item[i + 1].text == "("), None)
        outputs.add(alias or (func if func else refs[0][0] if refs else "?"))
    for name, cast in _refs(parts.get("where", [])):
        if (p := _resolve(name, cast, src, where="WHERE")) is not None:
            problems.append(p)
    group = parts.get("group", [])
    for dim in _split(group[1:]) if group else []:
        if dim and dim[0].is_word("time"):
            continue
        for name, cast in _refs(dim):
            if (p := _resolve(name, cast, src, where="GROUP BY", tags_only=True)) is not None:
                problems.append(p)
    order = parts.get("order", [])
    if order and not (len(order) >= 2 and order[0].is_word("by") and order[1].is_word("time")):
        problems.append("ORDER BY: InfluxQL orders by time only")
    return _Schema(src.name, src.tags, frozenset(outputs))


def _show(tokens: Sequence[Token], contract: Mapping[str, Measurement],
          problems: list[str]) -> None:
    words = [t.text for t in tokens[:3]]
    if words != ["show", "tag", "values"]:
        problems.append("only SHOW TAG VALUES is expected among dashboard queries")
        return
    rest = list(tokens[3:])
    if not rest or not rest[0].is_word("from"):
        problems.append("SHOW TAG VALUES without FROM scans every measurement")
        return
    with_at = next((i for i, t in enumerate(rest) if t.is_word("with")), None)
    head = [t.text for t in rest[with_at + 1:with_at + 3]] if with_at is not None else []
    if with_at is None or head not in (["key", "="], ["key", "in"]):
        problems.append("SHOW TAG VALUES: expected WITH KEY = or WITH KEY IN")
        return
    src = _source(rest[1:with_at], contract, problems)
    where_at = next((i for i, t in enumerate(rest) if t.is_word("where")), len(rest))
    keys = rest[with_at + 3:where_at]
    if src is None:
        return
    for name, cast in _refs(keys):
        if (p := _resolve(name, cast, src, where="WITH KEY", tags_only=True)) is not None:
            problems.append(p)
    for name, cast in _refs(rest[where_at + 1:]):
        if (p := _resolve(name, cast, src, where="WHERE", tags_only=True)) is not None:
            problems.append(p)


def check_query(query: str,
                contract: Mapping[str, Measurement] = MEASUREMENTS) -> list[str]:
    """What `query` names that the storage contract does not have; empty when it is clean."""
    try:
        tokens = tokenize(query)
    except ValueError as exc:
        return [str(exc)]
    problems: list[str] = []
    statements = [s for s in _split(tokens, ";") if s]
    if len(statements) != 1:
        return [f"expected one statement, got {len(statements)}"]
    stmt = statements[0]
    if stmt[0].is_word("show"):
        _show(stmt, contract, problems)
    else:
        _select(stmt, contract, problems)
    return problems
