"""The active-only faults (issue 32): how a latent fault shows once a job runs on it, how often
one run of the diagnostic suite finds it, and the diagnostics policy (return-to-service gates,
sweeps of idle nodes) the evaluation scores (docs/simulator.md, "Active-only modes"). Every
number is a design choice unless a source is named; their rates are in ModeRates."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from models.simulator.modes import Mode


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LatentShape(_Cfg):
    # Hours of job load on the faulty node until a job fails on it (exponential with this
    # mean): a slow P2P path makes the jobs that lean on it stragglers until one is stopped
    # (about a day), a marginal GPU fails only under some workloads (days), corrupted results
    # are noticed late (a loss spike, a NaN, a checksum: a week). The fault log's operators
    # found these classes with tests, so they stay latent long enough for one.
    show_load_h: float = Field(gt=0)
    # The chance that one run of the diagnostic suite (DCGM diag level 3, a short burn, the
    # NCCL tests, nvbandwidth) finds the fault; each run draws anew.
    detect: float = Field(ge=0, le=1)
    # What a job that hits it loses: the work since its last checkpoint ("checkpoint"), or,
    # for corrupted results, since the last checkpoint before the fault first touched the job
    # ("exposure").
    rollback: Literal["checkpoint", "exposure"] = "checkpoint"


class ActiveConfig(_Cfg):
    # nvbandwidth measures every GPU pair's copy bandwidth against the expected figure and the
    # NCCL tests the bus bandwidth: a low P2P path is what they measure.
    M14_p2p_bw: LatentShape = LatentShape(show_load_h=24.0, detect=0.95)
    # The log's "stress test failure" class is by definition what a stress test found, but a
    # marginal part fails some runs and passes others.
    M15_stress: LatentShape = LatentShape(show_load_h=72.0, detect=0.8)
    # Silent corruption shows on a few inputs only: a short test run finds a fraction (fleet
    # SDC studies find many only after repeated runs).
    M16_sdc: LatentShape = LatentShape(show_load_h=168.0, detect=0.3, rollback="exposure")
    # The policy. Gates: a drained node (a failure's repair, a planned maintenance) runs the
    # suite before it is released.
    gates: bool = True
    # Sweeps: each node is due every this many days (None: no sweeps), tested at the first idle
    # gap (no job, not down) long enough for the suite, never more than `sweep_max_share` of the
    # fleet at once; a sweep never delays a job.
    sweep_every_days: float | None = Field(default=14.0, gt=0)
    sweep_max_share: float = Field(default=0.05, gt=0, le=1)
    sweep_test_min: float = Field(default=30.0, gt=0)  # DCGM level 3 plus NCCL and nvbandwidth
    # After a job fails on a latent fault nothing in the telemetry names the node: finding it
    # among the job's nodes and testing it takes this long before the repair starts.
    diagnose_h: float = Field(default=4.0, ge=0)

    def of(self, mode: Mode) -> LatentShape:
        shape: LatentShape = getattr(self, mode.value)
        return shape
