"""One soak run: set the stack up, play the fault schedule in real time, let the senders drain,
judge the invariants, and take everything down again (bench/soak.py is the command)."""

from __future__ import annotations

import json
import logging
import math
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import soak_bmc
from bench import soak_boards as boards
from bench import soak_level2 as level2
from bench import soak_storm as storm
from bench import soak_verdict as verdict
from bench.soak_alertmanager import AmProbe, AmSample, read_once
from bench.soak_fleet import Fleet, serial_of
from bench.soak_ledger import Push, read, sent_samples
from bench.soak_plan import Fault, Plan
from bench.soak_probe import Probe
from bench.soak_receiver import Receiver
from bench.soak_smi import write_executable
from bench.soak_stack import REPO, Stack
from bench.soak_telegraf import TelegrafSender

log = logging.getLogger(__name__)
TICK_S = 0.5  # the schedule loop's period
AGENT_DRAIN_S = 150.0
SETTLE_S = 15.0  # after the senders stop: the last tick, group flush and InfluxDB delivery


@dataclass(slots=True)
class Outcome:
    checks: list[verdict.Check] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks if c.judged)

    def conclude(self, name: str, render: Callable[[Outcome], str], *, as_json: bool,
                 keep: bool, root: Path) -> int:
        """Print the invariants (a table, or JSON), drop the work directory of a run that
        passed unless it is to be kept, and give the exit code: 0 all held, 1 one failed."""
        if as_json:
            print(json.dumps({"ok": self.ok, "invariants": [c.as_dict() for c in self.checks],
                              "info": self.info}, indent=2))
        else:
            print(render(self))
        if self.ok and not keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"{name}: work directory kept: {root}", file=sys.stderr)
        return 0 if self.ok else 1


class SoakRun:
    def __init__(self, plan: Plan, root: Path, *, ib_down_s: float = 30.0) -> None:
        self.plan, self.root, self.ib_down_s = plan, root, ib_down_s
        self.fleet = Fleet(plan, root / "nodes")
        self.receiver = Receiver(self.fleet, root / "received.jsonl")
        self.stack = Stack(plan, root, self.receiver.url, ib_down_s)
        self.probe = Probe(self.stack.url, lambda: self.stack.service.pid)
        self.am_probe = AmProbe(self.stack.url, self.stack.am.url, lambda: self.stack.service.pid)
        self.t0 = math.nan
        self.marks: dict[str, float] = {}  # what happened when (wall time)
        agent_nodes = [n for n in plan.nodes if n.kind != "telegraf"]
        self.agent_nodes = [n.name for n in agent_nodes]
        self.telegraf = TelegrafSender(self.fleet, [n.name for n in plan.nodes
                                                    if n.kind == "telegraf"],
                                       self.stack.url, root / "ledger-telegraf.lp", plan.step_s,
                                       self._alive)
        self._restart: threading.Thread | None = None

    # ---- set-up -----------------------------------------------------------------------------
    def _control(self, node: str, state: str) -> None:
        path = self.fleet.nodes[node].root / "control"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(state + "\n")
        tmp.replace(path)

    def _alive(self, node: str, now: float) -> bool:
        spec = self.plan.node(node)
        rel = now - self.t0
        return rel >= spec.start_at and (spec.stop_at is None or rel < spec.stop_at)

    def start(self) -> None:
        now = time.time()
        self.fleet.advance(now)
        for name in self.agent_nodes:
            node = self.fleet.nodes[name]
            write_executable(node.smi_binary, node.smi_state, REPO)
            soak_bmc.write_executable(node.ipmitool, node.bmc_state, REPO)
            self._control(name, "run" if node.spec.start_at == 0 else "pending")
        self.receiver.start()
        self.stack.alertmanager_start()
        self.stack.influx_start()
        self.stack.service_start()
        specs = [{"name": n, "kind": self.fleet.nodes[n].spec.kind,
                  "root": str(self.fleet.nodes[n].root),
                  "control": str(self.fleet.nodes[n].root / "control"),
                  "ledger": str(self.fleet.nodes[n].root / "ledger.lp"),
                  "spool": str(self.fleet.nodes[n].root / "spool"),
                  "dcgm_url": f"{self.receiver.url}/dcgm/{n}/metrics"} for n in self.agent_nodes]
        deadline = time.time() + self.plan.duration_s + AGENT_DRAIN_S + 600.0
        self.stack.agents_start(specs, max(1, min(4, math.ceil(len(specs) / 8))), deadline)
        self.t0 = time.time()
        self.telegraf.start()
        self.probe.start()
        self.am_probe.start()

    # ---- the schedule -----------------------------------------------------------------------
    def play(self) -> None:
        faults = list(self.plan.faults)
        end = self.t0 + self.plan.duration_s
        last_advance = 0.0
        while (now := time.time()) < end:
            while faults and self.t0 + faults[0].at <= now:
                self._apply(faults.pop(0), now)
            if now - last_advance >= 1.0:
                self.fleet.advance(now)
                last_advance = now
            time.sleep(TICK_S)
        for f in faults:  # none should be left; a fault never skipped silently
            log.warning("fault %s at +%.0f s was not reached", f.what, f.at)

    def _apply(self, f: Fault, now: float) -> None:
        log.info("+%5.1f s  %s %s%s", now - self.t0, f.what, f.node,
                 f":gpu{f.gpu}" if f.gpu >= 0 else (f":{f.port}" if f.port else (
                     f" unit {f.unit}" if f.unit else "")))
        self.marks.setdefault(f.what + (f":{f.node}" if f.node else ""), now)
        if f.what == "influx_stop":
            self.stack.influx_stop()
        elif f.what == "influx_start":
            self.stack.influx_start()
        elif f.what == "service_kill":
            self.stack.service_kill()
        elif f.what == "service_start":
            # Not waited for here: the schedule goes on while the service loads.
            self._restart = threading.Thread(target=self.stack.service_start, daemon=True)
            self._restart.start()
        elif f.what in ("agent_offline", "agent_online"):
            self._control(f.node, "offline" if f.what == "agent_offline" else "run")
        elif f.what == "node_start":
            if f.node in self.agent_nodes:
                self._control(f.node, "run")
        elif f.what == "node_stop":
            if f.node in self.agent_nodes:
                self._control(f.node, "stopped")
        elif f.what.startswith("tg_") or f.what == "bad_lines":
            self.telegraf.inject(f.what, f.node)
        else:
            self.fleet.apply(f, now)

    # ---- the end ----------------------------------------------------------------------------
    def settle(self) -> float:
        """Stop the senders, wait until what they spooled reached the service and the service
        delivered what it owes; returns the time resolves are owed by."""
        if self._restart is not None:
            self._restart.join(timeout=240)
        for name in self.agent_nodes:
            if self.plan.node(name).stop_at is None:
                self._control(name, "drain")
        self.telegraf.stop()
        if not self.stack.agents_wait(AGENT_DRAIN_S):
            log.warning("agents did not drain within %.0f s", AGENT_DRAIN_S)
        owed_by = time.time()
        deadline = time.time() + SETTLE_S + 60.0
        spool = self.root / "var" / "influx-spool"
        time.sleep(SETTLE_S)
        while time.time() < deadline and any(spool.glob("seg-*")):
            time.sleep(1.0)
        return owed_by - 2 * self.plan.step_s - 5.0  # a group's wait and interval, and a send

    def judge(self, owed_by: float) -> Outcome:
        self.probe.stop()
        self.am_probe.stop()
        out = Outcome()
        pushes: list[Push] = []
        for name in self.agent_nodes:
            pushes += read(self.fleet.nodes[name].root / "ledger.lp", name)
        pushes += read(self.root / "ledger-telegraf.lp", "telegraf")
        api = verdict.Api(self.stack.url)
        snaps = self.probe.snapshots
        try:
            out.checks += verdict.scoring(snaps)
            out.checks += verdict.failures(api, self.plan, pushes, self.ib_down_s, self.t0)
            silent_at = self.marks.get(f"gpu_silent:{self.plan.silent_gpu.split(':')[0]}")
            if silent_at is not None:
                out.checks.append(verdict.silent_gpu(api, self.plan, silent_at,
                                                      verdict.STALE_AFTER_S))
            out.checks += verdict.pages(api, self.plan, self.receiver.of("/notify"), owed_by)
            out.checks.append(verdict.drains(self.plan, self.receiver.of("/remediate")))
            rows, raised = level2.level2(api, self.plan, pushes,
                                         storm.first_ticks(self.probe.snapshots),
                                         self.am_probe.samples, self._am_now(),
                                         self.stack.mail.alerts(), self.t0)
            out.checks.append(level2.no_drain(self.receiver.of("/remediate"), raised))
            out.checks += rows
            out.checks += self._storm(api, pushes)
            out.checks += boards.boards(self.stack.url, self._boards(), self._swapped())
            sent = sent_samples(pushes)
            stored = verdict.influx_counts(self.stack.influx.url, self.t0 - 120)
            out.checks += verdict.samples(sent, stored, pushes)
            out.checks += verdict.flat(snaps, self.t0, self.t0 + self.plan.duration_s)
            out.info = self._info(api, pushes, sent.counts(), stored)
        finally:
            api.close()
        return out

    def _boards(self) -> dict[str, tuple[str, str, str]]:
        """Each GPU a source lists now: its board's UUID and serial, and the source's kind."""
        out: dict[str, tuple[str, str, str]] = {}
        with self.fleet.lock:
            for spec in self.plan.nodes:
                if spec.stop_at is not None:
                    continue  # removed: the service forgets it
                for g in self.fleet.nodes[spec.name].gpus:
                    if g.present and not g.lost:
                        out[f"{spec.name}:gpu{g.index}"] = (g.uuid, serial_of(g.uuid),
                                                            spec.kind)
        return out

    def _swapped(self) -> str:
        """The GPU whose board the plan replaced, once it was."""
        return next((f"{f.node}:gpu{f.gpu}" for f in self.plan.faults
                     if f.what == "gpu_swap" and f"gpu_swap:{f.node}" in self.marks), "")

    def _am_now(self) -> AmSample | None:
        """Alertmanager and the service now, read together."""
        try:
            return read_once(self.stack.url, self.stack.am.url, lambda: self.stack.service.pid)
        except (ValueError, KeyError):
            return None

    def _storm(self, api: verdict.Api, pushes: list[Push]) -> list[verdict.Check]:
        notes = self.receiver.of("/notify")
        starts = storm.first_ticks(self.probe.snapshots)
        return [storm.storm_raised(api, self.plan, self.t0),
                *storm.in_alertmanager(api, self.plan, self.am_probe.samples, starts, self.t0),
                storm.hard_faults_paged(self.plan, notes, pushes, self.ib_down_s),
                storm.deliveries(api, lambda: self.receiver.of("/notify"), self._am_now)]

    def _info(self, api: verdict.Api, pushes: list[Push], sent: dict[Any, int],
              stored: dict[Any, int]) -> dict[str, Any]:
        snaps = self.probe.snapshots
        drains = self.receiver.of("/remediate")
        return {
            "duration_s": self.plan.duration_s, "gpus": self.plan.gpus,
            "nodes": len(self.plan.nodes), "agent_nodes": len(self.agent_nodes),
            "service_starts": self.stack.service_starts,
            "pushes": len(pushes), "samples_sent": sum(sent.values()),
            "samples_stored": sum(stored.values()),
            "notifications": len(self.receiver.of("/notify")),
            "mails": self.stack.mail.mails,
            "drain_requests": len(drains),
            "drained_nodes": sorted({str(d.body.get("node")) for d in drains}),
            "dcgm_scrapes": self.receiver.dcgm_scrapes, "telegraf": dict(self.telegraf.stats),
            "removed_node_no_data_alert": verdict.node_no_data(api, self.plan.removed_node),
            "rss_mib_max": round(max((s.rss_bytes for s in snaps), default=0) / 2**20, 1),
            "probe_snapshots": len(snaps),
            "am_probes": len(self.am_probe.samples), "am_probes_missed": self.am_probe.missed,
            "schedule": {k: round(v - self.t0, 1) for k, v in sorted(self.marks.items(),
                                                                      key=lambda kv: kv[1])},
            "work_dir": str(self.root),
        }

    def close(self) -> None:
        for stop in (self.probe.stop, self.am_probe.stop, self.telegraf.stop, self.stack.close,
                     self.receiver.stop):
            try:
                stop()
            except Exception:  # the rest must still be stopped
                log.exception("soak: stopping %s failed", stop)
