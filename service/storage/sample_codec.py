"""One entity's values of one sample as one BLOB (service.storage.samples_sqlite's `vals`), so a
written row binds five parameters instead of one per metric, and a round's rows are packed by
numpy at once instead of a Python object per value.

Layout (little-endian 64-bit words): the present mask (bit j: column j has a value), the
non-zero mask (bit j: column j's value has any bit set), then the non-zero values as float64
in column order. A missing value (NaN at ingest, NULL in the wide tables) is a clear present
bit; a zero costs no word, as SQLite's own record format stores 0.0 in no bytes. Every value
comes back bit for bit (-0.0 and infinities included). Column j is position j of the scope's
`{scope}_layout` table, which only ever grows at its end, so a blob written before a metric
was added reads that metric as missing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

MAX_COLUMNS = 64  # one mask word per kind
_HEAD = 2  # words before the values


def encode(values: npt.NDArray[np.float64]) -> list[bytes]:
    """One blob per row of `values` (rows x columns, NaN = missing), built for all rows at
    once: the words of every row in one array, then one slice per row."""
    n, c = values.shape
    if c > MAX_COLUMNS:
        raise ValueError(f"{c} columns: a packed sample holds at most {MAX_COLUMNS}")
    if n == 0:
        return []
    v = np.ascontiguousarray(values, np.float64)
    bits = v.view(np.uint64)
    present = ~np.isnan(v)
    nonzero = present & (bits != 0)
    wide = np.zeros((n, MAX_COLUMNS), bool)
    wide[:, :c] = present
    pm = np.packbits(wide, axis=1, bitorder="little").view("<u8")[:, 0]
    wide[:, :c] = nonzero
    nzm = np.packbits(wide, axis=1, bitorder="little").view("<u8")[:, 0]
    size = _HEAD + nonzero.sum(1)
    ends = np.cumsum(size)
    starts = ends - size
    words = np.empty(int(ends[-1]), "<u8")
    head = np.zeros(len(words), bool)
    head[starts] = head[starts + 1] = True
    words[starts] = pm
    words[starts + 1] = nzm
    words[~head] = bits[nonzero]  # row by row, columns in order: the slots left, in order
    data = words.tobytes()
    return [data[8 * a:8 * b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


def decode(blob: bytes | None, cols: Sequence[int]) -> tuple[float | None, ...]:
    """The values at layout positions `cols` (None: missing); a NULL blob has none."""
    if blob is None:
        return (None,) * len(cols)
    words = np.frombuffer(blob, "<u8")
    pm, nzm = int(words[0]), int(words[1])
    vals = words[_HEAD:].view("<f8")
    out: list[float | None] = []
    for j in cols:
        if not pm >> j & 1:
            out.append(None)
        elif not nzm >> j & 1:
            out.append(0.0)
        else:
            out.append(float(vals[(nzm & ((1 << j) - 1)).bit_count()]))
    return tuple(out)


def decode_all(blob: bytes | None, ncol: int) -> npt.NDArray[np.float64]:
    """Every column as float64, NaN where missing."""
    got = decode(blob, range(ncol))
    return np.array([np.nan if v is None else v for v in got], np.float64)


def merge(new: bytes | None, old: bytes | None) -> bytes | None:
    """A resent sample over a stored one: each value it carries replaces the stored value
    (InfluxDB's last write wins). Runs only when a row meets one already at its time."""
    if new is None or old is None:
        return old if new is None else new
    n = MAX_COLUMNS
    a, b = decode_all(new, n), decode_all(old, n)
    a[np.isnan(a)] = b[np.isnan(a)]
    last = np.flatnonzero(~np.isnan(a))
    return encode(a[None, :int(last[-1]) + 1 if len(last) else 0])[0]
