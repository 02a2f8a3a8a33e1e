"""The columnar fast path of SchemaMapper.parse: known lines straight into column arrays.

A fleet sends the same series every round: per entity the same key text (measurement and tag
set), per source the same field names in the same order. The mapper learns both from lines the
reference path (lineprotocol.parse, then the mapper's point mapping) accepted whole: a *head*
(the key text) gives the entity's slot, a *template* (names and value types of a measurement's
fields) gives each field's catalog column. Lines with a known head and a matching template are
then checked and converted a whole group at a time, with str.join/split, bytes.translate and
numpy's text parser; no Python code runs per field.

Nothing is decided here that the reference path would decide differently: the checks accept
only what lineprotocol would parse to the same numbers, and a group that fails them is halved
until its failing lines are found; those go back to the reference path, which keeps or rejects
them with their line number and reason as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from itertools import repeat
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from collectors.catalog import CATALOG, FieldType, Kind, Scope
from collectors.compat import dataclass, zip_strict
from collectors.ignored import IgnoredNames
from collectors.lineprotocol import MAX_NUMBER_CHARS, FieldValue, UInt, timestamp_ns
from collectors.schema_frames import I64, Chunk

MAX_HEADS = 1_000_000  # distinct key texts remembered; relearned from scratch past this
MAX_TEMPLATES = 4  # field layouts kept per measurement and field count (one per source)

# What a value may hold to reach numpy's parser: no sign '+', '_', whitespace or letters
# (Python's float() and numpy accept those, line protocol does not).
_FLOAT_CHARS = b"0123456789.eE-,"
_INT_CHARS = b"0123456789-,"
_UINT_CHARS = b"0123456789,"
_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min


@dataclass(slots=True)
class Template:
    """The fields of one line layout: names in order, value kind per field ('f' float, 'i'
    integer, 'u' unsigned), catalog column per field (-1: a lenient mapper ignores it)."""

    measurement: str
    scope: Scope
    names: tuple[str, ...]
    kinds: str
    cols: tuple[int, ...]
    counters: tuple[bool, ...]  # a counter column refuses negative values
    whole: tuple[bool, ...]  # an integer-typed column refuses fractions
    # Derived once. Values are parsed a kind at a time, so rows of a converted block follow
    # `order` (fields grouped by kind); the *_rows index that order.
    prefixes: list[str] = field(init=False, compare=False)
    by_kind: list[tuple[str, list[int]]] = field(init=False, compare=False)
    counter_rows: list[int] = field(init=False, compare=False)
    whole_rows: list[int] = field(init=False, compare=False)
    keep_rows: list[int] = field(init=False, compare=False)
    keep_cols: npt.NDArray[np.intp] = field(init=False, compare=False)
    ignored: tuple[str, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        self.prefixes = [n + "=" for n in self.names]
        self.by_kind = [(k, [j for j, kj in enumerate(self.kinds) if kj == k])
                        for k in "fiu" if k in self.kinds]
        order = [j for _, js in self.by_kind for j in js]
        self.counter_rows = [r for r, j in enumerate(order) if self.counters[j]]
        self.whole_rows = [r for r, j in enumerate(order)
                           if self.whole[j] and self.kinds[j] == "f"]
        self.keep_rows = [r for r, j in enumerate(order) if self.cols[j] >= 0]
        self.keep_cols = np.asarray([self.cols[order[r]] for r in self.keep_rows], np.intp)
        self.ignored = tuple(n for n, c in zip_strict(self.names, self.cols) if c < 0)


class FastPath:
    """Heads and templates one SchemaMapper learned; `run` splits a body between the fast path
    and the reference path."""

    def __init__(self) -> None:
        self._heads: dict[str, int] = {}
        self._slot: list[int] = []
        self._meas: list[int] = []
        self._arrays: tuple[I64, I64] | None = None  # _slot, _meas as arrays, while unchanged
        self._meas_ids: dict[str, int] = {}
        self._templates: dict[tuple[int, int], list[Template]] = {}

    def learn(self, line: str, measurement: str, fields: Mapping[str, FieldValue],
              scope: Scope, cols: Mapping[str, int], slot: int) -> None:
        """Remember the head and layout of `line`, which the reference path mapped whole onto
        entity `slot` with these fields. Lines the split fast path cannot read are skipped."""
        if "\\" in line or '"' in line or line != line.strip(" \t\r\n"):
            return
        parts = line.split(" ")
        if len(parts) != 3 or parts[0].partition(",")[0] != measurement:
            return  # a Telegraf prometheus line, translated into another measurement
        key, fs, _ = parts
        names = tuple(fields)
        mid = self._meas_ids.setdefault(measurement, len(self._meas_ids))
        known = self._templates.setdefault((mid, len(names) - 1), [])
        # A first round teaches every entity the same few layouts: check those cheaply first.
        if key in self._heads and any(t.names == names for t in known):
            return
        if tuple(item.partition("=")[0] for item in fs.split(",")) != names:
            return
        kinds = "".join(_kind(v) for v in fields.values())
        if "?" in kinds:
            return  # booleans and strings stay on the reference path
        col = tuple(cols.get(n, -1) for n in names)
        if not any((t.names, t.kinds, t.cols) == (names, kinds, col) for t in known):
            metrics = CATALOG.columns(scope)
            known.insert(0, Template(measurement, scope, names, kinds, col, tuple(
                c >= 0 and metrics[c].kind is Kind.COUNTER for c in col), tuple(
                c >= 0 and metrics[c].field_type is FieldType.INTEGER for c in col)))
            del known[MAX_TEMPLATES:]
        if key not in self._heads:
            if len(self._heads) >= MAX_HEADS:
                self._heads.clear()
                self._slot.clear()
                self._meas.clear()
            self._heads[key] = len(self._slot)
            self._slot.append(slot)
            self._meas.append(mid)
            self._arrays = None

    def unfamiliar(self, data: bytes, limit: int) -> bool:
        """Whether more than `limit` lines of `data` have a head this path has not learned:
        lines the slower reference path must map (a new entity costs tens of µs there)."""
        heads = self._heads
        left = limit
        for line in data.split(b"\n"):
            if not line or line[:1] == b"#":
                continue
            if line.partition(b" ")[0].decode("utf-8", "replace") not in heads:
                left -= 1
                if left < 0:
                    return True
        return False

    def run(self, lines: list[str], first_line: int, mult: int, ignored: IgnoredNames
            ) -> tuple[dict[Scope, list[Chunk]], list[int]]:
        """Chunks for the lines the fast path took, and the indices (ascending) of the lines
        left to the reference path; fields a template ignores are counted into `ignored`."""
        n = len(lines)
        if not self._heads or not self._templates or n == 0:
            return {}, list(range(n))
        keys, fss, tss = _tokens(lines)
        hid = np.fromiter(map(self._heads.get, keys, repeat(-1)), np.int64, n)
        commas = np.fromiter(map(str.count, fss, repeat(",")), np.int64, n)
        ts, ts_ok = _timestamps(tss, mult)
        ok = (hid >= 0) & ts_ok
        slot_of, meas_of = self._head_arrays()
        refer: list[npt.NDArray[np.intp]] = [np.flatnonzero(~ok)]
        take = np.flatnonzero(ok)
        group = (meas_of[hid[take]] << 32) | commas[take]
        order = np.argsort(group, kind="stable")
        bounds = np.flatnonzero(np.diff(group[order])) + 1
        run = _Run(fss, slot_of[hid], ts, first_line, {}, refer, ignored)
        for part in np.split(order, bounds):
            if not len(part):
                continue
            idx = take[part]
            key = int(group[part[0]])
            for template in self._templates.get((key >> 32, key & 0xFFFFFFFF), ()):
                idx = run.match(template, idx)
                if not len(idx):
                    break
            refer.append(idx)
        return run.chunks, sorted(np.concatenate(refer).tolist())

    def _head_arrays(self) -> tuple[I64, I64]:
        if self._arrays is None:
            self._arrays = (np.asarray(self._slot, np.int64), np.asarray(self._meas, np.int64))
        return self._arrays


@dataclass(slots=True)
class _Run:
    """One body's known lines: field sets, slots and times by line index."""

    fss: list[str]
    slots: I64
    ts: I64
    first_line: int
    chunks: dict[Scope, list[Chunk]]
    refer: list[npt.NDArray[np.intp]]
    ignored: IgnoredNames

    def match(self, t: Template, idx: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
        """Convert the lines of `idx` (all with t's field count) that have t's names; returns
        the lines that do not."""
        n, count = len(t.names), len(idx)
        got = itemgetter(*idx.tolist())(self.fss)
        items = (",".join(got) if count > 1 else got).split(",")
        texts = _values(t.prefixes, items, count)
        if texts is not None:
            self._convert(t, idx, texts)
            return idx[:0]
        starts = np.fromiter(map(str.startswith, items, t.prefixes * count), bool, n * count)
        hit = starts.reshape(count, n).all(1)
        if hit.all():  # a name inside a value: the reference path says what is wrong
            self._halve(t, idx)
        elif hit.any():
            self.match(t, idx[hit])
        return idx[~hit]

    def _halve(self, t: Template, idx: npt.NDArray[np.intp]) -> None:
        """Lines of which some fail: halve until the failing ones are alone."""
        if len(idx) == 1:
            self.refer.append(idx)
        else:
            self.match(t, idx[:len(idx) // 2])
            self.match(t, idx[len(idx) // 2:])

    def _convert(self, t: Template, idx: npt.NDArray[np.intp], texts: list[str]) -> None:
        count = len(idx)
        parts = []
        for kind, cols in t.by_kind:  # one parse per kind: small bodies pay numpy's overhead
            got = _column(",".join(texts[j] for j in cols), kind, count * len(cols))
            if got is None:
                self._halve(t, idx)
                return
            parts.append(got.reshape(len(cols), count))
        values = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if t.counter_rows and (values[t.counter_rows] < 0.0).any():
            self._halve(t, idx)  # the reference path says which counter is negative
            return
        if t.whole_rows and (np.mod(values[t.whole_rows], 1.0) != 0.0).any():
            self._halve(t, idx)  # the reference path names the fraction
            return
        for name in t.ignored:
            self.ignored.add(t.measurement, name, count)
        if not t.keep_rows:
            return  # only ignored fields: no row, as on the reference path
        self.chunks.setdefault(t.scope, []).append(Chunk(
            self.slots[idx], self.ts[idx], idx.astype(np.int64) + self.first_line, t.keep_cols,
            values[t.keep_rows].T))


def _values(prefixes: list[str], items: list[str], count: int) -> list[str] | None:
    """Per field, the values of `count` lines joined by commas; None unless every item is its
    field's `name=` and a value without that text. (The item-start occurrences are the first
    and one after each comma; the removed length says there are no others.)"""
    n = len(prefixes)
    out: list[str] = []
    for j, p in enumerate(prefixes):
        text = ",".join(items[j::n])
        values = text.replace(p, "")
        if (len(values) != len(text) - count * len(p) or not text.startswith(p)
                or text.count("," + p) != count - 1):
            return None
        out.append(values)
    return out


def _kind(v: FieldValue) -> str:
    t = type(v)
    return "f" if t is float else "i" if t is int else "u" if t is UInt else "?"


def _tokens(lines: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Key, field set and timestamp of every line; "" for all three where a line does not
    split into exactly three on spaces."""
    if list(map(str.count, lines, repeat(" "))).count(2) == len(lines):
        toks = " ".join(lines).split(" ")  # two spaces a line: token 3i starts line i
        return toks[0::3], toks[1::3], toks[2::3]
    keys: list[str] = []
    fss: list[str] = []
    tss: list[str] = []
    for line in lines:
        parts = line.split(" ")
        k, f, t = parts if len(parts) == 3 else ("", "", "")
        keys.append(k)
        fss.append(f)
        tss.append(t)
    return keys, fss, tss


def _timestamps(tss: list[str], mult: int) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Nanoseconds per line, and whether each stamp is valid. A body repeats a few stamps."""
    seen: dict[str, int | None] = dict.fromkeys(tss)
    bad = set()
    for s in seen:
        v = timestamp_ns(s, mult)
        if v is None:
            bad.add(s)
        seen[s] = v or 0
    n = len(tss)
    ts = np.fromiter(map(seen.__getitem__, tss), np.int64, n)
    ok = np.ones(n, bool) if not bad else np.fromiter((s not in bad for s in tss), bool, n)
    return ts, ok


def _longest(raw: bytes) -> int:
    """The longest comma-separated token of `raw` (one numpy scan: a regex over every
    position cost more than parsing the numbers)."""
    b = np.frombuffer(raw, np.uint8)
    bounds = np.flatnonzero(b == 44)  # ','
    if not len(bounds):
        return len(raw)
    inner = int(np.diff(bounds).max()) - 1 if len(bounds) > 1 else 0
    return max(int(bounds[0]), len(raw) - 1 - int(bounds[-1]), inner)


def _column(text: str, kind: str, count: int) -> npt.NDArray[np.float64] | None:
    """One field of `count` lines (values joined by commas) as floats, or None unless
    lineprotocol would give the same numbers for every one of them."""
    if not text.isascii():
        return None
    raw = text.encode("ascii")
    if len(raw) > MAX_NUMBER_CHARS and _longest(raw) > MAX_NUMBER_CHARS:
        return None  # a token the reference path refuses as too long (numpy would read it)
    if kind == "f":
        if raw.translate(None, _FLOAT_CHARS):
            return None
        try:
            out = np.fromstring(text, np.float64, sep=",")
        except ValueError:  # a value numpy cannot read to its end
            return None
        return out if len(out) == count and np.isfinite(out).all() else None
    # Every value ends in the suffix and holds no other: count of them, one before each comma.
    if (not text.endswith(kind) or text.count(kind) != count
            or text.count(kind + ",") != count - 1):
        return None
    text = text.replace(kind, "")
    if (text.encode().translate(None, _INT_CHARS if kind == "i" else _UINT_CHARS)
            or "-," in text or text.endswith("-")):  # numpy reads a lone '-' as 0
        return None
    try:
        ints = np.fromstring(text, np.int64, sep=",")
    except ValueError:
        return None
    # numpy saturates out-of-range integers; the reference path judges those.
    if len(ints) != count or ints.max() >= _I64_MAX or ints.min() <= _I64_MIN:
        return None
    return ints.astype(np.float64)
