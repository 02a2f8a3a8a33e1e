"""Frames from both parse paths of SchemaMapper.parse: the cells the point-by-point path
gathered and the column blocks the fast path (collectors.schema_fastpath) converted become one
frame per scope, exactly as the point-by-point path alone would have built it."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from collectors.compat import dataclass

I64 = npt.NDArray[np.int64]


@dataclass(slots=True)
class Chunk:
    """Known lines of one scope: per line its slot, time and 1-based number; values[i, k] is
    catalog column cols[k] of line i."""

    slots: I64
    ts_ns: I64
    lines: I64
    cols: npt.NDArray[np.intp]
    values: npt.NDArray[np.float64]


@dataclass(slots=True)
class Cells:
    """What the reference path gathered for one scope: rows (slot, time, the line that opened
    each) and cells (row, column, value, line)."""

    slots: I64
    ts_ns: I64
    first: I64
    rows: npt.NDArray[np.intp]
    cols: npt.NDArray[np.intp]
    vals: npt.NDArray[np.float64]
    lines: I64
    merged: bool


def assemble(width: int, ref: Cells, chunks: list[Chunk]
             ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """One frame's rows, times and values from both paths, exactly as the reference path alone
    would build them: a row per (slot, time), rows in time then slot then first-line order, and
    a cell set twice keeping the value of the later line."""
    if not len(ref.slots) and len(chunks) == 1:  # the common case: one round, fast path only
        c = chunks[0]
        if (c.ts_ns == c.ts_ns[0]).all():
            order = np.argsort(c.slots, kind="stable")
            s = c.slots[order]
            if (s[1:] != s[:-1]).all():  # no entity twice: rows are lines in slot order
                values = np.full((len(s), width), np.nan)
                values[:, c.cols] = c.values[order]
                return s.astype(np.int32), c.ts_ns[order] / 1e9, values
    slots = np.concatenate([ref.slots, *(c.slots for c in chunks)])
    ts = np.concatenate([ref.ts_ns, *(c.ts_ns for c in chunks)])
    first = np.concatenate([ref.first, *(c.lines for c in chunks)])
    order = np.lexsort((first, ts, slots))
    s, t = slots[order], ts[order]
    new = np.ones(len(order), bool)
    new[1:] = (s[1:] != s[:-1]) | (t[1:] != t[:-1])
    group = np.empty(len(order), np.intp)
    group[order] = np.cumsum(new) - 1
    u_slot, u_ts, u_first = s[new], t[new] / 1e9, first[order][new]
    final = np.lexsort((u_first, u_slot, u_ts))
    rank = np.empty(len(final), np.intp)
    rank[final] = np.arange(len(final))
    row_of = rank[group]  # per reference row, then per chunk line
    values = np.full((len(final), width), np.nan)
    n_ref = len(ref.slots)
    if not ref.merged and len(final) == len(order):  # no cell is set twice
        values[row_of[ref.rows], ref.cols] = ref.vals
        at = n_ref
        for c in chunks:
            values[row_of[at:at + len(c.slots), None], c.cols] = c.values
            at += len(c.slots)
    else:
        flat = [row_of[ref.rows] * width + ref.cols]
        vals, lines = [ref.vals], [ref.lines]
        at = n_ref
        for c in chunks:
            flat.append((row_of[at:at + len(c.slots), None] * width + c.cols).ravel())
            vals.append(c.values.ravel())
            lines.append(np.repeat(c.lines, len(c.cols)))
            at += len(c.slots)
        by_line = np.argsort(np.concatenate(lines), kind="stable")
        cells, v = np.concatenate(flat)[by_line], np.concatenate(vals)[by_line]
        cells, last = np.unique(cells[::-1], return_index=True)
        values.reshape(-1)[cells] = v[::-1][last]
    return u_slot[final].astype(np.int32), u_ts[final], values
