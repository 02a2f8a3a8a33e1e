"""The `diagnostics` settings: the suites (a command line, the parser of its output, a time
limit and the expected figures per GPU model) and the return-to-service gate (which suites a
node drained for a failure class must pass before it is released).

Nothing is wired to one cluster: the defaults below are NVIDIA's tools with their usual
arguments and conservative floors for the common 8-GPU HGX boards, meant to be replaced by
the figures measured on a known-good node of the fleet. The service composes this model into
its settings tree; errors read as every settings error does (`collectors.plugins`'s
`field_errors`: `diagnostics.suites.nccl.parser: ...`).
"""

from __future__ import annotations

import math
import re
import string
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from collectors.diagnostics.parsers import PARSERS
from collectors.plugins import field_errors

PLACEHOLDERS = ("gpus",)  # {gpus}: the node's GPU count
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


def _safe_name(v: str, what: str) -> str:
    if not _NAME.match(v):
        raise ValueError(f"{what} {v!r} is not a safe name (lowercase letters, digits and _, "
                         "starting with a letter, at most 63)")
    return v


class SuiteSpec(BaseModel):
    """One diagnostic suite. `expected`: GPU model substring -> check name -> expected minimum
    figure ({"H100": {"busbw_gbps": 350}}); a figure below expected * (1 - tolerance) fails."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    command: list[str] = Field(min_length=1)  # argv, no shell; {gpus} is the GPU count
    parser: str
    timeout_s: float = Field(gt=0, le=86400)
    expected: dict[str, dict[str, float]] = Field(default_factory=dict)
    tolerance: float = Field(default=0.1, ge=0, lt=1)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _safe_name(v, "suite name")

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if not v[0].strip():
            raise ValueError("the program (the first word) is empty")
        for i, arg in enumerate(v):
            if "\x00" in arg:
                raise ValueError(f"word {i} holds a NUL byte")
            try:
                fields = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
            except ValueError:
                raise ValueError(f"word {i} has an unmatched brace (write {{{{ or }}}} for a "
                                 "literal one)") from None
            unknown = sorted({f for f in fields if f not in PLACEHOLDERS})
            if unknown:
                raise ValueError(f"word {i}: unknown placeholder {{{unknown[0]}}} (known: "
                                 + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS) + ")")
        return v

    @field_validator("parser")
    @classmethod
    def _parser(cls, v: str) -> str:
        if v not in PARSERS:
            raise ValueError(PARSERS.unknown(v))
        return v

    @field_validator("expected")
    @classmethod
    def _figures(cls, v: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        for model, figures in v.items():
            if not model.strip():
                raise ValueError("a GPU model key is empty (a substring of the GPU's name, "
                                 "like 'H100')")
            for check, figure in figures.items():
                if not math.isfinite(figure) or figure < 0:
                    raise ValueError(f"{model}.{check}: the expected minimum must be a finite "
                                     "number >= 0")
        return v

    @model_validator(mode="after")
    def _known_checks(self) -> SuiteSpec:
        figures = PARSERS[self.parser].figures
        for model, checks in self.expected.items():
            for check in checks:
                if figures is None:
                    ok = bool(re.match(r"^[a-z0-9_]+$", check))
                    known = "a check name of lowercase letters, digits and _"
                else:
                    ok = check in figures
                    known = ", ".join(sorted(figures)) or "none: it judges its own tests"
                if not ok:
                    raise ValueError(f"expected.{model}.{check}: not a figure the "
                                     f"{self.parser} parser reports ({known})")
        return self

    def argv(self, gpus: int) -> list[str]:
        """The command with its placeholders filled in."""
        return [arg.format(gpus=gpus) for arg in self.command]


def _default_suites() -> dict[str, SuiteSpec]:
    # Floors, not typical figures: on healthy 8-GPU boards all_reduce_perf's bus bandwidth at
    # 8 GB is about 230 GB/s (A100 SXM, NVLink 3) and 450-480 GB/s (H100/H200 SXM, NVLink 4),
    # host copies run near PCIe's 25 GB/s (Gen4 x16) and 55 GB/s (Gen5 x16).
    hgx = {"A100-SXM4": {"busbw_gbps": 200.0}, "H100 80GB HBM3": {"busbw_gbps": 400.0},
           "H200": {"busbw_gbps": 400.0}}
    copies = {"A100-SXM4": {"host_to_device_memcpy_ce": 20.0, "device_to_host_memcpy_ce": 20.0,
                            "device_to_device_memcpy_read_ce": 200.0},
              "H100 80GB HBM3": {"host_to_device_memcpy_ce": 40.0,
                                 "device_to_host_memcpy_ce": 40.0,
                                 "device_to_device_memcpy_read_ce": 300.0}}
    nccl = ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "{gpus}"]
    specs = [
        SuiteSpec(name="dcgm_r2", command=["dcgmi", "diag", "-r", "2", "-j"],
                  parser="dcgm_diag", timeout_s=900),
        SuiteSpec(name="dcgm_r3", command=["dcgmi", "diag", "-r", "3", "-j"],
                  parser="dcgm_diag", timeout_s=3600),
        SuiteSpec(name="nccl_allreduce", command=nccl, parser="nccl_tests", timeout_s=1200,
                  expected=hgx),
        # The node's own network path: with NVLink/PCIe peer copies and shared memory off,
        # NCCL moves every byte through the HCAs. Its figures depend on the fabric: none.
        SuiteSpec(name="nccl_allreduce_net",
                  command=["env", "NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", *nccl],
                  parser="nccl_tests", timeout_s=1800),
        SuiteSpec(name="nvbandwidth",
                  command=["nvbandwidth", "-t", "host_to_device_memcpy_ce",
                           "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce"],
                  parser="nvbandwidth", timeout_s=1200, expected=copies),
        SuiteSpec(name="gpu_burn", command=["gpu_burn", "300"], parser="gpu_burn",
                  timeout_s=600),
    ]
    return {s.name: s for s in specs}


def _default_gate() -> dict[str, list[str]]:
    return {"memory": ["dcgm_r3"], "nvlink": ["nccl_allreduce", "nvbandwidth"],
            "network": ["nccl_allreduce_net"], "default": ["dcgm_r2"]}


class DiagnosticsSettings(BaseModel):
    """Suites by name, and the gate: failure class -> the suites a node must pass before it is
    released ("default" for any class not listed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    suites: dict[str, SuiteSpec] = Field(default_factory=_default_suites)
    gate: dict[str, list[str]] = Field(default_factory=_default_gate)

    @model_validator(mode="before")
    @classmethod
    def _names_from_keys(cls, data: Any) -> Any:
        # A suite's name is its key; writing it again is allowed but must agree.
        if isinstance(data, dict) and isinstance(data.get("suites"), dict):
            suites = {}
            for key, spec in data["suites"].items():
                if isinstance(spec, dict):
                    if "name" in spec and spec["name"] != key:
                        raise ValueError(f"suites.{key}: its name {spec['name']!r} differs "
                                         "from its key")
                    spec = {**spec, "name": key}
                suites[key] = spec
            data = {**data, "suites": suites}
        return data

    @model_validator(mode="after")
    def _gate_known(self) -> DiagnosticsSettings:
        for key in self.suites:
            _safe_name(key, "suite name")
        if "default" not in self.gate:
            raise ValueError("gate: no 'default' entry (the suites for a failure class not "
                             "listed)")
        for cls_, names in self.gate.items():
            _safe_name(cls_, "gate failure class")
            if not names:
                raise ValueError(f"gate.{cls_}: no suite (a node would be released untested)")
            unknown = [n for n in names if n not in self.suites]
            if unknown:
                raise ValueError(f"gate.{cls_}: unknown suite {unknown[0]!r} (known: "
                                 f"{', '.join(sorted(self.suites))})")
        return self

    def gate_for(self, failure_class: str) -> list[SuiteSpec]:
        """The suites a node drained for this failure class must pass."""
        names = self.gate.get(failure_class, self.gate["default"])
        return [self.suites[n] for n in names]


def load(data: dict[str, Any]) -> DiagnosticsSettings:
    """The section from a mapping; ValueError with each bad field on its own line, worded
    as the settings' errors are."""
    try:
        return DiagnosticsSettings.model_validate(data)
    except ValidationError as exc:
        lines = field_errors(exc, "(diagnostics)")
        raise ValueError("invalid diagnostics settings:\n"
                         + "\n".join(f"  diagnostics.{ln}" for ln in lines)) from None
