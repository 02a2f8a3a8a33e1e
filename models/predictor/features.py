"""Hourly features for the failure predictor, read from the window store's hour buckets.

One function per scope turns the last T finished hours of every entity into [entity, T, F]:
per-hour values (gauge means and peaks, counter increases on a log scale, states), values
relative to the entity's peers on the same node in the same hour (Falcon, arXiv 2609.34473;
Liu et al., SYSTOR 2023: the wins came from peer-relative and missingness-aware features),
missingness flags, and the entity against its own last days (long_memory.py: its usual error
rate, remaps, temperature offset, days since each error group was active). Each hour's features
depend only on that hour and what had finished before it, so the dataset builder (one hour at a
time while a trace replays) and the live detector (T hours at once) compute the same numbers
from the same store.

A GPU's features include its NVLink links (the worst link per hour, and the shares of its links
down and with errors, so that 4 and 18 links per GPU read alike): NVLink failures are predicted
on the GPU and then placed on its worst link.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.view import FleetView, ScopeView
from models.predictor.long_memory import DailyHistory, usual_log_rate

F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    group: str  # what an explanation names: occlusion removes a whole group at once
    activity: bool = False  # an error count or fault state: > 0 means the group was active


def _f(group: str, *names: str, activity: bool = False) -> list[Feature]:
    return [Feature(n, group, activity) for n in names]


# GPU counters read as log1p(increase in the hour); states as the hour's maximum.
GPU_COUNTERS = {
    "ecc_sbe_volatile": "ECC", "ecc_dbe_volatile": "ECC", "ecc_sram_correctable": "SRAM",
    "retired_pages_sbe": "HBM remap", "retired_pages_dbe": "HBM remap",
    "remapped_rows_correctable": "HBM remap", "remapped_rows_uncorrectable": "HBM remap",
    "pcie_replay": "PCIe",
}
GPU_STATES = {
    "retired_pages_pending": "HBM remap", "remapped_rows_pending": "HBM remap",
    "remapped_rows_failure": "HBM remap", "throttle_thermal": "thermal",
    "throttle_power": "power", "throttle_hw_slowdown": "thermal",
}
NVLINK_COUNTERS = ("nvlink_crc_flit", "nvlink_crc_data", "nvlink_replay", "nvlink_recovery")
IB_COUNTERS = {
    "ib_symbol_error": "IB errors", "ib_link_error_recovery": "IB link", "ib_link_downed":
    "IB link", "ib_port_rcv_errors": "IB errors", "ib_local_link_integrity_errors": "IB errors",
    "ib_excessive_buffer_overrun_errors": "IB errors", "ib_link_flaps": "IB link",
}
# Groups whose "days since last active" (within the long memory) is a feature of its own.
GPU_RECENCY = ("ECC", "HBM remap", "PCIe")
IB_RECENCY = ("IB errors", "IB link")


def _recency(groups: tuple[str, ...]) -> list[Feature]:
    return [Feature(f"days_since_{g.lower().replace(' ', '_')}", g) for g in groups]


GPU_FEATURES: tuple[Feature, ...] = tuple(
    _f("thermal", "gpu_temp", "gpu_temp_peak", "gpu_temp_vs_peers", "mem_temp",
       "mem_temp_peak", "mem_temp_vs_peers", "temp_margin_low")
    + _f("power", "power_draw_vs_peers", "sm_clock_vs_peers", "gpu_util")
    + [Feature(n, g, True) for n, g in GPU_COUNTERS.items()]
    + [Feature(n, g, g == "HBM remap") for n, g in GPU_STATES.items()]
    # Per link, whatever the generation's link count: the worst link, and shares of links.
    + _f("NVLink", "nvlink_errors_worst", "nvlink_replay_worst", "nvlink_recovery_worst",
         "nvlink_down_share", "nvlink_error_share", activity=True)
    + _f("missing", "missing_gpu", "missing_nvlink")
    # Long memory (models/predictor/long_memory.py): the GPU against its own usual.
    + _f("ECC", "ecc_sbe_usual", "ecc_sbe_vs_usual")
    + _f("HBM remap", "remaps_recent")
    + _f("thermal", "gpu_temp_vs_usual", "mem_temp_vs_usual")
    + _f("history", "days_known")
    + _recency(GPU_RECENCY)
)
IB_FEATURES: tuple[Feature, ...] = tuple(
    [Feature(n, g, True) for n, g in IB_COUNTERS.items()]
    + _f("IB errors", "ib_ber_log10", "ib_symbol_error_vs_peers")
    + _f("IB link", "ib_state_low", "ib_rate_vs_peers")
    + _f("load", "ib_traffic")
    + _f("missing", "missing_ib")
    + _f("IB errors", "ib_symbol_usual", "ib_symbol_vs_usual", "ib_ber_vs_usual")
    + _f("history", "days_known")
    + _recency(IB_RECENCY)
)
FEATURES: dict[Scope, tuple[Feature, ...]] = {Scope.GPU: GPU_FEATURES,
                                               Scope.IB_PORT: IB_FEATURES}


class HourlyUnavailable(ValueError):
    """The store keeps no hour buckets at this sample step (the detector says so and rests)."""


@dataclass(frozen=True, slots=True)
class Hours:
    """Where a scope's hour buckets are: a rollup tier, or the raw ring at a 1-h step."""

    tier: str | None
    last: int  # index of the newest finished hour (-1: none yet)
    length: int  # how many hours the store keeps


def hours_of(view: ScopeView) -> Hours:
    if abs(view.step_s - HOUR) < 1e-9:
        return Hours(None, view.head, view.raw_length)
    for t in view.tier_specs:
        if abs(t.step_s - HOUR) < 1e-9:
            return Hours(t.name, view.finished(t.name), t.length)
    raise HourlyUnavailable(f"no hourly buckets at a {view.step_s:g}-s step "
                            f"(tiers: {', '.join(t.name for t in view.tier_specs) or 'none'})")


def _window(view: ScopeView, h: Hours, metric: str, n: int, stat: str = "agg") -> F32:
    return view.window(metric, n, tier=h.tier, stat=stat)


def _log_count(x: F32) -> F32:
    """Counter increases on a log scale; a negative (a reset ingest missed) reads as zero."""
    out: F32 = np.log1p(np.clip(x, 0.0, None))
    return out


def _peer_delta(x: F32, node_of: I32) -> F32:
    """x minus the median of the same node's entities in the same hour (NaN-aware)."""
    e, t = x.shape
    if e == 0:
        return x.copy()
    order = np.argsort(node_of, kind="stable")
    nodes = node_of[order]
    starts = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]])
    rank = np.arange(e) - np.repeat(starts, np.diff(np.r_[starts, e]))
    dense = np.full((len(starts), int(rank.max()) + 1, t), np.nan, np.float32)
    group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, e]))
    dense[group, rank] = x[order]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN node hours stay NaN
        med = np.nanmedian(dense, axis=1)
    out = np.empty_like(x)
    out[order] = x[order] - med[group]
    return out


class _LinkGroups:
    """Each GPU's links as contiguous runs of a sorted order, so per-GPU reductions are one
    `reduceat` (ufunc.at over 180,000 links was most of the feature time at 10,000 GPUs)."""

    def __init__(self, gpu_of: I32, n_gpus: int) -> None:
        ok = np.flatnonzero((gpu_of >= 0) & (gpu_of < n_gpus))
        self.order = ok[np.argsort(gpu_of[ok], kind="stable")]
        owners = gpu_of[self.order]
        self.starts = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]]) if len(owners) \
            else np.zeros(0, np.intp)
        self.gpus = owners[self.starts]
        self.n_gpus = n_gpus

    def reduce(self, ufunc: np.ufunc, x: F32, empty: float) -> F32:
        out = np.full((self.n_gpus, x.shape[1]), empty, np.float32)
        if len(self.order):
            out[self.gpus] = ufunc.reduceat(x[self.order], self.starts, axis=0)
        return out


def _missing(cols: Sequence[F32]) -> F32:
    stacked = np.stack(cols)
    out: F32 = np.isnan(stacked).mean(axis=0).astype(np.float32)
    return out


# What the hourly features read of each scope's hour buckets, as (metric, stat): the hour tier
# the service stores (service/history/influx/hour_tier.py) keeps exactly these, so features
# built from it (models/predictor/hour_table.py) read what the live store gives.
GPU_INPUTS: tuple[tuple[str, str], ...] = (
    ("gpu_temp", "agg"), ("gpu_temp", "hi"), ("mem_temp", "agg"), ("mem_temp", "hi"),
    ("gpu_temp_margin", "lo"), ("power_draw", "agg"), ("sm_clock", "agg"), ("gpu_util", "agg"),
    *((m, "agg") for m in GPU_COUNTERS), *((m, "agg") for m in GPU_STATES))
IB_INPUTS: tuple[tuple[str, str], ...] = (
    *((m, "agg") for m in IB_COUNTERS), ("ib_ber", "agg"), ("ib_state", "agg"),
    ("ib_rate", "agg"), ("ib_port_xmit_data", "agg"), ("ib_port_rcv_data", "agg"))
INPUTS: dict[Scope, tuple[tuple[str, str], ...]] = {Scope.GPU: GPU_INPUTS,
                                                     Scope.IB_PORT: IB_INPUTS}
# A GPU's NVLink links reduced to the GPU, per hour (the link features and missing_nvlink): the
# hour tier stores these per GPU, not 18 rows per GPU.
LINK_COLUMNS = ("nvlink_errors_worst", "nvlink_replay_worst", "nvlink_recovery_worst",
                "nvlink_down_share", "nvlink_error_share", "missing_nvlink")


def link_hours(fleet: FleetView, g: int, n: int) -> list[F32]:
    """Per GPU (the first g of the GPU scope) and hour, its links reduced as LINK_COLUMNS."""
    nv = fleet.scope(Scope.NVLINK)
    lk = len(nv)
    if not lk:
        return [*(np.full((g, n), np.nan, np.float32) for _ in range(5)),
                np.zeros((g, n), np.float32)]  # a GPU without NVLink misses nothing
    gpu_of = np.asarray(nv.gpu_of[:lk])
    hn = hours_of(nv)

    def nw(m: str) -> F32:
        return _window(nv, hn, m, n)

    links = _LinkGroups(gpu_of, g)
    crc = _log_count(nw("nvlink_crc_flit") + np.nan_to_num(nw("nvlink_crc_data")))
    # fmax: the worst link, NaN only where every link of the GPU is NaN.
    out = [links.reduce(np.fmax, crc, np.nan),
           links.reduce(np.fmax, _log_count(nw("nvlink_replay")), np.nan),
           links.reduce(np.fmax, _log_count(nw("nvlink_recovery")), np.nan)]
    state = nw("nvlink_state")
    present = links.reduce(np.add, (~np.isnan(state)).astype(np.float32), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        down = links.reduce(np.add, (state < 1).astype(np.float32), 0.0)
        erring = (crc > 0) | (nw("nvlink_replay") > 0) | (nw("nvlink_recovery") > 0)
        errs = links.reduce(np.add, erring.astype(np.float32), 0.0)
        out += [np.where(present > 0, down / present, np.nan).astype(np.float32),
                np.where(present > 0, errs / present, np.nan).astype(np.float32)]
    out.append(np.where(present > 0, 0.0, 1.0).astype(np.float32))
    return out


def gpu_hours(fleet: FleetView, n: int, links: list[F32] | None = None) -> F32:
    """[gpu, n, per-hour GPU features]. `links`: the GPUs' LINK_COLUMNS when they were reduced
    already (the stored hour tier), else reduced here from the NVLink scope."""
    v = fleet.scope(Scope.GPU)
    h = hours_of(v)
    g = len(v)
    node_of = np.asarray(v.node_of[:g])
    def w(m: str, stat: str = "agg") -> F32:
        return _window(v, h, m, n, stat)

    temp, mem = w("gpu_temp"), w("mem_temp")
    temp_pk, mem_pk = w("gpu_temp", "hi"), w("mem_temp", "hi")
    margin = w("gpu_temp_margin", "lo")
    power, clock, util = w("power_draw"), w("sm_clock"), w("gpu_util")
    cols: list[F32] = [temp, temp_pk, _peer_delta(temp, node_of), mem, mem_pk,
                       _peer_delta(mem, node_of), margin,
                       _peer_delta(power, node_of) / 100.0,
                       _peer_delta(clock, node_of) / 100.0, util / 100.0]
    counters = [_log_count(w(m)) for m in GPU_COUNTERS]
    states = [w(m) for m in GPU_STATES]
    *link_cols, miss_nv = link_hours(fleet, g, n) if links is None else links
    # Metrics every reporting GPU has (page retirement, say, is absent on row-remapping HBM).
    miss_gpu = _missing([temp, mem, power, w("ecc_sbe_volatile")])
    memory = _gpu_memory(v, h.last, n, node_of, counters[0], cols[2], cols[5])
    return np.stack([*cols, *counters, *states, *link_cols, miss_gpu, miss_nv, *memory], axis=2)


def _gpu_memory(v: ScopeView, last: int, n: int, node_of: I32, sbe: F32, temp_vs_peers: F32,
                mem_vs_peers: F32) -> list[F32]:
    """The GPU against its own last days (models/predictor/long_memory.py)."""
    d = DailyHistory(v, last, n)
    sbe_day = d.read("ecc_sbe_volatile")
    usual_sbe = usual_log_rate(sbe_day, d)
    remap_metrics = ("retired_pages_sbe", "retired_pages_dbe", "remapped_rows_correctable",
                     "remapped_rows_uncorrectable")
    remap_days = [d.read(m) for m in remap_metrics]
    remaps = np.nansum(np.stack(remap_days), axis=0) if d.available else remap_days[0]
    remaps = np.where(np.isnan(np.stack(remap_days)).all(axis=0), np.nan, remaps)
    temp_day, mem_day = d.read("gpu_temp"), d.read("mem_temp")
    activity = {
        "ECC": np.nan_to_num(sbe_day) + np.nan_to_num(d.read("ecc_dbe_volatile")) > 0,
        "HBM remap": np.nan_to_num(remaps) + sum(np.nan_to_num(d.read(m)) for m in (
            "retired_pages_pending", "remapped_rows_pending", "remapped_rows_failure")) > 0,
        "PCIe": np.nan_to_num(d.read("pcie_replay")) > 0,
    }
    out = [usual_sbe, sbe - usual_sbe, _log_count(d.total(remaps.astype(np.float32))),
           temp_vs_peers - d.mean(_peer_delta(temp_day, node_of)),
           mem_vs_peers - d.mean(_peer_delta(mem_day, node_of)), d.known(temp_day)]
    out += [d.days_since(activity[g]) for g in GPU_RECENCY]
    return out if d.available else [np.full((len(v), n), np.nan, np.float32) for _ in out]


def port_hours(fleet: FleetView, n: int) -> F32:
    """[port, n, per-hour IB port features]."""
    v = fleet.scope(Scope.IB_PORT)
    h = hours_of(v)
    p = len(v)
    node_of = np.asarray(v.node_of[:p])
    def w(m: str, stat: str = "agg") -> F32:
        return _window(v, h, m, n, stat)

    counters = [_log_count(w(m)) for m in IB_COUNTERS]
    with np.errstate(divide="ignore", invalid="ignore"):
        ber = (np.log10(np.clip(w("ib_ber"), 1e-18, None)) + 18.0).astype(np.float32)
    sym = counters[0]
    state = w("ib_state")
    rate = w("ib_rate")
    traffic = _log_count(w("ib_port_xmit_data") + np.nan_to_num(w("ib_port_rcv_data"))) / 10.0
    cols: list[F32] = [*counters, ber, _peer_delta(sym, node_of), state / 4.0,
            _peer_delta(rate, node_of) / 100.0, traffic,
            _missing([state, rate, w("ib_symbol_error")])]
    return np.stack([*cols, *_port_memory(v, h.last, n, sym, ber)], axis=2)


def _port_memory(v: ScopeView, last: int, n: int, sym: F32, ber: F32) -> list[F32]:
    """The port against its own last days."""
    d = DailyHistory(v, last, n)
    sym_day = d.read("ib_symbol_error")
    usual_sym = usual_log_rate(sym_day, d)
    ber_day = d.read("ib_ber")
    with np.errstate(divide="ignore", invalid="ignore"):
        usual_ber = (np.log10(np.clip(d.mean(ber_day), 1e-18, None)) + 18.0).astype(np.float32)
    errors = sum(np.nan_to_num(d.read(m)) for m, g in IB_COUNTERS.items() if g == "IB errors")
    link = sum(np.nan_to_num(d.read(m)) for m, g in IB_COUNTERS.items() if g == "IB link")
    state = d.read("ib_state")
    activity = {"IB errors": np.asarray(errors > 0), "IB link": np.asarray(link > 0)}
    out = [usual_sym, sym - usual_sym, ber - usual_ber, d.known(state)]
    out += [d.days_since(activity[g]) for g in IB_RECENCY]
    return out if d.available else [np.full((len(v), n), np.nan, np.float32) for _ in out]


HOURLY = {Scope.GPU: gpu_hours, Scope.IB_PORT: port_hours}


MISSING: dict[Scope, str] = {Scope.GPU: "missing_gpu", Scope.IB_PORT: "missing_ib"}
MIN_OBSERVED_H = 6  # fewer observed hours in a window: no prediction (the model has no basis)


def observed(scope: Scope, x: F32) -> npt.NDArray[np.bool_]:
    """[entity, hour] of per-hour features: whether the entity reported in that hour."""
    j = [f.name for f in FEATURES[scope]].index(MISSING[scope])
    out: npt.NDArray[np.bool_] = np.nan_to_num(x[..., j], nan=1.0) < 1.0
    return out


def n_hourly(scope: Scope) -> int:
    return len(FEATURES[scope])
