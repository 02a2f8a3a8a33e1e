"""The NCCL tests (`all_reduce_perf -b 8 -e 8G -f 2 -g 8` and the other *_perf binaries).

Formats, from NVIDIA/nccl-tests src/common.cu (and src/util.cu, where newer releases moved
the printing):
- the header: "# nccl-tests version 2.17.1 nccl-headers=22703 nccl-library=22703" (newer
  releases), "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup
  iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0", then per rank
  "#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s" (newer: the bus id as
  "[%04x:%02x:%02x]"), the last field the CUDA device name ("NVIDIA H100 80GB HBM3");
- a row per size: "%12li  %12li  %8s  %6s  %6s" (size, count, type, redop, root) then for
  out-of-place and in-place "  %7s  %6s  %6s  %6g" (time in us, algbw, busbw in GB/s,
  #wrong; "N/A" without validation; older releases "%6.2f" and "%5li"), possibly followed
  by bitwise or per-iteration columns;
- the footer: "# Out of bounds values : %d OK|FAILED", "# Avg bus bandwidth    : %g" (with
  OK/FAILED when NCCL_TESTS_MIN_BW is set), and "# Collective test concluded: ..." (newer);
- failures: "<host>: Test NCCL failure common.cu:NNN '<error> / <last error>'",
  "<host>: Test CUDA failure ...", " .. <host> pid N: Test failure ..." (TESTCHECK), and the
  launcher's own words (mpirun, srun, PMIx).

Checks: `data_integrity` (every #wrong is 0; a wrong value is data corruption and fails at
once, even in an output cut short), `busbw_gbps` (the better of out-of-place and in-place bus
bandwidth at the largest size: the peak), `avg_busbw_gbps` (the footer's average). Both
bandwidths are figures an operator may expect per GPU model. An output without its footer
(killed at the time limit) or with a failure line is an error unless a row shows wrong values.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from collectors.compat import dataclass
from collectors.diagnostics.output import bounded, exit_note, killed, unreadable
from collectors.diagnostics.result import Check, Status, SuiteResult, build
from collectors.diagnostics.verdict import judge

if TYPE_CHECKING:
    from collectors.diagnostics.settings import SuiteSpec

TOOL = "the NCCL tests"
FIGURES = frozenset({"busbw_gbps", "avg_busbw_gbps"})
UNIT = "GB/s"

_VERSION = re.compile(r"^#\s*nccl-tests version (\S+)(?:.*nccl-library=(\d+))?")
_HEADER = re.compile(r"^#\s*nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+)")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)"
                   r"\s+\[[^\]]*\]\s+(.+?)\s*$")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+(.+)$")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*([-+\d.eE]+|nan|inf)\s*(\w*)", re.I)
_FAILURE = re.compile(
    r"Test (?:NCCL|CUDA) failure|Test failure |NCCL WARN|Invalid number of GPUs"
    r"|mpirun (?:was unable|noticed|detected)|MPI_ABORT|ORTE was unable|PMIX ERROR"
    r"|^srun: error|error while loading shared libraries|invalid option|Segmentation fault"
    r"|command not found|No such file or directory", re.I)
_NUM = r"(?:[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_SIDE = re.compile(rf"^({_NUM})\s+({_NUM})\s+({_NUM})\s+({_NUM}|N/A)")


@dataclass(frozen=True, slots=True)
class Row:
    size: int
    busbw: float  # the better of out-of-place and in-place, GB/s
    wrong: float  # wrong elements, both sides together (0 without validation)


def parse(text: str, exit_code: int | None, spec: SuiteSpec, gpu_model: str) -> SuiteResult:
    text, cut = bounded(text)
    versions: dict[str, str] = {}
    model = ""
    rows: list[Row] = []
    failures: list[str] = []
    oob: tuple[int, str] | None = None
    avg: tuple[float, str] | None = None
    header = False
    for raw in text.replace("\r", "\n").splitlines():
        line = raw.rstrip()
        if m := _VERSION.match(line):
            versions["nccl_tests"] = m.group(1)
            if m.group(2):
                versions["nccl"] = _nccl_version(int(m.group(2)))
        elif _HEADER.match(line):
            header = True
        elif m := _RANK.match(line):
            model = model or m.group(4)
        elif m := _OOB.match(line):
            oob = (int(m.group(1)), m.group(2))
        elif m := _AVG.match(line):
            avg = (float(m.group(1)), m.group(2))
        elif _FAILURE.search(line):
            failures.append(line.strip())
        elif not line.startswith("#") and (row := _row(line)) is not None:
            rows.append(row)
    gpu_model = gpu_model or model
    if not header and not rows:
        why = (f"{TOOL} could not run: {' / '.join(failures[:3])}{exit_note(exit_code)}"
               if failures else unreadable(TOOL, text, exit_code))
        return build(spec.name, (), versions, why, gpu_model)

    checks: list[Check] = []
    wrong = [r for r in rows if r.wrong > 0]
    if wrong or (oob and oob[0] > 0):
        sizes = ", ".join(_size(r.size) for r in wrong[:6]) or "?"
        total = sum(r.wrong for r in wrong)
        checks.append(Check("data_integrity", Status.FAIL, figure=total, unit="elements",
                            detail=f"wrong values (data corruption) at {sizes}"))
    elif rows:
        checks.append(Check("data_integrity", Status.PASS, figure=0.0, unit="elements"))

    error = ""
    if failures:
        error = f"{TOOL} failed: {' / '.join(failures[:3])}{exit_note(exit_code)}"
    elif avg is None:
        last = f"after the {_size(rows[-1].size)} row" if rows else "before its first row"
        how = killed(exit_code) or "killed at its time limit or crashed"
        error = f"the output stops {last}, with no 'Avg bus bandwidth' line ({how})"
    if cut:
        error = "; ".join(p for p in (error, "the output was over the size cap") if p)
    if avg is not None and not failures and rows:
        peak = max(rows, key=lambda r: r.size)
        checks.append(Check("busbw_gbps", Status.PASS, figure=peak.busbw, unit=UNIT,
                            detail=f"at {_size(peak.size)}"))
        avg_ok = avg[1].upper() != "FAILED"
        checks.append(Check("avg_busbw_gbps", Status.PASS if avg_ok else Status.FAIL,
                            figure=avg[0], unit=UNIT,
                            detail="" if avg_ok else "below NCCL_TESTS_MIN_BW"))
    checks = list(judge(checks, spec, gpu_model, FIGURES))
    if exit_code and not error and not any(c.status is Status.FAIL for c in checks):
        error = f"{TOOL}{exit_note(exit_code)} though the output shows no failure"
    return build(spec.name, checks, versions, error, gpu_model)


def _row(line: str) -> Row | None:
    m = _ROW.match(line)
    if not m:
        return None
    rest = m.group(6)
    sides: list[tuple[float, float]] = []
    for _ in range(2):
        s = _SIDE.match(rest)
        if not s:
            break
        wrong = 0.0 if s.group(4) == "N/A" else float(s.group(4))
        sides.append((float(s.group(3)), wrong))
        rest = rest[s.end():].lstrip()
    if not sides:
        return None
    return Row(int(m.group(1)), max(b for b, _ in sides), sum(w for _, w in sides))


def _nccl_version(code: int) -> str:
    # NCCL_VERSION(X,Y,Z) is X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z before.
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"
