"""The soak's fleet and fault schedule, scaled to the run's length (bench/soak.py).

Every node has a kind: `smi` (a node agent reading a fake nvidia-smi, IB sysfs and a kernel log),
`dcgm` (a node agent scraping a dcgm-exporter page, with the same IB and kernel-log sources) or
`telegraf` (Telegraf-shaped `nvidia_smi`/`infiniband` lines pushed to the service). The first
nodes carry the scripted faults; the rest of the fleet cycles through the kinds and only
reports. Fault times are fractions of the run, except the spans the issue fixes in seconds
(the Xid 79 that arrives 90 s late) and those the service's settings fix (IB down for
`ib_down_s`).

The storm phase (issue 28) starts at `STORM_AT` of the run: within seconds, hard faults on a
third of the nodes or more (a DBE, an Xid 79 that a spooled node's drain delivers late, an IB
link down, a GPU at its shutdown margin; on larger fleets more nodes from the background, each
announced by a precursor), so that a third of the fleet entering level 3 from live data within
`STORM_WINDOW_S` trips `FleetStorm` (the late Xid is a backfill: it never counts toward a
storm). Before it, no two nodes enter level 2 within that window.

The chassis and link phase (issue 31): a power supply fails, a fan slows down below its lower
critical speed and a GPU's PCIe link drops to half its width, each read the way a fleet reads
it (the fake BMC through the product's `ipmi` source, the fake nvidia-smi's PCIe fields). Each
is a level-2 fault (fix at the next job boundary, never a drain). They are timed so that their
level-2 entries land just after the storm phase begins, on nodes the storm already counts (n00
and n01): a level-2 entry of another node before the storm would raise the storm early.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["smi", "dcgm", "telegraf"]
KINDS: tuple[Kind, ...] = ("smi", "dcgm", "smi", "telegraf")
XID_LATE_S = 90.0  # issue 13, defect 3: the Xid 79 that arrives 90 s late
# Level 2's for-duration in the soak: the default (120 s) on runs long enough, shorter on the
# short form, where the kill -9 at 0.45 of the run restarts every pending for-duration and a
# level-2 fault must still reach level 2 within the run.
LEVEL2_FOR_S, LEVEL2_FOR_MIN_S = 120.0, 45.0
PCIE_WIDTH_HOLD_S = 20.0  # the soak's pcie_width_hold_s (the product's default is 300 s)
FAN_DECAY_S = 30.0  # a failing fan takes this long from full speed to its lower critical
LEVEL2_AFTER_S = 10.0  # the chassis faults reach level 2 this long after the storm begins
MIN_MINUTES = 3.0  # the late Xid and its silence need this much run
STORM_AT = 0.75  # the storm phase's start, a fraction of the run
STORM_WINDOW_S = 40.0  # its hard faults reach level 3 within this (the storm's window_s)
STORM_FRACTION = 1 / 3  # of the fleet: the storm setting's fraction


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    kind: Kind
    gpus: int
    ib_ports: int = 2  # one port per HCA, mlx5_0..
    start_at: float = 0.0  # seconds after the schedule's origin
    stop_at: float | None = None


@dataclass(frozen=True, slots=True)
class Fault:
    """One scheduled change. `what` names the action (soak_fleet.Fleet.apply and the stack
    know them); `node`, `gpu`, `port` say where."""

    at: float
    what: str
    node: str = ""
    gpu: int = -1
    port: str = ""
    unit: str = ""  # a power supply's or fan's number on its BMC (1-based, as it names them)


@dataclass(frozen=True, slots=True)
class Level2Fault:
    """An injected fault that must reach level 2 and stay there (a warning: no page, no
    drain). `evidence`: "psu" (the supply's health Critical), "redundancy" (the node's supply
    redundancy lost), "fan" (the fan below its lower critical speed) or "pcie" (the link
    narrower than its maximum while busy); `rule`: the rule that must explain the alert;
    `hold_s`: how long the rule wants the evidence before it fires (the PCIe width's hold; a
    fan's second reading is part of its evidence)."""

    name: str
    entity: str
    alertname: str
    rule: str
    evidence: str
    unit: str = ""
    hold_s: float = 0.0


@dataclass(frozen=True, slots=True)
class HardFailure:
    """An injected hard failure and how to recognise its evidence in what was sent.

    `evidence`: "dbe" (a GPU line with ecc_dbe_volatile >= 1), "hot" (gpu_temp within 2 degC
    of the shutdown temperature), "xid79" (an Xid 79 event) or "ib_down" (an IB port not ACTIVE
    for ib_down_s). `precursor`: the failure was announced (rising counters, throttling), so an
    alert must exist before its first failing sample arrives; `judged` False reports that
    check without counting it (the product cannot see this precursor at the run's scale)."""

    name: str
    entity: str  # the entity key, e.g. n01:gpu1 or n00:mlx5_1:1
    evidence: str
    precursor: bool = False
    judged: bool = True
    late: bool = False  # the evidence arrives long after it happened


@dataclass(slots=True)
class Plan:
    duration_s: float
    step_s: float
    nodes: list[NodeSpec]
    faults: list[Fault] = field(default_factory=list)
    failures: list[HardFailure] = field(default_factory=list)
    silent_gpu: str = ""  # entity key of the GPU that stops reporting without an Xid
    resolve_node: str = ""  # the node whose level-3 alerts must resolve after the restart
    removed_node: str = ""
    storm_at: float = 0.0  # the storm phase's start, seconds after the origin
    storm_nodes: list[str] = field(default_factory=list)  # nodes with a hard fault in it
    level2: list[Level2Fault] = field(default_factory=list)
    level2_for_s: float = LEVEL2_FOR_S  # the soak's alerts.for_s at level 2
    pcie_width_hold_s: float = PCIE_WIDTH_HOLD_S

    @property
    def storm_min_nodes(self) -> int:
        """A third of the fleet: the storm's min_nodes and what its fraction comes to."""
        return max(1, math.ceil(len(self.nodes) * STORM_FRACTION))

    @property
    def storm_window_s(self) -> float:
        return STORM_WINDOW_S

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def node(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes if n.name == name)


def build(minutes: float, gpus: int, *, step_s: float = 5.0, ib_down_s: float = 30.0) -> Plan:
    if minutes < MIN_MINUTES:
        raise ValueError(f"--minutes must be at least {MIN_MINUTES:g} (the 90-s-late Xid and "
                         "the silence after it need that long)")
    if gpus < 8:
        raise ValueError("--gpus must be at least 8")
    d = minutes * 60.0
    per_node = 8 if gpus >= 64 else 4
    count = max(5, round(gpus / per_node))
    nodes = [NodeSpec(f"n{i:02d}", KINDS[i % len(KINDS)], per_node) for i in range(count)]
    # Roles of the first five: n00 smi (IB precursor, thermal precursor, late GPU, silent GPU),
    # n01 dcgm (DBE after rising remaps, late NVLink, swap), n02 smi (off the bus behind an
    # agent outage), n03 telegraf, n04 smi (removed). One dcgm node joins later, overheats
    # before the kill -9 and cools after the restart.
    removed = nodes[4].name
    nodes[4] = NodeSpec(removed, "smi", per_node, stop_at=0.6 * d)
    added = NodeSpec(f"n{count:02d}", "dcgm", per_node, start_at=0.3 * d)
    nodes.append(added)
    plan = Plan(d, step_s, nodes, removed_node=removed)
    f = plan.faults.append
    last = per_node - 1
    # Entities that come and go.
    f(Fault(0.15 * d, "gpu_appears", "n00", gpu=last))
    f(Fault(0.2 * d, "links_appear", "n01"))
    f(Fault(0.5 * d, "gpu_swap", "n01", gpu=0))
    f(Fault(added.start_at, "node_start", added.name))
    f(Fault(0.6 * d, "node_stop", removed))
    # The storm phase: n01's DBE, n02's late Xid 79 (its spool drains), n00's IB link down
    # and shutdown margin, within seconds; on a larger fleet more nodes, to a third of it.
    storm = STORM_AT * d
    plan.storm_at = storm
    # Precursors, then the failures they announce.
    f(Fault(0.05 * d, "remap_rising", "n01", gpu=1))
    f(Fault(storm, "dbe", "n01", gpu=1))
    f(Fault(0.05 * d, "symbol_errors_rising", "n00", port="mlx5_1"))
    f(Fault(storm + 5.0, "ib_down", "n00", port="mlx5_1"))
    f(Fault(0.2 * d, "heating", "n00", gpu=2))  # a failing fan: throttling, then the margin
    f(Fault(storm + 20.0, "overheat", "n00", gpu=2))
    # The node that joined overheats as a whole (its cooling fails), is paged before the
    # kill -9 and cools down after the restart: its resolves must still reach the receiver.
    # The whole node, so that no peer comparison keeps it warm after the repair.
    kill_at, back_at = 0.45 * d, 0.45 * d + 5.0
    f(Fault(0.35 * d, "node_overheat", added.name))
    f(Fault(kill_at, "service_kill"))
    f(Fault(back_at, "service_start"))
    f(Fault(back_at + 0.08 * d, "node_cooled", added.name))
    # Off the bus behind an agent outage: the Xid is logged at `fall` and reaches the service
    # only when the agent drains its spool, XID_LATE_S later (in the storm phase: the
    # backfill); the GPU stays silent after.
    fall = storm + 10.0 - XID_LATE_S
    f(Fault(fall - 10.0, "agent_offline", "n02"))
    f(Fault(fall, "off_bus", "n02", gpu=1))
    f(Fault(fall + XID_LATE_S, "agent_online", "n02"))
    # A GPU that stops reporting while its node keeps reporting, with no Xid at all.
    f(Fault(0.5 * d, "gpu_silent", "n00", gpu=1))
    # InfluxDB goes away and comes back.
    f(Fault(0.3 * d, "influx_stop"))
    f(Fault(0.3 * d + max(15.0, 0.08 * d), "influx_start"))
    # Telegraf's seams: a retried flush, two points in one step, a late point, bad lines.
    for at in (0.25 * d, 0.7 * d):
        f(Fault(at, "tg_resend", "n03"))
    f(Fault(0.5 * d, "tg_substep", "n03"))
    f(Fault(0.65 * d, "tg_out_of_order", "n03"))
    f(Fault(0.35 * d, "bad_lines", "n03"))
    plan.level2_for_s = min(LEVEL2_FOR_S, max(LEVEL2_FOR_MIN_S, round(d / 4)))
    plan.level2 = _level2(plan, storm)
    extra = _storm_extra(plan, storm)
    plan.faults.sort(key=lambda x: x.at)
    plan.storm_nodes = ["n00", "n01", "n02", *(h.entity.split(":")[0] for h in extra)]
    plan.failures = [
        # remap_step reads 24 h of remaps from the 1-h tier, which lags by up to an hour: a
        # remap rise minutes before the DBE is reported, not judged (docs/soak.md).
        HardFailure("DBE after rising remapped rows", "n01:gpu1", "dbe", precursor=True,
                    judged=False),
        HardFailure("IB link down after symbol errors", "n00:mlx5_1:1", "ib_down",
                    precursor=True),
        HardFailure("shutdown margin after thermal throttling", "n00:gpu2", "hot",
                    precursor=True),
        HardFailure("node overheat paged before the kill -9", f"{added.name}:gpu0", "hot"),
        HardFailure("GPU off the bus, Xid 79 90 s late", "n02:gpu1", "xid79", late=True),
        *extra,
    ]
    plan.silent_gpu = "n00:gpu1"
    plan.resolve_node = added.name
    return plan


def _level2(plan: Plan, storm: float) -> list[Level2Fault]:
    """A supply fails on n01 (its other supply carries the node), a fan of n00 slows down past
    its lower critical speed, n00's GPU 0 retrains at x8 of x16 while busy. Each is injected so
    that its level-2 for-duration ends LEVEL2_AFTER_S after the storm begins: later where the
    restart after the kill -9 came after the fault (a restart starts every pending
    for-duration again), never before the storm, where n01 entering level 2 beside n00 would
    raise it early."""
    due = storm + LEVEL2_AFTER_S - plan.level2_for_s
    f = plan.faults.append
    f(Fault(due, "psu_fail", "n01", unit="2"))
    f(Fault(due - FAN_DECAY_S - plan.step_s, "fan_slowing", "n00", unit="3"))
    f(Fault(due - plan.pcie_width_hold_s, "pcie_narrow", "n00", gpu=0))
    return [
        Level2Fault("power supply failed, the other one delivers", "n01:psu2",
                    "PsuFailureRisk", "psu_failed", "psu", unit="2"),
        Level2Fault("power supply redundancy lost", "n01", "NodeAtRisk",
                    "psu_redundancy_lost", "redundancy"),
        Level2Fault("fan below its lower critical speed", "n00:fan3", "FanFailureRisk",
                    "fan_failed", "fan", unit="3"),
        Level2Fault("PCIe link x8 of x16 while busy", "n00:gpu0", "GpuFailureRisk",
                    "pcie_width_low", "pcie", hold_s=plan.pcie_width_hold_s),
    ]


def _storm_extra(plan: Plan, storm: float) -> list[HardFailure]:
    """Storm faults on background agent nodes, until a third of the fleet enters level 3 live
    (none on the short form's fleet, where n00 and n01 are a third of it; n02's Xid arrives
    in a spool drain, which never counts toward a storm): a DBE after rising remaps or a
    shutdown margin after throttling, two seconds apart."""
    want = plan.storm_min_nodes - 2
    quiet = [n for n in plan.nodes[5:] if n.kind != "telegraf" and n.start_at == 0
             and n.stop_at is None]
    out: list[HardFailure] = []
    for i, n in enumerate(quiet[:max(0, want)]):
        at = storm + 2.0 * i
        if i % 2 == 0:
            plan.faults.append(Fault(at - 60.0, "remap_rising", n.name, gpu=0))
            plan.faults.append(Fault(at, "dbe", n.name, gpu=0))
            out.append(HardFailure(f"storm: DBE on {n.name}", f"{n.name}:gpu0", "dbe"))
        else:
            plan.faults.append(Fault(at - 60.0, "heating", n.name, gpu=0))
            plan.faults.append(Fault(at, "overheat", n.name, gpu=0))
            out.append(HardFailure(f"storm: shutdown margin on {n.name}", f"{n.name}:gpu0",
                                   "hot"))
    return out
