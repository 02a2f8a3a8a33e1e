"""`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` to Points.

Fields map onto the catalog through Metric.smi_query, plus the other names drivers accept for
the same reading (driver 535 renamed clocks_throttle_reasons.* to clocks_event_reasons.*, and
newer drivers split power.draw into .average and .instant). A row's GPU is its `index` column
when queried, else its position (nvidia-smi prints GPUs in index order).

A capture of any width reads: nvidia_gpu_exporter asks for some 230 fields; the ones the catalog
tracks are read and the rest ignored. Without a header a capture's columns cannot be named, so
`parse_query_csv_with_header` refuses it, saying so.

Every row also gets `gpu_unreadable` (collectors.nvidia_smi.states): 0, or the NVML error its
cells print in place of readings. A GPU nvidia-smi has no handle for is a line of its own
("Unable to determine the device handle for GPU ...: Unknown Error"), not a row: it is skipped
here and the collector, which knows the GPU's bus id, reports it. A row whose index reads as an
error ("[Unknown Error]") is the GPU at its position: nvidia-smi prints GPUs in index order, the
handle-error lines included.

The identity columns (`name`, `uuid`, `serial`, `pci.bus_id`, `vbios_version`, `driver_version`
and their `gpu_*` spellings, `nvidia-smi --help-query-gpu`) give each row a `gpu_info` point
(collectors.identity); a cell printing "[N/A]" or "[Unknown Error]" there is no value.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence

from collectors.catalog import CATALOG, Scope
from collectors.compat import zip_strict
from collectors.frames import Rejection
from collectors.kernel_log.messages import normalize_bus_id
from collectors.lineprotocol import FieldValue, Point
from collectors.nvidia_smi import states
from collectors.nvidia_smi.values import (
    Refused,
    SmiParseError,
    gpu_point,
    info_point,
    reading,
    refuser,
)

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
# --query-gpu field -> collectors.identity.FIELDS name (nvidia-smi --help-query-gpu).
IDENTITY_FIELDS: Mapping[str, str] = {
    "name": "model", "gpu_name": "model", "uuid": "uuid", "gpu_uuid": "uuid",
    "serial": "serial", "gpu_serial": "serial", "pci.bus_id": "pci_bus_id",
    "gpu_bus_id": "pci_bus_id", "vbios_version": "vbios", "driver_version": "driver",
}


def parse_query_csv(text: str, fields: Sequence[str], host: str, ts_ns: int,
                    rejected: list[Rejection] | None = None,
                    bus_ids: dict[int, str] | None = None) -> list[Point]:
    """`fields` is the --query-gpu list in the order it was asked for. A header line, if
    present, must name the same fields; every row must have one cell per field. Readings out
    of range are refused into `rejected` (when given) and left out. `bus_ids`, when given,
    gets each row's GPU index -> normalized PCI bus id (when `pci.bus_id` was asked and reads)."""
    wanted = [f.strip() for f in fields]
    rows = _rows(text)
    if not rows:
        return []  # nothing but handle-error lines: the collector reports those GPUs
    if is_header(rows[0]):
        head = [_UNIT.sub("", c.strip()) for c in rows[0]]
        if head != wanted:
            raise SmiParseError(f"--query-gpu header does not match the fields asked for: "
                                f"{_difference(head, wanted)}")
        rows = rows[1:]
    return _points(rows, wanted, host, ts_ns, rejected, bus_ids)


def parse_query_csv_with_header(text: str, host: str, ts_ns: int,
                                rejected: list[Rejection] | None = None) -> list[Point]:
    """A captured `--format=csv` output whose header names the fields (any number of them, in
    any order): the fields the catalog tracks are read, the rest ignored."""
    rows = _rows(text)
    if not rows or not is_header(rows[0]):
        if not rows:
            raise SmiParseError("nvidia-smi --query-gpu CSV holds no GPU row, only errors")
        first = ", ".join(c.strip() for c in rows[0])
        raise SmiParseError(
            "nvidia-smi --query-gpu CSV has no header line, so its columns cannot be named: "
            "capture it with --format=csv (not noheader), whose first line names the fields "
            f"(e.g. 'index, temperature.gpu, power.draw [W]'); its first line is {first[:120]!r}")
    head = [_UNIT.sub("", c.strip()) for c in rows[0]]
    return _points(rows[1:], head, host, ts_ns, rejected)


# A field name as nvidia-smi's header prints it: "power.draw [W]", "clocks_event_reasons.active".
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def is_header(row: Sequence[str]) -> bool:
    """Whether a CSV row names fields: every cell a field name (units aside) and at least one
    that only a field name looks like. A data row always has a value no name looks like
    ("45", "NVIDIA H100", "00000000:19:00.0")."""
    names = [_UNIT.sub("", c.strip()) for c in row]
    return bool(names) and all(_NAME.match(n) for n in names) and any(
        n in QUERY_FIELDS or n == "index" or "." in n or "_" in n for n in names)


_NOT_A_ROW = "\x00"  # stands for a handle-error line: it holds a GPU's place in index order


def _rows(text: str) -> list[list[str]]:
    """The CSV rows; a handle-error line becomes [_NOT_A_ROW] (skipped, but counted for the
    position of the rows after it). No row at all is an error unless it was all handle errors."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if states.HANDLE_ERROR.search(line):
            rows.append([_NOT_A_ROW])
        elif line.strip() and not states.no_devices(line):
            rows += [r for r in csv.reader([line], skipinitialspace=True) if r]
    if not rows:
        raise SmiParseError("nvidia-smi --query-gpu printed no rows")
    if all(r == [_NOT_A_ROW] for r in rows):
        return []
    while rows and rows[0] == [_NOT_A_ROW] and len(rows) > 1 and is_header(rows[1]):
        rows = rows[1:]  # an error line printed before the header (stderr merged in)
    return rows


def _difference(head: list[str], wanted: list[str]) -> str:
    if len(head) != len(wanted):
        return f"the header has {len(head)} fields, {len(wanted)} were asked for"
    i = next(i for i, (a, b) in enumerate(zip_strict(head, wanted)) if a != b)
    return f"field {i + 1} is {head[i]!r} where {wanted[i]!r} was asked for"


def _points(rows: list[list[str]], wanted: list[str], host: str, ts_ns: int,
            rejected: list[Rejection] | None,
            bus_ids: dict[int, str] | None = None) -> list[Point]:
    index_col = wanted.index("index") if "index" in wanted else None
    bus_col = next((wanted.index(f) for f in ("pci.bus_id", "gpu_bus_id") if f in wanted), None)
    ident_cols = [(i, IDENTITY_FIELDS[f]) for i, f in enumerate(wanted) if f in IDENTITY_FIELDS]
    points = []
    for n, row in enumerate(rows):
        if row == [_NOT_A_ROW]:
            continue
        if len(row) != len(wanted):
            raise SmiParseError(f"--query-gpu row {n + 1} has {len(row)} cells for "
                                f"{len(wanted)} fields: {','.join(row)[:200]!r}")
        gpu, core = n, [(cell, field in states.CORE_QUERY) for field, cell in zip_strict(wanted,
                                                                                      row)]
        if index_col is not None:
            idx = row[index_col].strip()
            if idx.isascii() and idx.isdigit() and len(idx) <= 6:
                gpu = int(idx)
            elif states.state_of(idx, core=True):
                core.append((idx, True))  # an error in place of the index: the row's position
            else:
                raise SmiParseError(f"--query-gpu row {n + 1}: index {idx[:40]!r} is not a "
                                    "GPU index")
        if bus_ids is not None and bus_col is not None:
            bus = normalize_bus_id(row[bus_col])
            if bus is not None:
                bus_ids[gpu] = bus
        refuse = refuser(rejected, host, gpu)
        out: dict[str, FieldValue] = {}
        for field, cell in zip_strict(wanted, row):
            metric = QUERY_FIELDS.get(field)
            if metric is None or metric in out:
                continue
            v = reading(cell)
            if isinstance(v, Refused):
                if refuse is not None:
                    refuse(metric, f"{field}: {v}")
            elif v is not None:
                out[metric] = v
        state = states.assess(core)
        if state is not None:
            out[states.FIELD] = state
        if out:
            points.append(gpu_point(host, gpu, out, ts_ns))
        info = info_point(host, gpu, {name: row[i] for i, name in ident_cols}, ts_ns, rejected)
        if info is not None:
            points.append(info)
    return points
