"""The processes of the soak, all on loopback: Debian's influxd and Alertmanager, the service
(`gpuhealth serve` with a config file written here, as a subprocess so it can be `kill -9`ed
and restarted on the same data directory), and the node-agent runners (bench.soak_agent).
Every process is started in its own session and ended by its id, on success, failure or
Ctrl-C alike."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.soak_mail import MailSink
from bench.soak_plan import STORM_FRACTION, Plan
from service.stages.alert_machine import AlertPolicy
from service.stages.fleet_alerts import StormSettings
from tests.influx.server import InfluxServer, free_port
from tests.notify.alertmanager_server import AlertmanagerServer

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[1]
SERVICE_START_S = 180.0  # torch and the model load on a busy 2-core machine
NOTIFY_SECRET = "soak-notify-secret-0123456789"
HOOK_SECRET = "soak-hook-secret-0123456789"
# Short enough that an alert left without refreshes expires in Alertmanager within the run.
AM_RESOLVE_TIMEOUT_S, AM_REFRESH_S = 30.0, 10.0


def storm_settings(plan: Plan) -> dict[str, Any]:
    """A third of the fleet within the storm window trips the storm. The minimum fleet size for
    storms (`min_fleet`, where the service has it) is the soak's fleet, which is smaller than
    its default; the fleet is declared (remediation.fleet_size), since the nodes reporting dip
    below it while a node is offline or removed."""
    out: dict[str, Any] = {"fraction": STORM_FRACTION, "min_nodes": plan.storm_min_nodes,
                           "window_s": plan.storm_window_s}
    if "min_fleet" in StormSettings.model_fields:
        out["min_fleet"] = len(plan.nodes)
    return out


def service_config(plan: Plan, root: Path, port: int, influx_url: str, receiver: str,
                   ib_down_s: float, am_url: str, smtp_port: int) -> dict[str, Any]:
    """The settings the soak runs with: the product's defaults, except timers shortened so
    that alerts resolve and groups flush within a short run, the breaker limits opened because
    the soak injects failures on several nodes of a small fleet on purpose, and the storm set
    to trip at a third of the fleet, and level 2's for-duration and the PCIe width's hold
    shortened (soak_plan) so that level-2 faults reach level 2 within a short run. Every alert
    goes to Alertmanager (`am`, continue), level 2 also by email (`mail`, a loopback SMTP
    server of the harness), level 3 to the page receiver."""
    resolve = max(20.0, round(plan.duration_s * 0.1))
    for_s = list(AlertPolicy().for_s)
    for_s[1] = plan.level2_for_s
    return {
        "service": {"host": "127.0.0.1", "port": port, "collect_interval_s": plan.step_s,
                    "score_interval_s": plan.step_s},
        "storage": {"data_dir": str(root / "var"),
                    "influxdb": {"url": influx_url, "database": "gpuhealth", "cluster": "soak"}},
        "alerts": {"resolve_for_s": resolve, "dwell_s": [0, resolve, resolve], "for_s": for_s},
        "detectors": {"hard": {"ib_down_s": ib_down_s,
                               "pcie_width_hold_s": plan.pcie_width_hold_s},
                      "model": {"path": "default"}},
        "notify": {
            "external_url": f"http://127.0.0.1:{port}",
            "receivers": [{"name": "pager", "type": "webhook",
                           "config": {"url": f"{receiver}/notify", "secret": NOTIFY_SECRET}},
                          {"name": "mail", "type": "email",
                           "config": {"to": ["oncall@soak.invalid"],
                                      "from_addr": "gpuhealth@soak.invalid",
                                      "host": "127.0.0.1", "port": smtp_port, "tls": "none",
                                      "hello": "soak.invalid"}},
                          {"name": "am", "type": "alertmanager",
                           "config": {"urls": [am_url],
                                      "resolve_timeout_s": AM_RESOLVE_TIMEOUT_S,
                                      "refresh_interval_s": AM_REFRESH_S}}],
            "route": {"receiver": "record", "group_by": ["node"], "group_wait_s": 2,
                      "group_interval_s": plan.step_s, "repeat_interval_s": 86400,
                      "routes": [{"receiver": "am", "continue": True},
                                 {"matchers": ["level=2"], "receiver": "mail"},
                                 {"matchers": ["level>=3"], "receiver": "pager"}]},
            "storm": storm_settings(plan),
        },
        "remediation": {"mode": "auto", "hook": "webhook",
                        "hook_config": {"url": f"{receiver}/remediate", "secret": HOOK_SECRET},
                        "breaker_max_fraction": 1.0, "breaker_max_nodes": 1000,
                        "fleet_size": len(plan.nodes)},
    }


class Proc:
    """One child process with its log file."""

    def __init__(self, name: str, argv: list[str], log_file: Path) -> None:
        self.name, self.argv, self.log_file = name, argv, log_file
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with self.log_file.open("ab") as fh:
            fh.write(f"---- start {time.strftime('%H:%M:%S')} {self.name}\n".encode())
            fh.flush()
            self.proc = subprocess.Popen(self.argv, cwd=REPO, env=env, stdout=fh,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()

    def wait(self, timeout_s: float) -> bool:
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True


class Stack:
    def __init__(self, plan: Plan, root: Path, receiver_url: str, ib_down_s: float) -> None:
        self.plan, self.root = plan, root
        self.influx = InfluxServer(root / "influxd")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.am = AlertmanagerServer(root / "alertmanager")
        self.config = root / "gpuhealth.yaml"
        self.mail = MailSink()
        cfg = service_config(plan, root, self.port, self.influx.url, receiver_url, ib_down_s,
                             self.am.url, self.mail.port)
        self.config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        self.settings = cfg
        argv = [sys.executable, "-c", "import sys; from service.commands.cli import main; "
                "sys.exit(main())", "--log-level", "INFO", "serve", "--config", str(self.config)]
        self.service = Proc("service", argv, root / "service.log")
        self.agents: list[Proc] = []
        self.service_starts = 0

    # ---- InfluxDB ---------------------------------------------------------------------------
    def influx_start(self) -> None:
        self.influx.start()

    def influx_stop(self) -> None:
        self.influx.stop()

    # ---- Alertmanager -----------------------------------------------------------------------
    def alertmanager_start(self) -> None:
        self.am.start()

    # ---- the service ------------------------------------------------------------------------
    def service_start(self, wait: bool = True) -> None:
        self.service.start()
        self.service_starts += 1
        if wait:
            self.wait_healthy()

    def wait_healthy(self) -> None:
        wait_healthy(self.service, self.url)

    def service_kill(self) -> None:
        self.service.kill9()

    # ---- node agents ------------------------------------------------------------------------
    def agents_start(self, nodes: list[dict[str, Any]], processes: int,
                     deadline: float) -> None:
        """`deadline` (epoch seconds): the runners stop by then whatever happens."""
        groups = [nodes[i::processes] for i in range(processes)]
        for i, group in enumerate(g for g in groups if g):
            spec = self.root / f"agents-{i}.json"
            spec.write_text(json.dumps({"url": f"{self.url}/write", "interval_s": self.plan.step_s,
                                        "nodes": group, "deadline": deadline}))
            p = Proc(f"agents-{i}", [sys.executable, "-m", "bench.soak_agent", str(spec)],
                     self.root / f"agents-{i}.log")
            p.start()
            self.agents.append(p)

    def agents_wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        return all(a.wait(max(0.0, deadline - time.monotonic())) for a in self.agents)

    # ---- the end ----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop everything that still runs; safe to call twice and from a failure path."""
        for p in [*self.agents, self.service]:
            with contextlib.suppress(Exception):
                p.stop(timeout_s=10)
        with contextlib.suppress(Exception):
            self.influx.stop()
        with contextlib.suppress(Exception):
            self.am.stop()
        with contextlib.suppress(Exception):
            self.mail.stop()


def wait_healthy(service: Proc, url: str) -> None:
    """Until the service at `url` answers /healthz; RuntimeError if it exits or never does."""
    deadline = time.monotonic() + SERVICE_START_S
    while time.monotonic() < deadline:
        if service.pid is None:
            raise RuntimeError(f"the service exited at start; see {service.log_file}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.25)
    raise RuntimeError(f"the service did not answer /healthz within {SERVICE_START_S:g} s")
