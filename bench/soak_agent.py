"""The soak's node agents: `python -m bench.soak_agent SPEC.json` runs the product's Agent
(collectors.agent) for each node of the spec, one thread per node, with the node's sources
built through the product's source registry and pointed at the harness's fakes.

Two things are added around the real Agent, both outside its code path:
- a ledger per node: every segment the target took (204, or 400 with the refused lines
  named) is appended to `ledger` as `#push <time> <status>` then its lines then, for a 400,
  `#rej <json answer>`, so the harness counts what was sent against what InfluxDB holds and
  dates when each piece of evidence reached the service;
- a control file per node, which the harness rewrites: `pending` (not started yet), `run`,
  `offline` (the network to the service is down: pushes fail without connecting, rounds are
  spooled), `drain` (stop collecting, push what is spooled, exit), `stopped` (exit now).
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from collectors import registry
from collectors.agent.loop import Agent
from collectors.agent.push import Outcome, Pusher, PushResult, outcome_of
from collectors.agent.spool import Spool
from collectors.base import Collector

log = logging.getLogger(__name__)
DRAIN_TIMEOUT_S = 120.0


def control_state(path: Path) -> str:
    try:
        return path.read_text().strip() or "pending"
    except OSError:
        return "pending"


class LedgerPusher(Pusher):
    def __init__(self, url: str, control: Path, ledger: Path) -> None:
        super().__init__(url, timeout_s=10.0)
        self.control = control
        self.ledger = ledger

    def push(self, body: bytes) -> PushResult:
        if control_state(self.control) == "offline":
            return PushResult(Outcome.RETRY, None, "soak: the node's network is down")
        try:
            r = self.client.post(self.url, content=body, headers=self.headers)
        except httpx.HTTPError as exc:
            return PushResult(Outcome.RETRY, None, f"{type(exc).__name__}: {exc}")
        res = outcome_of(r, body)
        if res.outcome is Outcome.SENT:
            text = gzip.decompress(body).decode()
            with self.ledger.open("a") as fh:
                fh.write(f"#push {time.time():.6f} {r.status_code}\n{text}")
                if not text.endswith("\n"):
                    fh.write("\n")
                if r.status_code == 400:
                    fh.write("#rej " + json.dumps(_json(r)) + "\n")
        return res


def _json(r: httpx.Response) -> Any:
    try:
        return r.json()
    except ValueError:
        return {"error": r.text[:2000]}


def _collectors(node: dict[str, Any]) -> list[Collector]:
    from collectors.registry import gpu_bus_map

    host, root = node["name"], Path(node["root"])
    smi = str(root / "bin" / "nvidia-smi")
    out: list[Collector] = []
    if node["kind"] == "smi":
        out.append(registry.get("nvidia-smi").build(host, {"binary": smi, "xml_interval": 60.0}))
    else:
        out.append(registry.get("dcgm-exporter").build(host, {"url": node["dcgm_url"]}))
    out.append(registry.get("infiniband").build(host, {"root": str(root /
                                                                   "sys-class-infiniband")}))
    # The node's BMC in band, as a fleet reads it: the product's ipmi source running a fake
    # ipmitool (bench.soak_bmc) every round.
    out.append(registry.get("ipmi").build(host, {"binary": str(root / "bin" / "ipmitool"),
                                                 "timeout": 10.0}))
    bus_map = functools.partial(gpu_bus_map, smi)
    out.append(registry.get("kernel-log").build(host, {
        "path": str(root / "kern.log"), "gpu_index": bus_map(), "refresh_index": bus_map}))
    return out


def run_node(node: dict[str, Any], url: str, interval_s: float,
             stop: threading.Event) -> None:
    control = Path(node["control"])
    while control_state(control) == "pending" and not stop.wait(0.2):
        pass
    if stop.is_set() or control_state(control) == "stopped":
        return
    pusher = LedgerPusher(url, control, Path(node["ledger"]))
    agent = Agent(_collectors(node), Spool(node["spool"], 256 << 20), pusher,
                  interval_s=interval_s, backoff_s=(1.0, 5.0), host=node["name"])

    def halt() -> bool:
        return stop.is_set() or control_state(control) in ("drain", "stopped")

    agent.run(halt)
    if control_state(control) != "drain":
        return
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while agent.spool.oldest() is not None and time.monotonic() < deadline and not stop.is_set():
        if not agent.flush():
            time.sleep(0.5)
    log.info("%s: %d rounds, %d segments sent, %d left", node["name"], agent.stats.rounds,
             agent.stats.segments_sent, agent.spool.stats.segments)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(args[0]).read_text())
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [threading.Thread(target=run_node, args=(n, spec["url"], spec["interval_s"], stop),
                                name=n["name"], daemon=True) for n in spec["nodes"]]
    for t in threads:
        t.start()
    # Bounded in time, and never outliving the harness (even one killed with SIGKILL).
    parent = os.getppid()
    while any(t.is_alive() for t in threads):
        if time.time() > spec["deadline"] or os.getppid() != parent:
            stop.set()
        for t in threads:
            t.join(0.5 / len(threads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
