"""`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` to Points.

Fields map onto the catalog through Metric.smi_query, plus the other names drivers accept for
the same reading (driver 535 renamed clocks_throttle_reasons.* to clocks_event_reasons.*, and
newer drivers split power.draw into .average and .instant). A row's GPU is its `index` column
when queried, else its position (nvidia-smi prints GPUs in index order).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence

from collectors.catalog import CATALOG, Scope
from collectors.lineprotocol import FieldValue, Point
from collectors.nvidia_smi.values import SmiParseError, gpu_point, value

_UNIT = re.compile(r"\s*\[[^\]]*\]$")  # the " [W]" a header carries without nounits


def _fields() -> dict[str, str]:
    by_field: dict[str, str] = {}
    for m in CATALOG.columns(Scope.GPU):
        if m.smi_query is not None:
            by_field[m.smi_query] = m.name
            if m.smi_query.startswith("clocks_throttle_reasons."):
                by_field[m.smi_query.replace("throttle", "event", 1)] = m.name
    by_field.update({
        "power.draw.instant": "power_draw",
        "remapped_rows.correctable": "remapped_rows_correctable",
        "remapped_rows.uncorrectable": "remapped_rows_uncorrectable",
        "remapped_rows.pending": "remapped_rows_pending",
        "remapped_rows.failure": "remapped_rows_failure",
    })
    return by_field


QUERY_FIELDS: Mapping[str, str] = _fields()  # --query-gpu field -> catalog metric


def parse_query_csv(text: str, fields: Sequence[str], host: str, ts_ns: int) -> list[Point]:
    """`fields` is the --query-gpu list in the order it was asked for. A header line, if
    present, must name the same fields; every row must have one cell per field."""
    wanted = [f.strip() for f in fields]
    rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r]
    if not rows:
        raise SmiParseError("nvidia-smi --query-gpu printed no rows")
    head = [_UNIT.sub("", c.strip()) for c in rows[0]]
    # Without a header the first cell is a value, which never spells a field name.
    if head and head[0] == wanted[0]:
        if head != wanted:
            raise SmiParseError(f"--query-gpu header {head} does not match the fields asked "
                                f"for {wanted}")
        rows = rows[1:]
    index_col = wanted.index("index") if "index" in wanted else None
    points = []
    for n, row in enumerate(rows):
        if len(row) != len(wanted):
            raise SmiParseError(f"--query-gpu row {n + 1} has {len(row)} cells for "
                                f"{len(wanted)} fields: {','.join(row)[:200]!r}")
        gpu = n
        if index_col is not None:
            idx = row[index_col].strip()
            if not idx.isdigit():
                raise SmiParseError(f"--query-gpu row {n + 1}: index {idx!r} is not a number")
            gpu = int(idx)
        out: dict[str, FieldValue] = {}
        for field, cell in zip(wanted, row, strict=True):
            metric = QUERY_FIELDS.get(field)
            v = None if metric is None else value(cell)
            if metric is not None and v is not None and metric not in out:
                out[metric] = v
        if out:
            points.append(gpu_point(host, gpu, out, ts_ns))
    return points

