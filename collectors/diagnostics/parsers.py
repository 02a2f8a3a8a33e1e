"""The parsers a suite can name (`SuiteSpec.parser`): one per tool, registered here, explicit.

Each reads the tool's whole output (stdout, and stderr after it) with its exit status and
returns a SuiteResult; `figures` are the check names an operator may give an expected
minimum for (None: any check with a figure, as nvbandwidth's testcases)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from collectors.compat import dataclass
from collectors.diagnostics import dcgm, gpu_burn, nccl, nvbandwidth
from collectors.diagnostics.output import bounded
from collectors.diagnostics.result import SuiteResult
from collectors.plugins import Registry

if TYPE_CHECKING:
    from collectors.diagnostics.settings import SuiteSpec

ParseFn = Callable[[str, "int | None", "SuiteSpec", str], SuiteResult]


@dataclass(frozen=True, slots=True)
class Parser:
    name: str
    parse: ParseFn
    figures: frozenset[str] | None
    tool: str


PARSERS: Registry[Parser] = Registry("diagnostics parser")
PARSERS.register(Parser("dcgm_diag", dcgm.parse, dcgm.FIGURES, dcgm.TOOL))
PARSERS.register(Parser("nccl_tests", nccl.parse, nccl.FIGURES, nccl.TOOL))
PARSERS.register(Parser("nvbandwidth", nvbandwidth.parse, nvbandwidth.FIGURES, nvbandwidth.TOOL))
PARSERS.register(Parser("gpu_burn", gpu_burn.parse, gpu_burn.FIGURES, gpu_burn.TOOL))


def parse(text: str, exit_code: int | None, spec: SuiteSpec, gpu_model: str = "") -> SuiteResult:
    """The suite's result from its tool's output, read by the parser its settings name."""
    return PARSERS[spec.parser].parse(bounded(text)[0], exit_code, spec, gpu_model)
