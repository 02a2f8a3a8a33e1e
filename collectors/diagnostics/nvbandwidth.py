"""`nvbandwidth` (host-device and device-device copy bandwidth), its plain-text output.

Formats, from NVIDIA/nvbandwidth output.cpp, inline_common.h and nvbandwidth.cpp:
"nvbandwidth Version: v0.8", "CUDA Runtime Version: 12080", "Driver Version: 570.133.20",
"Device 0: NVIDIA H100 80GB HBM3 (00000000:18:00)"; per testcase "Running <key>." then the
matrix's description ("memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "memcpy CE
GPU(row) <- GPU(column) bandwidth (GB/s)"), the column labels, one row per source with values
("%.2f", width 10) or "N/A", a blank line and "SUM <key> <sum>" (newer releases add
"COEFFICIENT_OF_VARIATION <key> <cv>"). A testcase that does not apply prints "Waived: "
(without its name); one that fails prints "Error: <why>"; an unknown one "ERROR: <why>"; a
CUDA/NVML failure prints "[CUDA_ERROR_...] ... in expression ..." or "NVML_ERROR: [...]" and
ends the program.

Checks: one per testcase and GPU, named after the testcase, its figure the GPU's lowest
bandwidth in that matrix (a host copy: its column; a GPU pair: its row and its column, so
one slow link fails both of its GPUs, and the detail names the pair), in GB/s, held to the
expected minimum for the GPU model. A testcase asked for (-t on the command line) that never
ran is an error: waived (not applicable: no peer access between the GPUs, or one GPU) or cut
off (killed at its time limit).
"""

from __future__ import annotations

import math
import re
from dataclasses import field
from typing import TYPE_CHECKING

from collectors.compat import dataclass
from collectors.diagnostics.output import bounded, exit_note, killed, unreadable
from collectors.diagnostics.result import Check, Status, SuiteResult, build
from collectors.diagnostics.verdict import judge

if TYPE_CHECKING:
    from collectors.diagnostics.settings import SuiteSpec

TOOL = "nvbandwidth"
FIGURES: frozenset[str] | None = None  # every testcase's bandwidth
UNIT = "GB/s"

_RUNNING = re.compile(r"^Running (\S+?)\.?$")
_SUM = re.compile(r"^SUM (\S+) ")
_ENDPOINTS = re.compile(r"(CPU|GPU)\(row\)\s*(<->|->|<-)\s*(CPU|GPU)\(column\)")
_FATAL = re.compile(r"^\[(CUDA_ERROR_\w+|cuda\w+)\]|^NVML_ERROR|^ASSERT in expression"
                    r"|^ERROR: |^Error: ")
_TESTCASE = re.compile(r"^[a-z0-9_]+$")


@dataclass(slots=True)
class _Case:
    key: str
    rows_are: str = ""  # "CPU" or "GPU"
    cols_are: str = ""
    direction: str = "->"
    columns: list[str] = field(default_factory=list)
    cells: dict[tuple[str, str], float | None] = field(default_factory=dict)
    done: bool = False
    error: str = ""


def parse(text: str, exit_code: int | None, spec: SuiteSpec, gpu_model: str) -> SuiteResult:
    text, cut = bounded(text)
    versions: dict[str, str] = {}
    model = ""
    cases: list[_Case] = []
    fatal: list[str] = []
    waived = 0
    case: _Case | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("nvbandwidth Version:"):
            versions["nvbandwidth"] = line.split(":", 1)[1].strip()
        elif line.startswith("Driver Version:"):
            versions["driver"] = line.split(":", 1)[1].strip()
        elif line.startswith("CUDA Runtime Version:"):
            versions["cuda"] = line.split(":", 1)[1].strip()
        elif line.startswith("Device ") and ":" in line and not model:
            model = re.sub(r"\s*\([0-9a-fA-F:.]+\)\s*$", "", line.split(":", 1)[1]).strip()
        elif m := _RUNNING.match(line):
            case = _Case(m.group(1))
            cases.append(case)
        elif line.startswith("Waived:"):
            waived += 1
            case = None
        elif _FATAL.match(line):
            if case is not None and not case.done and line.startswith("Error: "):
                case.error = line[len("Error: "):]
            else:
                fatal.append(line)
            case = None
        elif case is None or case.done:
            continue
        elif m := _SUM.match(line):
            case.done = True
        elif m := _ENDPOINTS.search(line):
            case.rows_are, case.direction, case.cols_are = m.group(1), m.group(2), m.group(3)
        elif case.rows_are and not case.columns and line:
            case.columns = line.split()
        elif case.columns and line:
            parts = line.split()
            for col, value in zip(case.columns, parts[1:]):
                case.cells[(parts[0], col)] = _value(value)
    gpu_model = gpu_model or model
    if not cases and not versions:
        why = (f"{TOOL} could not run: {' / '.join(fatal[:3])}{exit_note(exit_code)}"
               if fatal else unreadable(TOOL, text, exit_code))
        return build(spec.name, (), versions, why, gpu_model)

    checks: list[Check] = []
    for c in cases:
        checks.extend(_case_checks(c, exit_code))
    ran = {c.key for c in cases}
    missing = [k for k in requested(spec.command) if k not in ran]
    for key in missing:
        why = ("waived by nvbandwidth: not applicable on this node (one GPU, or no peer "
               "access between its GPUs)" if waived else
               f"never ran ({killed(exit_code) or 'the output stops before it'})")
        checks.append(Check(key, Status.ERROR, detail=why))
    checks = list(judge(checks, spec, gpu_model, FIGURES))
    error = ""
    if fatal:
        error = f"{TOOL} failed: {' / '.join(fatal[:3])}{exit_note(exit_code)}"
    elif cut:
        error = "the output was over the size cap"
    elif exit_code and not any(c.status is not Status.PASS for c in checks):
        error = f"{TOOL}{exit_note(exit_code)} though the output shows no failure"
    return build(spec.name, checks, versions, error, gpu_model)


def requested(command: list[str]) -> list[str]:
    """The testcases a command line names (`-t a b`, `--testcase a`); none: it runs all."""
    out: list[str] = []
    taking = False
    for arg in command:
        if arg in ("-t", "--testcase"):
            taking = True
        elif arg.startswith("-"):
            taking = False
        elif taking and _TESTCASE.match(arg):
            out.append(arg)
    return out


def _case_checks(c: _Case, exit_code: int | None) -> list[Check]:
    if c.error:
        return [Check(c.key, Status.ERROR, detail=f"nvbandwidth: {c.error}")]
    if not c.done:
        how = killed(exit_code) or "the output stops"
        return [Check(c.key, Status.ERROR, detail=f"cut off before its result ({how})")]
    worst: dict[int, tuple[float, str]] = {}
    for (row, col), value in c.cells.items():
        if value is None:
            continue
        for gpu, where in _gpus(c, row, col):
            if gpu not in worst or value < worst[gpu][0]:
                worst[gpu] = (value, where)
    if not worst:
        return [Check(c.key, Status.ERROR, detail="no bandwidth in its matrix (all N/A)")]
    return [Check(c.key, Status.PASS, gpu, figure=value, unit=UNIT, detail=f"lowest: {where}")
            for gpu, (value, where) in sorted(worst.items())]


def _gpus(c: _Case, row: str, col: str) -> list[tuple[int, str]]:
    """The GPUs a cell measures, with the cell in words ("GPU 3 <- GPU 5")."""
    where = f"{c.rows_are} {row} {c.direction} {c.cols_are} {col}"
    out: list[tuple[int, str]] = []
    if c.rows_are == "GPU" and row.isdigit():
        out.append((int(row), where))
    if c.cols_are == "GPU" and col.isdigit():
        out.append((int(col), where))
    return out


def _value(s: str) -> float | None:
    try:
        v = float(s)
    except ValueError:
        return None  # "N/A": a GPU to itself, or a pair without a path
    return v if math.isfinite(v) else None
