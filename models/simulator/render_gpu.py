"""GPU frame: load-driven gauges, thresholds, ECC/remap/PCIe counters, throttle states.

Util and power follow the job load linearly, temperature follows power through a first-order lag
(only at steps shorter than a minute; a coarse window's mean absorbs a 30-90 s lag), so a
coarse sample's gauges are the mean of the fine ones up to noise and clipping.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy.signal import lfilter

from collectors.catalog import CATALOG, Kind, Scope
from models.simulator.config import BASE_STEP_S, SimConfig
from models.simulator.plan import IDLE_WIDTH, LOAD, ROW, ScopePlan
from models.simulator.render_common import (
    F64,
    Window,
    apply_intervals,
    drop_random,
    fleet_limits,
    row_nan,
    stepped_counters,
)
from models.simulator.topology import Topology, rng_for

STREAM_STATIC = 400
COLUMNS = CATALOG.columns(Scope.GPU)
_PCIE_LANES, _PCIE_GEN = 16.0, 5.0  # an x16 Gen 5 link (H100 SXM)
COL = {m.name: i for i, m in enumerate(COLUMNS)}
COUNTERS = [i for i, m in enumerate(COLUMNS) if m.kind is Kind.COUNTER]
STATES = [m.name for m in COLUMNS if m.kind is Kind.STATE]
_THROTTLE_CLOCK = 0.5  # HW thermal slowdown cuts clocks by half or more (catalog)
_THROTTLE_POWER = 0.7  # design choice: power at half clock
_CLOCK_SATURATION = 1.25  # design choice: clocks reach boost at 80 % load
_DAY = 86400.0


class NoisePool:
    """Sensor noise cut from one pre-drawn block at random offsets: drawing fresh normals for
    every cell would dominate a fleet-year's render time (design choice)."""

    SIZE = 1 << 22

    def __init__(self, seed: int) -> None:
        self.pool = rng_for(seed, STREAM_STATIC, 1).standard_normal(self.SIZE, dtype=np.float32)

    def take(self, rng: np.random.Generator, shape: tuple[int, int]) -> npt.NDArray[np.float32]:
        n = shape[0] * shape[1]
        parts = []
        while n > 0:
            k = min(n, self.SIZE // 2)
            o = int(rng.integers(0, self.SIZE - k))
            parts.append(self.pool[o:o + k])
            n -= k
        return (parts[0] if len(parts) == 1 else np.concatenate(parts)).reshape(shape)


class GpuRenderer:
    def __init__(self, cfg: SimConfig, topo: Topology, sp: ScopePlan, noise: NoisePool) -> None:
        self.cfg, self.topo, self.sp, self.noise = cfg, topo, sp, noise
        s = cfg.signals
        e, g = topo.gpus, topo.gpus_per_node
        rng = rng_for(cfg.seed, STREAM_STATIC, 2)
        self.util_f = 1.0 + s.util_factor_sd * rng.standard_normal(e)
        self.power_f = 1.0 + s.power_factor_sd * rng.standard_normal(e)
        # Position in the node's airflow (Summit, Oles et al., ICS 2024): two rows of GPUs,
        # downstream warmer.
        slot = (np.arange(e) % g) % 4 / 3.0 if g >= 4 else np.zeros(e)
        self.temp_off = s.gpu_offset_sd_c * rng.standard_normal(e) + s.slot_gradient_c * slot
        self.hbm_off = s.hbm_offset_sd_c * rng.standard_normal(e)
        self.inlet_off = s.node_inlet_sd_c * rng.standard_normal(topo.nodes)
        self.state = {j: np.zeros(e) for j in COUNTERS}
        self.lag_gpu = np.zeros((1, e))
        self.lag_hbm = np.zeros((1, e))
        self.lag_started = False
        self.last_inlet = np.zeros((0, topo.nodes))

    def render(self, buf: F64, node_load: F64, win: Window, rng: np.random.Generator) -> None:
        cfg, spec, s = self.cfg, self.cfg.fleet.spec, self.cfg.signals
        t_n, e = len(win.times), self.topo.gpus
        buf3 = buf.reshape(len(COLUMNS), t_n, e)
        nf = 1.0 / math.sqrt(win.step / BASE_STEP_S)  # noise of a mean of step/5 samples
        ivs = self.sp.intervals

        load = np.repeat(node_load, self.topo.gpus_per_node, axis=1)
        apply_intervals(load, ivs.get(LOAD), win)
        util = buf3[COL["gpu_util"]]
        np.multiply(load, 100.0 * self.util_f, out=util)
        util += self.noise.take(rng, (t_n, e)) * (s.util_sd * nf)
        np.clip(util, 0.0, 100.0, out=util)

        frac = np.clip(load * self.power_f, 0.0, 1.1)
        x_gpu, x_hbm = self._lagged(frac, win)
        inlet = s.inlet_c + self.inlet_off[None, :] + s.diurnal_amp_c * np.cos(
            2 * np.pi * (win.times[:, None] % _DAY / 3600.0 - s.diurnal_peak_hour_utc) / 24.0)
        self.last_inlet = inlet  # [T, nodes]: the chassis renderer's inlet sensor reads it
        inlet = np.repeat(inlet, self.topo.gpus_per_node, axis=1)
        gt = buf3[COL["gpu_temp"]]
        np.add(inlet, spec.idle_rise_c + self.temp_off, out=gt)
        gt += spec.load_rise_c * x_gpu
        gt += self.noise.take(rng, (t_n, e)) * (s.temp_sd_c * nf)
        mt = buf3[COL["mem_temp"]]
        np.add(inlet, spec.hbm_idle_rise_c + self.hbm_off + 0.5 * self.temp_off, out=mt)
        mt += spec.hbm_load_rise_c * x_hbm
        mt += self.noise.take(rng, (t_n, e)) * (s.temp_sd_c * nf)
        apply_intervals(gt, ivs.get("gpu_temp"), win)
        apply_intervals(mt, ivs.get("mem_temp"), win)
        np.minimum(gt, spec.shutdown_c + 1.0, out=gt)
        np.minimum(mt, spec.mem_max_c + 5.0, out=mt)
        if win.step < s.round_temps_below_s:
            np.round(gt, out=gt)
            np.round(mt, out=mt)
        hot = (gt >= spec.slowdown_c) | (mt >= spec.mem_max_c)

        clock = buf3[COL["sm_clock"]]
        np.minimum(load * _CLOCK_SATURATION, 1.0, out=clock)
        clock *= spec.boost_mhz - spec.idle_mhz
        clock += spec.idle_mhz
        clock[hot] *= _THROTTLE_CLOCK
        apply_intervals(clock, ivs.get("sm_clock"), win)
        clock += self.noise.take(rng, (t_n, e)) * (s.clock_sd_mhz * nf)
        np.clip(clock, 0.0, spec.boost_mhz, out=clock)

        power = buf3[COL["power_draw"]]
        np.multiply(frac, spec.tdp_w - spec.idle_w, out=power)
        power += spec.idle_w
        power[hot] *= _THROTTLE_POWER
        apply_intervals(power, ivs.get("power_draw"), win)
        power += self.noise.take(rng, (t_n, e)) * (s.power_sd_w * nf)
        np.maximum(power, 0.0, out=power)

        buf3[COL["throttle_thermal"]] = hot
        buf3[COL["throttle_hw_slowdown"]] = hot
        buf3[COL["throttle_power"]] = power >= s.power_cap_frac * spec.tdp_w
        np.subtract(spec.tlimit_c, gt, out=buf3[COL["gpu_temp_margin"]])
        buf3[COL["gpu_slowdown_temp"]] = spec.slowdown_c
        buf3[COL["gpu_shutdown_temp"]] = spec.shutdown_c
        buf3[COL["mem_max_temp"]] = spec.mem_max_c

        stepped_counters(buf3, self.sp, COUNTERS, self.state, win)
        for name in STATES:
            if not name.startswith("throttle"):
                buf3[COL[name]] = 0.0
                apply_intervals(buf3[COL[name]], ivs.get(name), win)
        # PCIe link (catalog, issue 31): full width; the generation at its maximum under load
        # and lowered at idle, as GPUs do to save power (never a fault: models/detectors/hard.py).
        # Some boards narrow the width at idle too (trap pcie_idle_narrow: IDLE_WIDTH intervals
        # give the idle width).
        buf3[COL["pcie_link_width"]] = buf3[COL["pcie_link_width_max"]] = _PCIE_LANES
        buf3[COL["pcie_link_gen_max"]] = _PCIE_GEN
        idle = util < 1.0
        np.copyto(buf3[COL["pcie_link_gen"]], np.where(idle, 1.0, _PCIE_GEN))
        if IDLE_WIDTH in ivs:
            narrow = np.full((t_n, e), _PCIE_LANES)
            apply_intervals(narrow, ivs[IDLE_WIDTH], win)
            np.copyto(buf3[COL["pcie_link_width"]], narrow, where=idle)
        for name in ("pcie_link_width", "pcie_link_gen"):
            apply_intervals(buf3[COL[name]], ivs.get(name), win)
        if not cfg.fleet.page_retirement:
            for name in ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"):
                buf3[COL[name]] = np.nan
        fleet_limits(buf3, cfg.fleet, COL, COUNTERS)
        row_nan(buf3, ivs.get(ROW), win)
        drop_random(buf3, cfg.benign.missing_sample_frac if cfg.benign.enabled else 0.0, rng)

    def _lagged(self, frac: F64, win: Window) -> tuple[F64, F64]:
        """Thermal lag of core and HBM behind power (first-order, state kept across chunks)."""
        s = self.cfg.signals
        if win.step >= 60:
            return frac, frac
        if not self.lag_started:
            self.lag_gpu[0] = frac[0]
            self.lag_hbm[0] = frac[0]
            self.lag_started = True
        out = []
        for tau, zi in ((s.thermal_tau_gpu_s, self.lag_gpu), (s.thermal_tau_hbm_s, self.lag_hbm)):
            a = 1.0 - math.exp(-win.step / tau)
            y, _ = lfilter([a], [1.0, a - 1.0], frac, axis=0, zi=zi * (1.0 - a))
            zi[:] = y[-1:]
            out.append(np.asarray(y, dtype=np.float64))
        return out[0], out[1]
