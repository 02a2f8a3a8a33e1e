"""Holding measured figures to the expected minimum for the node's GPU model.

`spec.expected` maps a GPU model substring to check names and their expected minimum figure
({"H100": {"busbw_gbps": 350}}). A model matches when its key occurs in the node's GPU name
(case-insensitively); for each check the most specific matching key (the longest) wins, so
{"H100": ..., "H100 NVL": ...} gives an H100 NVL its own figures and every other H100 the first.
A figure below expected * (1 - tolerance) fails the check. A check with a figure but no
expected figure passes on the tool's own verdict alone, and says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Protocol

from collectors.diagnostics.result import Check, Status


class Expectations(Protocol):
    """The part of a suite's settings the verdict reads (settings.SuiteSpec)."""

    @property
    def expected(self) -> Mapping[str, Mapping[str, float]]: ...

    @property
    def tolerance(self) -> float: ...


def expected_figure(expected: Mapping[str, Mapping[str, float]], gpu_model: str,
                    check: str) -> tuple[str, float] | None:
    """The matching model key and its expected minimum for `check`, most specific first."""
    model = gpu_model.lower()
    hits = [(key, figures[check]) for key, figures in expected.items()
            if key and key.lower() in model and check in figures]
    if not model or not hits:
        return None
    return max(hits, key=lambda h: (len(h[0]), h[0]))


def judge(checks: Iterable[Check], spec: Expectations, gpu_model: str,
          figures: frozenset[str] | None = None) -> tuple[Check, ...]:
    """The checks with their expected figures applied. Only checks named in `figures` (all
    with a figure, when None) are held to an expected minimum."""
    out: list[Check] = []
    for c in checks:
        if c.figure is None or (figures is not None and c.name not in figures):
            out.append(c)
            continue
        hit = expected_figure(spec.expected, gpu_model, c.name)
        if hit is None:
            model = gpu_model or "an unknown GPU model"
            out.append(dataclasses.replace(c, detail=_join(
                c.detail, f"no expected figure for {model}")))
            continue
        _, want = hit
        floor = want * (1.0 - spec.tolerance)
        if c.status is Status.PASS and c.figure < floor:
            unit = f" {c.unit}" if c.unit else ""
            why = (f"{c.figure:g}{unit} is below the expected {want:g}{unit} for {gpu_model}"
                   f" (less {spec.tolerance:.0%} tolerance: {floor:.4g}{unit})")
            out.append(dataclasses.replace(c, status=Status.FAIL, expected=want,
                                           detail=_join(why, c.detail)))
        else:
            out.append(dataclasses.replace(c, expected=want))
    return tuple(out)


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)
