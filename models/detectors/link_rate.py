"""An IB/RoCE port up at a lower rate than its link should run at (`ib_rate_low`): the public
fault log of 400 eight-GPU servers over 349 days files it as "NIC link speed low", 11.3 % of the
downtime with a known cause. A link that trains with fewer lanes or a lower signalling rate
(4X NDR 400 Gb/s falling back to 2X at 200, or to HDR) still carries traffic, so the job runs,
but every all-reduce waits for the slowest port: level 2, drain at the next job boundary.

The port's rate is the kernel's `ports/<n>/rate` ("400 Gb/sec (4X NDR)", Documentation/ABI/
stable/sysfs-class-infiniband) or ibstat's `Rate:` line, both as `ib_rate` in Gb/s
(collectors.infiniband); Telegraf's infiniband input sends no rate, so the rule is silent on
Telegraf-only ports. What the port should run at is the higher of the operator's setting and
the rate its peers run at:

- the operator's setting (`LinkRateConfig.expected_gbps` by device name, `default_gbps` for
  every port); none by default;
- the rate most of its peers run at now, the peers being the same port (device name and port
  number) on the nodes of the same make-up (the same set of HCA names). Identical servers name
  their HCAs alike in PCI order (mlx5_0 .. mlx5_11, or the PCI-derived names of rdma's
  persistent naming), so the same port on a peer is the same adapter model in the same slot,
  on the same fabric: a 100 Gb/s Ethernet front-end port is never held to the 400 Gb/s of an
  InfiniBand compute port beside it, and a whole node trained low is low against the others;
- where there are fewer than `min_peers` such ports up (a small fleet, a node of a make of its
  own), the rate most of the port's siblings run at: the ports of its node with the same HCA
  model and link layer (`ib_hca_model`, `ib_link_layer`: sysfs `hca_type` and `ports/<n>/
  link_layer`, ibstat `CA type:` and `Link layer:`). A real H100 node (tests/detectors/
  test_link_rate.py) runs 4 ConnectX-6 Dx (MT4125) Ethernet ports at 100 Gb/s beside 8
  ConnectX-7 (MT4129) at 400: each model is its own class, so the 100s are never held to the
  400s, while one ConnectX-7 at 200 beside seven at 400 is low. The like nodes judge first: a
  rate the same slot runs at across the fleet is the design (a ConnectX-7 cabled at 200 for
  storage beside compute ports at 400), and a slot the fleet is split on has no rate to hold
  anyone to. Ports without the two readings (Telegraf, agents before them, the simulator) have
  no siblings and are judged by their like nodes alone, as before.

Both need a strict majority of at least `min_peers` / `min_siblings` up ports. Only ports up
count: logical state ACTIVE and, where reported, physical state LinkUp, with a rate above 0. A
port that is down reads a stale or zero rate (ibstat shows 40 on a down CX-6 Dx);
`ib_port_down` covers it, and it neither fires here nor counts as a peer. The low rate must hold
`hold_s` (a link retraining briefly is not a fault).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.frames import Entity
from models.detectors.findings import F64, Finding, fired, sustained
from models.detectors.view import ScopeView

ACTIVE = 4.0  # IBA PortState ACTIVE
LINK_UP = 5.0  # IBA PortPhysicalState LinkUp
RULE = "ib_rate_low"
_LAYERS = {1: "InfiniBand", 2: "Ethernet"}  # ib_link_layer
ACTION = "reseat or replace the cable/transceiver; check the switch port"
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class LinkRateConfig:
    hold_s: float = 300.0  # the low rate must last this long: retraining briefly is no fault
    # Expected Gb/s by device-name pattern (fnmatch, first match wins: {"mlx5_[0-7]": 400}),
    # then `default_gbps` for every other port; none by default (peers decide).
    expected_gbps: dict[str, float] = field(default_factory=dict)
    default_gbps: float | None = None
    # The peers' rate counts only when at least this many same ports are up and more than half
    # of them run at it (a fleet split between two rates has no rate to hold anyone to).
    min_peers: int = 3
    # The same on one node, among the ports of the same HCA model and link layer, where the
    # like nodes are fewer than `min_peers`.
    min_siblings: int = 3
    risk: float = 0.7  # level 2: drain at the next job boundary


def configured(entities: Sequence[Entity], c: LinkRateConfig) -> F64:
    """[slot] the Gb/s the operator expects of each port, NaN where nothing is set."""
    out: F64 = np.full(len(entities), np.nan)
    if not c.expected_gbps and c.default_gbps is None:
        return out
    default = math.nan if c.default_gbps is None else float(c.default_gbps)
    for i, e in enumerate(entities):
        out[i] = next((float(v) for pat, v in c.expected_gbps.items()
                       if fnmatch.fnmatchcase(e.unit, pat)), default)
    return out


def peer_classes(entities: Sequence[Entity]) -> I64:
    """[slot] a class id shared by the same port (device name, port number) on nodes with the
    same set of HCA names."""
    devices: dict[str, set[str]] = {}
    for e in entities:
        devices.setdefault(e.node, set()).add(e.unit)
    shapes: dict[frozenset[str], int] = {}
    shape_of = {n: shapes.setdefault(frozenset(d), len(shapes)) for n, d in devices.items()}
    classes: dict[tuple[int, str, str], int] = {}
    return np.array([classes.setdefault((shape_of[e.node], e.unit, e.sub), len(classes))
                     for e in entities], np.int64)


def sibling_classes(entities: Sequence[Entity], model: F64, layer: F64) -> I64:
    """[slot] a class id shared by the ports of one node with the same HCA model and link layer;
    a port missing either reading is in a class of its own (it has no siblings)."""
    classes: dict[tuple[str, float, float] | int, int] = {}
    out = np.empty(len(entities), np.int64)
    for i, e in enumerate(entities):
        m, lay = float(model[i]), float(layer[i])
        key = (e.node, m, lay) if math.isfinite(m) and math.isfinite(lay) else i
        out[i] = classes.setdefault(key, len(classes))
    return out


def peer_rate(cls: I64, rate: F64, up: npt.NDArray[np.bool_], min_peers: int
              ) -> tuple[F64, I64, I64]:
    """Per slot: the rate most up ports of its class run at (NaN without a clear majority of
    at least `min_peers` up ports), how many run at it, and how many are up."""
    n = len(cls)
    mode: F64 = np.full(n, np.nan)
    at: I64 = np.zeros(n, np.int64)
    total: I64 = np.zeros(n, np.int64)
    if not up.any():
        return mode, at, total
    ncls = int(cls.max()) + 1
    c, r = cls[up], rate[up]
    rates, r_idx = np.unique(r, return_inverse=True)
    pairs, counts = np.unique(c * len(rates) + r_idx, return_counts=True)
    p_cls, p_rate = pairs // len(rates), rates[pairs % len(rates)]
    order = np.lexsort((counts, p_cls))  # by class, then count ascending: the best is last
    p_cls, p_rate, counts = p_cls[order], p_rate[order], counts[order]
    last = np.r_[p_cls[1:] != p_cls[:-1], True]
    tie = np.r_[False, (p_cls[1:] == p_cls[:-1]) & (counts[1:] == counts[:-1])]
    up_per_cls = np.bincount(c, minlength=ncls)
    best_rate: F64 = np.full(ncls, np.nan)
    best_n: I64 = np.zeros(ncls, np.int64)
    best_rate[p_cls[last]] = np.where(tie[last], np.nan, p_rate[last])
    best_n[p_cls[last]] = counts[last]
    clear = (up_per_cls >= min_peers) & (2 * best_n > up_per_cls)
    best_rate[~clear] = np.nan
    return best_rate[cls], best_n[cls], up_per_cls[cls]


def link_rate_low(ib: ScopeView, c: LinkRateConfig) -> Finding:
    """`ib_rate_low` over every port of the scope (see the module's docstring)."""
    # Two readings at least: at a step as long as the hold (a 5-min trace), one reading caught
    # in a retrain of a minute would otherwise be a low rate held.
    n = max(2, math.ceil(c.hold_s / ib.step_s))
    state = ib.window("ib_state", n).astype(np.float64)
    phys = ib.window("ib_phys_state", n).astype(np.float64)
    rate = ib.window("ib_rate", n).astype(np.float64)
    with np.errstate(invalid="ignore"):
        up = (state == ACTIVE) & (np.isnan(phys) | (phys == LINK_UP)) & (rate > 0)
    now_rate, now_up = rate[:, -1], up[:, -1]
    peers, at, total = peer_rate(peer_classes(ib.entities), now_rate, now_up, c.min_peers)
    model, layer = ib.latest("ib_hca_model"), ib.latest("ib_link_layer")
    sib, sib_at, sib_total = peer_rate(sibling_classes(ib.entities, model, layer), now_rate,
                                       now_up, c.min_siblings)
    by_siblings = total < c.min_peers  # too few like nodes up to judge the port
    fleet = np.where(by_siblings, sib, peers)
    conf = configured(ib.entities, c)
    expected = np.fmax(conf, fleet)
    with np.errstate(invalid="ignore"):
        low = up & (rate < expected[:, None])
    seen = ~np.isnan(state)
    held = sustained(low, seen)
    risk = fired(np.where(held, 1.0, 0.0), 1, c.risk)
    details: dict[int, str] = {}
    for i in np.flatnonzero(risk > 0).tolist():
        e = ib.entities[i]
        if expected[i] != fleet[i]:
            why = "the configured rate"
        elif by_siblings[i]:
            why = (f"the rate {sib_at[i]} of the {sib_total[i]} {_kind(model[i], layer[i])} "
                   "ports up on its node run at")
        else:
            why = f"the rate {at[i]} of the {total[i]} same ports up on like nodes run at"
        details[i] = (f"{e.unit} port {e.sub} is up at {_gbps(now_rate[i])} Gb/s, expected "
                      f"{_gbps(expected[i])} Gb/s ({why}) for {c.hold_s / 60:g} min: {ACTION}")
    return Finding(RULE, Scope.IB_PORT, risk, np.where(now_up, now_rate, np.nan), math.nan,
                   f"port up below its expected rate (Gb/s) for {c.hold_s / 60:g} min: {ACTION}",
                   hard=True, details=details or None)


def _gbps(x: float) -> str:
    return f"{x:g}"


def _kind(model: float, layer: float) -> str:
    """"MT4129 Ethernet": the HCA type as hca_type and ibstat print it, and the link layer."""
    return f"MT{int(model)} {_LAYERS.get(int(layer), 'unknown-layer')}"
