"""What one diagnostic suite said about one node: pass, fail (with the failing checks and their
figures) or error (the test could not run, or its output cannot be read, with why).

A suite FAILs when any check fails, even when its output stops early (a partial output that
already shows wrong values is a failure, not a doubt); it is an ERROR when the tool did not
finish or answered with an error and no check failed; it PASSes only when every check passed
and nothing is amiss. Results travel as plain JSON dicts (`to_dict`/`from_dict`) to be stored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any

from collectors.compat import StrEnum, dataclass


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Check:
    """One thing a suite checked: a test on one GPU (`gpu`) or on the node (`gpu` None), with
    the figure it measured and the expected minimum it was held to, when there is one."""

    name: str  # "memory" (DCGM), "busbw_gbps" (NCCL), "host_to_device_memcpy_ce" (nvbandwidth)
    status: Status
    gpu: int | None = None
    figure: float | None = None
    expected: float | None = None
    unit: str = ""
    detail: str = ""  # the tool's own words, or why the figure fails


@dataclass(frozen=True, slots=True)
class SuiteResult:
    suite: str
    status: Status
    checks: tuple[Check, ...]
    versions: Mapping[str, str] = field(default_factory=dict)  # "driver", "dcgm", "nccl", ...
    error: str = ""  # why it could not run or be read, in an operator's words
    gpu_model: str = ""  # the model whose expected figures were applied ("" unknown)


def failing(result: SuiteResult) -> tuple[Check, ...]:
    return tuple(c for c in result.checks if c.status is Status.FAIL)


def build(suite: str, checks: Iterable[Check], versions: Mapping[str, str] | None = None,
          error: str = "", gpu_model: str = "") -> SuiteResult:
    """The result of these checks: FAIL if any failed, else ERROR if a check could not be
    made or `error` says why the run is incomplete, else PASS. No check at all is an ERROR."""
    got = tuple(checks)
    if not got and not error:
        error = "the output holds no result"
    if any(c.status is Status.FAIL for c in got):
        status = Status.FAIL
    elif error or any(c.status is Status.ERROR for c in got):
        status = Status.ERROR
        if not error:
            error = "; ".join(f"{describe(c)}" for c in got if c.status is Status.ERROR)
    else:
        status = Status.PASS
    return SuiteResult(suite, status, got, dict(versions or {}), error, gpu_model)


def describe(check: Check) -> str:
    """One line for an alert or an audit entry: `memory on GPU 2: fail (...)`."""
    where = f" on GPU {check.gpu}" if check.gpu is not None else ""
    figure = ""
    if check.figure is not None:
        figure = f" {check.figure:g}{' ' + check.unit if check.unit else ''}"
        if check.expected is not None:
            figure += f" (expected {check.expected:g})"
    detail = f": {check.detail}" if check.detail else ""
    return f"{check.name}{where}: {check.status.value}{figure}{detail}"


def to_dict(result: SuiteResult) -> dict[str, Any]:
    """A JSON-ready dict (no NaN or infinity: JSON has none)."""
    return {
        "suite": result.suite,
        "status": result.status.value,
        "error": result.error,
        "gpu_model": result.gpu_model,
        "versions": dict(result.versions),
        "checks": [{"name": c.name, "status": c.status.value, "gpu": c.gpu,
                    "figure": _finite(c.figure), "expected": _finite(c.expected),
                    "unit": c.unit, "detail": c.detail} for c in result.checks],
    }


def from_dict(data: Mapping[str, Any]) -> SuiteResult:
    """The result `to_dict` wrote; ValueError naming the first field that is wrong."""
    try:
        checks = tuple(_check(c) for c in _list(data, "checks"))
        versions = data.get("versions") or {}
        if not isinstance(versions, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in versions.items()):
            raise ValueError("versions: not a mapping of strings")
        return SuiteResult(suite=_str(data, "suite", required=True),
                           status=Status(_str(data, "status", required=True)),
                           checks=checks, versions=dict(versions),
                           error=_str(data, "error"), gpu_model=_str(data, "gpu_model"))
    except (TypeError, KeyError) as exc:
        raise ValueError(f"not a stored diagnostic result: {exc}") from None


def _check(c: Any) -> Check:
    if not isinstance(c, Mapping):
        raise ValueError("checks: an entry is not a mapping")
    gpu = c.get("gpu")
    if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool)):
        raise ValueError("checks.gpu: not an integer")
    return Check(name=_str(c, "name", required=True), status=Status(_str(c, "status",
                                                                         required=True)),
                 gpu=gpu, figure=_number(c, "figure"), expected=_number(c, "expected"),
                 unit=_str(c, "unit"), detail=_str(c, "detail"))


def _str(d: Mapping[str, Any], key: str, required: bool = False) -> str:
    v = d.get(key, None if required else "")
    if not isinstance(v, str):
        raise ValueError(f"{key}: not a string")
    return v


def _number(d: Mapping[str, Any], key: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{key}: not a finite number")
    return float(v)


def _list(d: Mapping[str, Any], key: str) -> list[Any]:
    v = d.get(key, [])
    if not isinstance(v, list):
        raise ValueError(f"{key}: not a list")
    return v


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None
