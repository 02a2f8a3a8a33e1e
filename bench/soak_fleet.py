"""The soak's synthetic fleet: every GPU's and IB port's readings, which the harness moves on
each second and changes by the fault schedule, and the files the node agents read them from
(a state file per node for the fake nvidia-smi, a sysfs tree per node, a kernel log per node).
dcgm-exporter pages and Telegraf lines are rendered from the same state on demand.

Thread-safe: the HTTP server thread renders pages while the main loop advances the state.
"""

from __future__ import annotations

import json
import os
import random
import threading
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.soak_bmc import FAN_LCR, FAN_LNC, FAN_LNR
from bench.soak_plan import FAN_DECAY_S, Fault, NodeSpec, Plan
from bench.soak_render import dcgm_page, noise_lines, telegraf_gpu, telegraf_ib, xid_line

NVLINKS = 4  # per GPU on dcgm nodes, once they appear
IB_RATE = "400 Gb/sec (4X NDR)"
SYMBOL_ERRORS_PER_S = 400  # a BER near 1e-9 at 400 Gb/s: far past ibdiagnet's 1e-12
REMAP_EVERY_S = 10.0  # a correctable remap this often while a GPU's memory degrades
SHUTDOWN_C, SLOWDOWN_C, THROTTLE_C = 92.0, 89.0, 87.0  # H100-like thresholds (XML, DCGM)
HEAT_JUMP_C, HEAT_RATE_C_S, HEAT_PLATEAU_C = 35.0, 1.0, 88.5  # a failing fan
OVERHEAT_C = 91.5  # within 2 degC of shutdown: the near_shutdown hard rule
FAN_RPM, FAN_FLOOR_RPM = 8400.0, 200.0  # a chassis fan at work; a seized one still turns a bit
PSU_W, PSU_V = 610.0, 228.0  # each of two supplies sharing the node's load, at mains


@dataclass(slots=True)
class GpuState:
    index: int
    uuid: str
    bus_id: str
    present: bool = True  # in nvidia-smi's listing (False: not yet appeared)
    lost: bool = False  # fallen off the bus, or gone silent
    temp: float = 40.0
    power: float = 300.0
    util: int = 80
    sbe_vol: int = 0
    dbe_vol: int = 0
    sbe_agg: int = 0
    dbe_agg: int = 0
    remap_corr: int = 0
    remap_unc: int = 0
    remap_pending: int = 0
    remap_failure: int = 0
    pcie_replay: int = 0
    pcie_width: int = 16  # lanes of an x16 link (nvidia-smi pcie.link.width.current)
    last_xid: int = 0
    remap_rising_since: float | None = None
    base_temp: float = 40.0
    heating_since: float | None = None
    nvl: dict[str, list[int]] = field(default_factory=dict)

    def as_dict(self, rng: random.Random) -> dict[str, Any]:
        # Hot GPUs sit at their fans' limit: small noise, so the margin holds where it is set.
        spread = 0.3 if self.temp > 80 else 1.5
        temp = self.temp + rng.uniform(-spread, spread)
        throttled = int(temp >= THROTTLE_C)
        return {
            "index": self.index, "uuid": self.uuid, "serial": serial_of(self.uuid),
            "bus_id": self.bus_id,
            "name": "NVIDIA H100 80GB HBM3", "lost": self.lost, "temp": round(temp, 1),
            "mem_temp": round(temp + 8.0, 1), "power": round(self.power + rng.uniform(-20, 20), 2),
            "sm_clock": 1980, "util": self.util, "fb_used": 61000,
            "thr_thermal": throttled, "thr_power": 0, "thr_hw": 0,
            "throttle_mask": 0x40 * throttled, "slow_temp": SLOWDOWN_C, "shut_temp": SHUTDOWN_C,
            "sbe_vol": self.sbe_vol, "dbe_vol": self.dbe_vol, "sbe_agg": self.sbe_agg,
            "dbe_agg": self.dbe_agg, "remap_corr": self.remap_corr, "remap_unc": self.remap_unc,
            "remap_pending": self.remap_pending, "remap_failure": self.remap_failure,
            "pcie_replay": self.pcie_replay, "pcie_width": self.pcie_width,
            "last_xid": self.last_xid, "nvl": self.nvl,
        }


@dataclass(slots=True)
class PortState:
    device: str
    state: int = 4  # ACTIVE
    phys_state: int = 5  # LinkUp
    counters: dict[str, int] = field(default_factory=lambda: {
        "symbol_error": 0, "link_error_recovery": 0, "link_downed": 0, "port_rcv_errors": 0,
        "local_link_integrity_errors": 0, "excessive_buffer_overrun_errors": 0,
        "port_rcv_data": 10_000_000, "port_xmit_data": 10_000_000})
    symbol_errors_rising: bool = False


@dataclass(slots=True)
class BmcState:
    """What the node's BMC reads (bench.soak_bmc renders it as ipmitool prints it): two
    supplies sharing the load, six fans, the inlet and exhaust air, and the event log."""

    failed: list[bool] = field(default_factory=lambda: [False, False])
    fans: list[float] = field(default_factory=lambda: [FAN_RPM] * 6)
    slowing_since: dict[int, float] = field(default_factory=dict)  # fan index -> since when
    inlet: float = 24.0
    sel: list[list[Any]] = field(default_factory=list)  # [id, time, sensor, event, dir, reading]

    def log(self, at: float, sensor: str, event: str, reading: str = "") -> None:
        self.sel.append([len(self.sel) + 1, at, sensor, event, "Asserted", reading])

    def as_dict(self, rng: random.Random) -> dict[str, Any]:
        up = self.failed.count(False) or 1
        psus = [{"failed": bad, "temp": 36.0 + rng.uniform(-1, 1), "volts": PSU_V,
                 "watts": 0.0 if bad else 2 * PSU_W / up + rng.uniform(-15, 15)}
                for bad in self.failed]
        fans = [rpm if i in self.slowing_since else rpm + rng.uniform(-60, 60)
                for i, rpm in enumerate(self.fans)]
        return {"cpu_temp": 52.0 + rng.uniform(-2, 2), "inlet": self.inlet,
                "exhaust": self.inlet + 14.0, "fans": fans, "psus": psus, "sel": self.sel}


@dataclass(slots=True)
class NodeState:
    spec: NodeSpec
    gpus: list[GpuState]
    ports: list[PortState]
    root: Path
    links: int = 0  # NVLink links per GPU the exporter shows
    bmc: BmcState = field(default_factory=BmcState)

    @property
    def smi_state(self) -> Path:
        return self.root / "smi-state.json"

    @property
    def ib_root(self) -> Path:
        return self.root / "sys-class-infiniband"

    @property
    def kernel_log(self) -> Path:
        return self.root / "kern.log"

    @property
    def smi_binary(self) -> Path:
        return self.root / "bin" / "nvidia-smi"

    @property
    def bmc_state(self) -> Path:
        return self.root / "bmc-state.json"

    @property
    def ipmitool(self) -> Path:
        return self.root / "bin" / "ipmitool"


def serial_of(uuid: str) -> str:
    """A board's 13-digit serial, from its UUID: a swapped board's differs with it, and no
    random number is drawn (the fleet's sequence stays what it was)."""
    return f"16549{int(uuid[-8:], 16) % 10**8:08d}"


def _uuid(rng: random.Random) -> str:
    return "GPU-" + str(uuidlib.UUID(int=rng.getrandbits(128), version=4))


class _Files:
    """Writes by rename, so an agent never reads half a file; skips what did not change."""

    def __init__(self) -> None:
        self.written: dict[Path, str] = {}

    def put(self, path: Path, text: str) -> None:
        if self.written.get(path) == text:
            return
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        self.written[path] = text


class Fleet:
    def __init__(self, plan: Plan, root: Path, seed: int = 13) -> None:
        self.plan = plan
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.nodes: dict[str, NodeState] = {}
        self.files = _Files()
        for n in plan.nodes:
            gpus = []
            for i in range(n.gpus):
                temp = 38.0 + self.rng.uniform(0, 6)
                gpus.append(GpuState(i, _uuid(self.rng), f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                                     temp=temp, base_temp=temp,
                                     power=280 + self.rng.uniform(0, 60),
                                     sbe_agg=self.rng.randrange(0, 40)))
            ports = [PortState(f"mlx5_{p}") for p in range(n.ib_ports)]
            self.nodes[n.name] = NodeState(n, gpus, ports, root / n.name)
        for f in plan.faults:  # GPUs that appear later are absent at first
            if f.what == "gpu_appears":
                self.nodes[f.node].gpus[f.gpu].present = False
        for node in self.nodes.values():
            node.root.mkdir(parents=True, exist_ok=True)
            node.kernel_log.touch()
            self._write_ib(node)
        self._last = 0.0

    # ---- the schedule -----------------------------------------------------------------------
    def apply(self, f: Fault, now: float) -> None:
        with self.lock:
            node = self.nodes.get(f.node)
            gpu = node.gpus[f.gpu] if node is not None and f.gpu >= 0 else None
            port = next((p for p in node.ports if p.device == f.port), None) if node else None
            if f.what == "gpu_appears" and gpu:
                gpu.present = True
            elif f.what == "links_appear" and node:
                node.links = NVLINKS
            elif f.what == "gpu_swap" and gpu:
                # A new board under the same index: new uuid, its own (lower) lifetime counts.
                gpu.uuid, gpu.sbe_agg, gpu.dbe_agg = _uuid(self.rng), 0, 0
                gpu.sbe_vol = gpu.dbe_vol = gpu.remap_corr = gpu.remap_unc = 0
            elif f.what == "remap_rising" and gpu:
                gpu.remap_rising_since = now
            elif f.what == "dbe" and gpu:
                gpu.dbe_vol += 1
                gpu.dbe_agg += 1
                gpu.remap_unc += 1
                gpu.remap_pending = 1
                gpu.last_xid = 48
            elif f.what == "heating" and gpu:
                gpu.heating_since = now
                gpu.temp = gpu.base_temp + HEAT_JUMP_C
            elif f.what == "overheat" and gpu:
                gpu.heating_since, gpu.temp = None, OVERHEAT_C
            elif f.what in ("node_overheat", "node_cooled") and node:
                for g in node.gpus:
                    g.heating_since = None
                    g.temp = OVERHEAT_C if f.what == "node_overheat" else g.base_temp
            elif f.what == "symbol_errors_rising" and port:
                port.symbol_errors_rising = True
            elif f.what == "ib_down" and port:
                port.state, port.phys_state = 1, 2  # DOWN, Polling
                port.counters["link_downed"] += 1
                port.symbol_errors_rising = False
            elif f.what == "off_bus" and gpu and node:
                gpu.lost = True
                self._append_log(node, [xid_line(now, gpu.bus_id, 79,
                                                 "GPU has fallen off the bus.")])
            elif f.what == "gpu_silent" and gpu:
                gpu.lost = True
            elif f.what == "pcie_narrow" and gpu:
                gpu.pcie_width //= 2  # retrained at half width: a riser or seating fault
            elif f.what == "psu_fail" and node:
                i = int(f.unit) - 1
                node.bmc.failed[i] = True
                node.bmc.log(now, f"Power Supply PS{i + 1} Status", "Failure detected")
                node.bmc.log(now, "Power Supply PS Redundancy", "Redundancy Lost")
            elif f.what == "fan_slowing" and node:
                node.bmc.slowing_since[int(f.unit) - 1] = now
            if node is not None:
                self._write_node(node, now)

    # ---- time -------------------------------------------------------------------------------
    def advance(self, now: float) -> None:
        """Move counters on to `now` and rewrite the files the agents read."""
        with self.lock:
            dt = now - self._last if self._last else 0.0
            self._last = now
            for node in self.nodes.values():
                for g in node.gpus:
                    if g.heating_since is not None:
                        g.temp = min(HEAT_PLATEAU_C, g.base_temp + HEAT_JUMP_C
                                     + HEAT_RATE_C_S * (now - g.heating_since))
                    if g.remap_rising_since is not None and not g.dbe_vol:
                        g.remap_corr = 1 + int((now - g.remap_rising_since) / REMAP_EVERY_S)
                        g.sbe_vol += int(dt * 40)
                        g.sbe_agg += int(dt * 40)
                self._fans(node.bmc, now)
                for p in node.ports:
                    if p.state == 4:
                        p.counters["port_rcv_data"] += int(dt * 2e9)
                        p.counters["port_xmit_data"] += int(dt * 2e9)
                    if p.symbol_errors_rising:
                        p.counters["symbol_error"] += int(dt * SYMBOL_ERRORS_PER_S)
                self._write_node(node, now)
                if self.rng.random() < 0.2:  # the log grows, failure or not
                    self._append_log(node, list(noise_lines(now, 1)))

    @staticmethod
    def _fans(bmc: BmcState, now: float) -> None:
        """A failing fan loses speed at a steady rate, past its lower thresholds (each crossing
        logged as the BMC logs it) down to a crawl."""
        rate = (FAN_RPM - FAN_LCR) / FAN_DECAY_S
        for i, since in bmc.slowing_since.items():
            old = bmc.fans[i]
            new = max(FAN_FLOOR_RPM, FAN_RPM - rate * (now - since))
            bmc.fans[i] = new
            for limit, what in ((FAN_LNC, "Lower Non-critical"), (FAN_LCR, "Lower Critical"),
                                (FAN_LNR, "Lower Non-recoverable")):
                if new < limit <= old:
                    bmc.log(now, f"Fan FAN{i + 1}", f"{what} going low ",
                            f"Reading {new:.0f} < Threshold {limit:.0f} RPM")

    # ---- files ------------------------------------------------------------------------------
    def _write_node(self, node: NodeState, now: float) -> None:
        if node.spec.kind != "telegraf":
            listed = [g.as_dict(self.rng) for g in node.gpus if g.present]
            self.files.put(node.smi_state, json.dumps({"driver": "550.54.15", "gpus": listed}))
            self.files.put(node.bmc_state, json.dumps(node.bmc.as_dict(self.rng)))
        self._write_ib(node)

    def _write_ib(self, node: NodeState) -> None:
        for p in node.ports:
            d = node.ib_root / p.device / "ports" / "1"
            (d / "counters").mkdir(parents=True, exist_ok=True)
            self.files.put(d / "state", f"{p.state}: {'ACTIVE' if p.state == 4 else 'DOWN'}\n")
            self.files.put(d / "phys_state", f"{p.phys_state}: "
                                      f"{'LinkUp' if p.phys_state == 5 else 'Polling'}\n")
            self.files.put(d / "rate", IB_RATE + "\n")
            for name, v in p.counters.items():
                self.files.put(d / "counters" / name, f"{v}\n")

    @staticmethod
    def _append_log(node: NodeState, lines: list[str]) -> None:
        with node.kernel_log.open("a") as fh:
            fh.write("".join(line + "\n" for line in lines))

    # ---- renderings -------------------------------------------------------------------------
    def dcgm(self, name: str) -> str | None:
        with self.lock:
            node = self.nodes.get(name)
            if node is None or node.spec.kind != "dcgm":
                return None
            gpus = []
            for g in node.gpus:
                if not g.present:
                    continue
                if node.links and not g.nvl:
                    g.nvl = {e: [0] * node.links for e in ("CRC_FLIT", "CRC_DATA", "REPLAY",
                                                           "RECOVERY")}
                gpus.append(g.as_dict(self.rng))
            return dcgm_page(name, gpus, node.links)

    def telegraf(self, name: str, ts_ns: int) -> list[str]:
        with self.lock:
            node = self.nodes[name]
            lines = [telegraf_gpu(name, g.as_dict(self.rng), ts_ns)
                     for g in node.gpus if g.present and not g.lost]
            lines += [telegraf_ib(name, p.device, 1, p.counters, ts_ns) for p in node.ports]
            return lines
