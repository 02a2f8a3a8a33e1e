"""Plan a whole trace from the seed: failures, their precursors, benign traps, then resolve."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from models.simulator import effects_chassis, effects_device, effects_links, effects_memory
from models.simulator.benign import place_scripted, plan_benign
from models.simulator.config import SimConfig
from models.simulator.context import Ctx
from models.simulator.failures import Failure, sample_failures, scripted_failure
from models.simulator.modes import MODE_SCOPE, Mode
from models.simulator.plan import Plan, PlanBuilder, finalize
from models.simulator.topology import Topology, rng_for

STREAM_DETAIL = 150
STREAM_GROWTH = 160  # its own stream: drawing a growth shape never moves a failure's details

Effect = Callable[[Ctx, Failure, np.random.Generator], None]
EFFECTS: dict[Mode, Effect] = {
    Mode.M1_HBM: effects_memory.hbm,
    Mode.M2_GPU_HARD: effects_device.gpu_hard,
    Mode.M3_NVLINK: effects_links.nvlink,
    Mode.M4_IB_LINK: effects_links.ib_link,
    Mode.M5_THERMAL: effects_device.thermal,
    Mode.M6_SRAM: effects_memory.sram,
    Mode.M7_UNOBSERVABLE: effects_device.unobservable,
    Mode.M8_PSU: effects_chassis.psu,
    Mode.M9_FAN: effects_chassis.fan,
    Mode.M10_PCIE_WIDTH: effects_chassis.pcie_width,
    Mode.M11_NIC_SPEED: effects_chassis.nic_speed,
    Mode.M12_GPU_UNREADABLE: effects_chassis.gpu_unreadable,
    Mode.M13_HOST_HW: effects_chassis.host_hw,
}


def plan_failures(cfg: SimConfig, topo: Topology) -> list[Failure]:
    """Random failures plus scripted ones, in time order."""
    fails = sample_failures(cfg, topo) + [scripted_failure(cfg, s) for s in cfg.scripted_failures]
    return sorted(fails, key=lambda f: (f.time, f.mode.value, f.node, f.unit, f.link))


def build_plan(cfg: SimConfig, topo: Topology) -> tuple[Plan, list[Failure]]:
    b = PlanBuilder(topo)
    ctx = Ctx(cfg, topo, b)
    fails = plan_failures(cfg, topo)
    growth = cfg.failures.shapes.growth
    for i, f in enumerate(fails):
        if f.onset is not None:
            f.growth = growth.draw(rng_for(cfg.seed, STREAM_GROWTH, i))
        EFFECTS[f.mode](ctx, f, rng_for(cfg.seed, STREAM_DETAIL, i))
        ctx.failure_label(f.time, MODE_SCOPE[f.mode], f.entity(topo), f.mode.value, f.onset)
    plan_benign(ctx)
    for i, s in enumerate(cfg.scripted_benign):
        place_scripted(ctx, s, i)
    return finalize(b), fails
