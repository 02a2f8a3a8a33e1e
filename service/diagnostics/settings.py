"""The `diagnostics` settings section: the suites and the gate (collectors.diagnostics.settings)
plus where they run and what the service needs to run them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from collectors.diagnostics.settings import DiagnosticsSettings
from service.diagnostics.kubernetes_site import KubernetesSiteConfig
from service.diagnostics.local_site import LocalSiteConfig
from service.diagnostics.offenders import OffenderSettings
from service.diagnostics.slurm_site import SlurmSiteConfig


class SweepSettings(BaseModel):
    """Sweeps of idle nodes (service/diagnostics/sweep.py). Off by default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    suite: str = "dcgm_r2"  # a name in diagnostics.suites
    every_days: float = Field(default=14.0, gt=0, le=3650)  # each node tested about this often
    max_share: float = Field(default=0.05, gt=0, le=1)  # of the fleet under test at once
    interval_s: float = Field(default=300.0, ge=5, le=86400)  # how often a pass looks
    retry_after_s: float = Field(default=6 * 3600.0, ge=60)  # after the site turned a node away


class DiagnosticsServiceSettings(DiagnosticsSettings):
    """`enabled: true` holds every release of a node gpuhealth drained until the suites of
    its failure class pass there, and lets `sweep` test idle nodes. Off by default: both need
    the tools on the nodes."""

    enabled: bool = False
    site: Literal["slurm", "kubernetes", "local"] = "slurm"
    slurm: SlurmSiteConfig = SlurmSiteConfig()
    kubernetes: KubernetesSiteConfig = KubernetesSiteConfig()
    local: LocalSiteConfig = LocalSiteConfig()
    gpus_per_node: int = Field(default=8, ge=1, le=64)  # the suites' {gpus}
    # Node name pattern (fnmatch) -> GPU model, for the expected figures; none: the model the
    # tool itself prints (NCCL tests, nvbandwidth and gpu_burn name their devices).
    gpu_models: dict[str, str] = Field(default_factory=dict)
    max_concurrent: int = Field(default=4, ge=1, le=256)  # nodes tested at once
    sweep: SweepSettings = SweepSettings()
    offenders: OffenderSettings = OffenderSettings()  # when a node needs replacing instead

    @model_validator(mode="after")
    def _sweep_suite(self) -> DiagnosticsServiceSettings:
        if self.sweep.enabled and self.sweep.suite not in self.suites:
            raise ValueError(f"sweep.suite: unknown suite {self.sweep.suite!r} (known: "
                             f"{', '.join(sorted(self.suites))})")
        return self
