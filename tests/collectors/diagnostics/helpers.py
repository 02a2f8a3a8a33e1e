"""Shared by the diagnostics tests: the default suites, and a capture run through its parser."""

from __future__ import annotations

from pathlib import Path

from collectors.diagnostics.parsers import parse
from collectors.diagnostics.result import Check, SuiteResult
from collectors.diagnostics.settings import DiagnosticsSettings, SuiteSpec
from tests.collectors.own_captures import read

SUITES = DiagnosticsSettings().suites


def run(capture: Path | str, suite: str, exit_code: int | None = 0,
        gpu_model: str = "") -> SuiteResult:
    text = read(capture) if isinstance(capture, Path) else capture
    return parse(text, exit_code, SUITES[suite], gpu_model)


def with_expected(suite: str, expected: dict[str, dict[str, float]],
                  tolerance: float = 0.1) -> SuiteSpec:
    return SUITES[suite].model_copy(update={"expected": expected, "tolerance": tolerance})


def named(result: SuiteResult, name: str, gpu: int | None = None) -> list[Check]:
    return [c for c in result.checks if c.name == name and (gpu is None or c.gpu == gpu)]
