"""Healthy behaviour and benign traps: workload, signal physics and false-positive generators
(docs/simulator.md, `workload`, `signals` and `benign`, with their sources). Benign rates are
never scaled by failures.rate_multiplier, so false-alarm rates measured on a dense scenario stay
at their real level."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkloadConfig(_Cfg):
    """Jobs that span whole nodes; all GPUs of a job move together (docs/simulator.md)."""

    # Design choice: a training cluster's mix of small and multi-node jobs.
    job_nodes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    job_weights: tuple[float, ...] = (0.30, 0.20, 0.15, 0.15, 0.10, 0.06, 0.04)
    job_hours_median: float = Field(default=8.0, gt=0)  # design choice
    job_hours_sigma: float = Field(default=1.0, gt=0)  # design choice
    job_hours_max: float = Field(default=168.0, gt=0)  # design choice
    queue_gap_mean_s: float = Field(default=600.0, gt=0)  # design choice: idle between jobs
    # A job that would leave nodes idle longer than this waiting for the rest shrinks to the
    # next smaller size (a scheduler's backfill, simplified). Design choice.
    max_wait_s: float = Field(default=1800.0, gt=0)
    util_min: float = Field(default=0.75, ge=0, le=1)  # design choice
    util_max: float = Field(default=0.98, ge=0, le=1)
    # Synchronized checkpoint dips (Llama 3: site power swings at checkpoints) of 10-120 s (a
    # design choice); period and depth are design choices.
    checkpoint_min_s: float = Field(default=1200.0, gt=0)
    checkpoint_max_s: float = Field(default=3600.0, gt=0)
    dip_min_s: float = Field(default=10.0, gt=0)
    dip_max_s: float = Field(default=120.0, gt=0)
    dip_level_min: float = Field(default=0.05, ge=0, le=1)
    dip_level_max: float = Field(default=0.3, ge=0, le=1)
    # Job-start transient (design choice): data loading at reduced load before the first step.
    warmup_min_s: float = Field(default=60.0, ge=0)
    warmup_max_s: float = Field(default=300.0, ge=0)
    warmup_level: float = Field(default=0.3, ge=0, le=1)
    ib_traffic_share: float = Field(default=0.3, ge=0, le=1)  # design choice: link use at full load

    @model_validator(mode="after")
    def _check(self) -> WorkloadConfig:
        if len(self.job_nodes) != len(self.job_weights) or not self.job_nodes:
            raise ValueError("job_nodes and job_weights must have the same non-zero length")
        if self.dip_max_s >= self.checkpoint_min_s:
            raise ValueError("checkpoint dips must be shorter than the checkpoint period")
        return self


class SignalConfig(_Cfg):
    """Temperature, power and noise (docs/simulator.md, `signals`)."""

    inlet_c: float = 24.0  # design choice
    node_inlet_sd_c: float = Field(default=1.5, ge=0)  # design choice
    gpu_offset_sd_c: float = Field(default=2.0, ge=0)  # design choice: per-device offsets
    hbm_offset_sd_c: float = Field(default=1.5, ge=0)  # design choice
    # Summit (Oles et al., ICS 2024): DBEs depend on position in the node's cooling path; GPUs
    # downstream run warmer by up to this much. Design choice.
    slot_gradient_c: float = Field(default=3.0, ge=0)
    diurnal_amp_c: float = Field(default=2.0, ge=0)  # ±1-3 °C (design), 24 h period (Llama 3)
    diurnal_peak_hour_utc: float = Field(default=15.0, ge=0, lt=24)  # design choice: mid-afternoon
    util_sd: float = Field(default=1.5, ge=0)  # design choice: 5-s noise (percent)
    power_sd_w: float = Field(default=6.0, ge=0)  # design choice
    temp_sd_c: float = Field(default=0.4, ge=0)  # design choice
    clock_sd_mhz: float = Field(default=10.0, ge=0)  # design choice
    util_factor_sd: float = Field(default=0.01, ge=0)  # design choice: per-GPU spread inside a job
    power_factor_sd: float = Field(default=0.04, ge=0)  # design choice
    thermal_tau_gpu_s: float = Field(default=30.0, gt=0)  # design choice: core lag behind power
    thermal_tau_hbm_s: float = Field(default=90.0, gt=0)  # design choice
    # SW power cap flag above this share of TDP
    power_cap_frac: float = Field(default=0.97, gt=0, le=1)
    round_temps_below_s: int = Field(default=10, ge=0)  # 1 °C sensor resolution at fine steps


class BenignConfig(_Cfg):
    """False-positive generators (docs/simulator.md, `benign`). Rates per GPU-year, node-year or
    node-day as named."""

    enabled: bool = True
    sbe_carrier_per_gpu_year: float = Field(default=0.05, ge=0)  # Zhu: about 5 % of GPUs show SBEs
    carrier_days_min: float = Field(default=7.0, gt=0)  # Zhu: most error GPUs active 1-3 weeks
    carrier_days_max: float = Field(default=21.0, gt=0)
    carrier_bursts_per_day_median: float = Field(default=0.5, gt=0)  # design choice
    # heavy tail of chatty GPUs (Titan, Tiwari et al., HPCA 2015)
    carrier_bursts_sigma: float = Field(default=1.5, ge=0)
    # design: GPUs with past SBEs at start
    history_sbe_frac: float = Field(default=0.03, ge=0, le=1)
    benign_remap_per_gpu_year: float = Field(default=0.1, ge=0)  # design choice (Delta remap MTBE)
    benign_remap_reset_median_h: float = Field(default=12.0, gt=0)  # design choice
    # design choice (Delta, Cui et al., SC'25: errors survived by replay)
    nvlink_blip_per_gpu_year: float = Field(default=1.0, ge=0)
    nvlink_blip_max: int = Field(default=10, ge=1)  # design choice: 1-10 counts
    # design choice (CorrOpt, Zhuo et al., SIGCOMM 2017)
    ib_corrupt_port_frac: float = Field(default=0.02, ge=0, le=1)
    ib_corrupt_ber_min: float = Field(default=1e-15, gt=0)  # design choice
    ib_corrupt_ber_max: float = Field(default=1e-13, gt=0)
    driver_reload_per_node_year: float = Field(default=1.0, ge=0)  # design choice
    driver_reload_min_s: float = Field(default=120.0, gt=0)
    driver_reload_max_s: float = Field(default=300.0, gt=0)
    planned_maint_per_16k_gpu_day: float = Field(default=1.0, ge=0)  # Llama 3 (arXiv 2407.21783)
    maint_min_s: float = Field(default=1800.0, gt=0)  # design choice
    maint_max_s: float = Field(default=5400.0, gt=0)
    missing_sample_frac: float = Field(default=0.005, ge=0, le=0.5)  # design choice in 0.1-1 %
    gap_per_node_day: float = Field(default=0.1, ge=0)  # design choice
    gap_min_s: float = Field(default=60.0, gt=0)  # design choice: 1-10 min gaps
    gap_max_s: float = Field(default=600.0, gt=0)
    clock_skew_per_node_day: float = Field(default=0.02, ge=0)  # design choice
    clock_skew_s: float = Field(default=5.0, ge=0)  # design choice: ±1 sample of 5 s
    clock_skew_median_h: float = Field(default=6.0, gt=0)  # design choice
    straggler_compute_per_gpu_day: float = Field(default=0.002, ge=0)  # GREYHOUND (ATC'25): < 2 %
    straggler_compute_median_s: float = Field(default=600.0, gt=0)  # about 10 min
    straggler_comm_per_node_day: float = Field(default=0.01, ge=0)  # design choice
    straggler_comm_median_s: float = Field(default=1440.0, gt=0)  # about 24 min
    straggler_sigma: float = Field(default=1.5, gt=0)  # design: tens of s to about 10 h (Falcon)
    straggler_min_s: float = Field(default=30.0, gt=0)
    straggler_max_s: float = Field(default=36000.0, gt=0)
    straggler_scale_min: float = Field(default=0.5, gt=0, le=1)  # design choice
    straggler_scale_max: float = Field(default=0.8, gt=0, le=1)
    # design (Xid 13/31/43 are software)
    software_xid_per_gpu_year: float = Field(default=2.0, ge=0)
    # lemon nodes (Kokolis et al., HPCA 2025): 1-2 % of nodes
    lemon_node_frac: float = Field(default=0.015, ge=0, le=1)
    lemon_multiplier_min: float = Field(default=3.0, ge=1)  # 3-5x M1-M3 rate (SuperBench, ATC'24)
    lemon_multiplier_max: float = Field(default=5.0, ge=1)
