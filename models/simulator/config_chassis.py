"""The chassis a BMC reports (issue 31): supplies, fans and the node's own sensors, the shapes of
the node-wide failure modes (M8-M13) and their benign look-alikes (docs/simulator.md,
`chassis`). Every number is a design choice unless a source is named."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChassisConfig(_Cfg):
    # Supplies: each delivering supply carries an equal share of the node's draw (GPUs plus the
    # rest of the server); line voltage of a 230 V feed.
    base_w: float = Field(default=1500.0, ge=0)  # CPUs, memory, NICs, fans, drives
    input_v: float = Field(default=230.0, gt=0)
    input_sd_v: float = Field(default=1.5, ge=0)
    psu_rise_c: float = Field(default=12.0, ge=0)  # supply over inlet at idle ...
    psu_load_rise_c: float = Field(default=0.006, ge=0)  # ... plus this per watt it delivers
    psu_temp_sd_c: float = Field(default=0.8, ge=0)
    # Fans: the BMC's fan curve between idle and full speed follows the node's load.
    fan_idle_rpm: float = Field(default=7000.0, gt=0)
    fan_load_rpm: float = Field(default=13000.0, gt=0)
    fan_max_rpm: float = Field(default=16000.0, gt=0)
    fan_sd_rpm: float = Field(default=120.0, ge=0)
    fan_lower_critical_rpm: float = Field(default=1800.0, ge=0)  # the BMC's LCR threshold
    exhaust_rise_c: float = Field(default=8.0, ge=0)  # exhaust over inlet at idle ...
    exhaust_load_rise_c: float = Field(default=14.0, ge=0)  # ... plus this at full load
    # M8: a failing supply runs hotter over its lead (a drying capacitor, a fan in the supply).
    psu_drift_c_min: float = Field(default=10.0, ge=0)
    psu_drift_c_max: float = Field(default=25.0, ge=0)
    # M9: a fan's speed falls to this share of its peers' by the end of the lead (bearing wear),
    # then the fan stalls (0 rpm) or crawls under its lower critical threshold.
    fan_decay_to_min: float = Field(default=0.35, gt=0, le=1)
    fan_decay_to_max: float = Field(default=0.6, gt=0, le=1)
    fan_decay_pieces: int = Field(default=12, ge=1)
    # M10: AER correctable errors per burst before the link trains narrower.
    aer_bursts_base: float = Field(default=4.0, ge=1)
    aer_bursts_per_h: float = Field(default=0.5, ge=0)
    aer_burst_median: float = Field(default=400.0, ge=1)
    aer_burst_min: float = Field(default=120.0, ge=1)
    # M11: the share of failures where the HCA's PCIe link narrows instead of the port's rate.
    nic_pcie_share: float = Field(default=0.1, ge=0, le=1)
    # Benign look-alikes.
    # A cold spare by design (an operator's cold-redundancy setting) for days at a time.
    psu_standby_per_node_year: float = Field(default=2.0, ge=0)
    psu_standby_min_days: float = Field(default=1.0, gt=0)
    psu_standby_max_days: float = Field(default=7.0, gt=0)
    fan_profile_per_node_day: float = Field(default=0.05, ge=0)  # BMC fan profile switched
    fan_profile_min_h: float = Field(default=1.0, gt=0)
    fan_profile_max_h: float = Field(default=24.0, gt=0)
    # A board that also narrows its link at idle (after a firmware or driver update), for days.
    pcie_idle_narrow_per_gpu_year: float = Field(default=0.3, ge=0)
    pcie_idle_narrow_min_days: float = Field(default=1.0, gt=0)
    pcie_idle_narrow_max_days: float = Field(default=7.0, gt=0)
    ib_renegotiate_per_port_year: float = Field(default=2.0, ge=0)  # trains low, recovers
    ib_renegotiate_min_s: float = Field(default=20.0, gt=0)
    ib_renegotiate_max_s: float = Field(default=180.0, gt=0)
