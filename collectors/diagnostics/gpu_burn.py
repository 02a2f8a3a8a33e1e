"""`gpu_burn` (github.com/wilicc/gpu-burn): a GEMM burn that compares every result.

Formats, from wilicc/gpu-burn gpu_burn-drv.cpp: `nvidia-smi -L` first ("GPU 0: NVIDIA H100
80GB HBM3 (UUID: GPU-...)"), "Initialized device %d with %lu MB of memory (...)", then
progress lines written over each other with "\\r": "%.1f%%  proc'd: %d (%.0f Gflop/s) - ...
errors: %d  (WARNING!) - %d  (DIED!) - ...  temps: %d C - ..." (one entry per GPU, in order;
the error counts are reset after each "Summary at:" line), and at the end "Killing
processes.. done", "Tested %d GPUs:" and one "\\tGPU %d: OK|FAULTY" per GPU. A child that
cannot start prints "Couldn't init a GPU test: ..." and one that fails "Failure during
compute: ..." (DIED!); "No clients are alive!  Aborting" ends the run.

Checks per GPU: `burn_errors` (gpu_burn's OK/FAULTY: a GEMM result that differs is a fault;
the figure is the most errors seen in one interval) and `gflops` (the last rate reported,
Gflop/s, a figure an operator may expect per GPU model). Without the "Tested" summary the run
was cut short: an error, unless a GPU had already shown errors or died.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from collectors.diagnostics.output import bounded, exit_note, killed, unreadable
from collectors.diagnostics.result import Check, Status, SuiteResult, build
from collectors.diagnostics.verdict import judge

if TYPE_CHECKING:
    from collectors.diagnostics.settings import SuiteSpec

TOOL = "gpu_burn"
FIGURES = frozenset({"gflops"})
UNIT = "Gflop/s"

_LISTED = re.compile(r"^GPU (\d+): (.+?) \(UUID: ")
_PROGRESS = re.compile(r"proc'd:(.*?)errors:(.*?)(?:temps:|$)")
_RATE = re.compile(r"(-?\d+) \((\d+) Gflop/s\)")
_ERRORS = re.compile(r"(-?\d+)\s*(\(WARNING!\)|\(DIED!\))?")
_TESTED = re.compile(r"^Tested (\d+) GPUs:")
_VERDICT = re.compile(r"^GPU (\d+): (OK|FAULTY)\s*$")
_FAILURE = re.compile(r"Couldn't init a GPU test|Failure during compute|No clients are alive"
                      r"|No CUDA devices|^read\[\d+\] error|command not found", re.I)


def parse(text: str, exit_code: int | None, spec: SuiteSpec, gpu_model: str) -> SuiteResult:
    text, cut = bounded(text)
    model = ""
    rates: dict[int, float] = {}
    most: dict[int, int] = {}
    died: set[int] = set()
    verdicts: dict[int, str] = {}
    tested: int | None = None
    failures: list[str] = []
    progress = False
    for raw in text.replace("\r", "\n").splitlines():
        line = raw.strip()
        if m := _LISTED.match(line):
            model = model or m.group(2)
        elif m := _TESTED.match(line):
            tested = int(m.group(1))
        elif tested is not None and (m := _VERDICT.match(line)):
            verdicts[int(m.group(1))] = m.group(2)
        elif m := _PROGRESS.search(line):
            progress = True
            for gpu, (done, rate) in enumerate(_RATE.findall(m.group(1))):
                if int(done) >= 0:
                    rates[gpu] = float(rate)
            for gpu, (count, note) in enumerate(_ERRORS.findall(m.group(2))):
                most[gpu] = max(most.get(gpu, 0), int(count))
                if note == "(DIED!)" or int(count) < 0:
                    died.add(gpu)
        elif _FAILURE.search(line):
            failures.append(line)
    gpu_model = gpu_model or model
    if tested is None and not progress:
        why = (f"{TOOL} could not run: {' / '.join(failures[:3])}{exit_note(exit_code)}"
               if failures else unreadable(TOOL, text, exit_code))
        return build(spec.name, (), {}, why, gpu_model)

    gpus = sorted(set(verdicts) | set(rates) | set(most) | set(died))
    checks: list[Check] = []
    for gpu in gpus:
        errors, verdict = most.get(gpu, 0), verdicts.get(gpu)
        if gpu in died:
            checks.append(Check("burn_errors", Status.FAIL, gpu, detail="the GPU's burn died"))
        elif verdict == "FAULTY" or errors > 0:
            checks.append(Check("burn_errors", Status.FAIL, gpu, figure=float(errors),
                                unit="errors", detail="GEMM results differ: faulty"))
        elif verdict == "OK":
            checks.append(Check("burn_errors", Status.PASS, gpu, figure=0.0, unit="errors"))
        if gpu in rates and verdict is not None:
            checks.append(Check("gflops", Status.PASS, gpu, figure=rates[gpu], unit=UNIT,
                                detail="the last rate reported"))
    checks = list(judge(checks, spec, gpu_model, FIGURES))
    error = ""
    if tested is None:
        how = killed(exit_code) or "killed or crashed"
        error = f"the burn stopped before its summary ('Tested N GPUs:') ({how})"
    elif failures:
        error = f"{TOOL} reported: {' / '.join(failures[:3])}"
    elif len(verdicts) < tested:
        error = f"the summary names {len(verdicts)} of the {tested} GPUs tested"
    if cut:
        error = "; ".join(p for p in (error, "the output was over the size cap") if p)
    if exit_code and not error and not any(c.status is Status.FAIL for c in checks):
        error = f"{TOOL}{exit_note(exit_code)} though the output shows no failure"
    return build(spec.name, checks, {}, error, gpu_model)
