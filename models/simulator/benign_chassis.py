"""Benign look-alikes of the node-wide failure modes (issue 31; docs/simulator.md, `chassis`):
what a rule must tell apart from a failing supply, fan, PCIe link or port.

- psu_standby: one supply of the node is a cold spare by design (Redfish StandbySpare,
  psu_state 1): it delivers nothing and runs cool, for the whole run;
- fan_profile: the BMC switches the node's fan profile (acoustic or performance mode): every
  fan of the node slows down or speeds up together, for hours;
- pcie_idle_narrow: a board that trains its link narrower at idle as well as slower (a real
  A10G capture: gen 1 x8 of x16 at idle), for the whole run; under load it is x16 again;
- ib_renegotiate: a port trains at a lower rate for a minute or two and recovers.

Fans that change speed with load and GPUs that lower their PCIe generation at idle are in every
node all the time (render_chassis.py, render_gpu.py): no label marks them.
"""

from __future__ import annotations

import numpy as np

from collectors.catalog import Scope
from models.simulator.config import Trap
from models.simulator.context import Ctx
from models.simulator.plan import IDLE_WIDTH, Op

STANDBY = 1.0  # psu_state: standby by design


def psu_standby(ctx: Ctx, psu: int, t0: float, t1: float) -> None:
    ctx.b.interval(Scope.PSU, "psu_state", (psu, psu + 1), t0, t1, Op.SET, STANDBY)
    ctx.benign_label(Trap.PSU_STANDBY, Scope.PSU, psu, t0, t1)


def fan_profile(ctx: Ctx, rng: np.random.Generator, node: int, t0: float, t1: float) -> None:
    scale = rng.uniform(0.6, 0.8) if rng.random() < 0.5 else rng.uniform(1.1, 1.25)
    fans = ctx.topo.node_slice(Scope.FAN, node)
    ctx.b.interval(Scope.FAN, "fan_rpm", fans, t0, t1, Op.SCALE, scale)
    for f in range(*fans):  # one label per fan: an alert on any of them is a false one
        ctx.benign_label(Trap.FAN_PROFILE, Scope.FAN, f, t0, t1)


def pcie_idle_narrow(ctx: Ctx, gpu: int, t0: float, t1: float) -> None:
    ctx.b.interval(Scope.GPU, IDLE_WIDTH, (gpu, gpu + 1), t0, t1, Op.SET, 8.0)
    ctx.benign_label(Trap.PCIE_IDLE_NARROW, Scope.GPU, gpu, t0, t1)


def ib_renegotiate(ctx: Ctx, port: int, t: float, dur: float) -> None:
    ctx.b.interval(Scope.IB_PORT, "ib_rate", (port, port + 1), t, t + dur, Op.SET,
                   ctx.spec.ib_rate_gbps / 2)
    ctx.benign_label(Trap.IB_RENEGOTIATE, Scope.IB_PORT, port, t, t + dur)
