"""The `diagnostics` settings section: the suites and the gate (collectors.diagnostics.settings)
plus where they run and what the service needs to run them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from collectors.diagnostics.settings import DiagnosticsSettings
from service.diagnostics.local_site import LocalSiteConfig
from service.diagnostics.slurm_site import SlurmSiteConfig


class DiagnosticsServiceSettings(DiagnosticsSettings):
    """`gate: true` holds every release of a node gpuhealth drained until the suites of its
    failure class pass there. Off by default: a gate needs the tools on the nodes."""

    enabled: bool = False
    site: Literal["slurm", "local"] = "slurm"
    slurm: SlurmSiteConfig = SlurmSiteConfig()
    local: LocalSiteConfig = LocalSiteConfig()
    gpus_per_node: int = Field(default=8, ge=1, le=64)  # the suites' {gpus}
    # Node name pattern (fnmatch) -> GPU model, for the expected figures; none: the model the
    # tool itself prints (NCCL tests, nvbandwidth and gpu_burn name their devices).
    gpu_models: dict[str, str] = Field(default_factory=dict)
    max_concurrent: int = Field(default=4, ge=1, le=256)  # nodes tested at once
