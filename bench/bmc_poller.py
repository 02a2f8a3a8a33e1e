"""The central BMC poller against N loopback BMCs (default 1,250) for whole cycles (default
60 s each), one of them hung (accepts, never answers). Prints the poller's CPU seconds per
cycle as a share of one core (the issue's bound: 10 %), its requests, the slowest BMC's read,
and whether every other BMC was read in each cycle despite the hung one.

The BMCs are the DMTF public-rackmount1 mockup (../shared/reference/redfish) served by
tests/collectors/redfish/emulator.py in a process of its own, one port per BMC, with Redfish
session login; the first cycle includes each BMC's discovery.

    python -m bench.bmc_poller [--bmcs 1250] [--cycle-s 60] [--cycles 2] [--hung 1]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from collectors.frames import Rejection
from collectors.lineprotocol import Point
from collectors.redfish.poller import Poller, PollerConfig
from collectors.redfish.secret import Credentials, CredentialStore, Secret
from collectors.redfish.targets import Bmc, bmc

MOCKUP = (Path(__file__).resolve().parents[1] / ".." / "shared" / "reference" / "redfish"
          / "public-rackmount1")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bmcs", type=int, default=1250)
    p.add_argument("--cycle-s", type=float, default=60.0, help="the poll interval (scale down "
                   "for a quick run)")
    p.add_argument("--cycles", type=int, default=2)
    p.add_argument("--hung", type=int, default=1)
    p.add_argument("--timeout-s", type=float, default=None, help="per-BMC timeout (default: "
                   "a third of the cycle, at most 20 s)")
    p.add_argument("--concurrency", type=int, default=100)
    args = p.parse_args(argv)
    if not MOCKUP.is_dir():
        print(f"no mockup at {MOCKUP}: the DMTF public-rackmount1 tree is needed",
              file=sys.stderr)
        return 2
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    timeout = args.timeout_s or min(20.0, args.cycle_s / 3)
    with tempfile.TemporaryDirectory() as tmp:
        ports_file = Path(tmp) / "ports"
        emu = subprocess.Popen(
            [sys.executable, "-m", "tests.collectors.redfish.emulator", str(MOCKUP),
             "--bmcs", str(args.bmcs), "--hung", str(args.hung), "--user", "monitor",
             "--password", "bench-secret", "--ports-file", str(ports_file)])
        try:
            deadline = time.monotonic() + 120
            while not ports_file.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            ports = [int(x) for x in ports_file.read_text().split()]
            bmcs = [bmc(f"n{i:05d}", f"http://127.0.0.1:{port}") for i, port in enumerate(ports)]
            return asyncio.run(_run(args, bmcs, timeout))
        finally:
            emu.terminate()
            emu.wait(10)


async def _run(args: argparse.Namespace, bmcs: list[Bmc], timeout: float) -> int:
    points = 0
    refusals: list[Rejection] = []

    def emit(ps: list[Point], rejected: list[Rejection]) -> None:
        nonlocal points
        points += len(ps)
        refusals.extend(r for r in rejected if r.metric == "bmc_reachable")

    creds = CredentialStore(Credentials("monitor", Secret("bench-secret")))
    config = PollerConfig(interval_s=args.cycle_s, timeout_s=timeout,
                          concurrency=args.concurrency)
    poller = Poller(bmcs, creds, config, emit)
    stop = asyncio.Event()
    task = asyncio.create_task(poller.run(stop))
    hung = {b.name for b in bmcs[:args.hung]}
    print(f"{len(bmcs)} BMCs ({args.hung} hung), cycle {args.cycle_s:g} s, timeout "
          f"{timeout:g} s, concurrency {args.concurrency}")
    ok = True
    for cycle in range(1, args.cycles + 1):
        reads0 = {s.bmc.name: s.reads for s in poller.states}
        requests0 = sum(s.client.requests for s in poller.states)
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(args.cycle_s)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        requests = sum(s.client.requests for s in poller.states) - requests0
        read = [s for s in poller.states if s.reads > reads0[s.bmc.name]]
        missed = [s.bmc.name for s in poller.states
                  if s.bmc.name not in hung and s.reads == reads0[s.bmc.name]]
        slowest = max(read, key=lambda s: s.last_seconds, default=None)
        hung_state = [s for s in poller.states if s.bmc.name in hung]
        print(f"cycle {cycle}: CPU {cpu:.2f} s over {wall:.1f} s = {100 * cpu / wall:.1f} % of "
              f"one core; {len(read)} BMCs read, {requests} requests "
              f"({1e6 * cpu / max(requests, 1):.0f} us CPU each)")
        if slowest is not None:
            print(f"  slowest BMC read: {slowest.bmc.name} {1e3 * slowest.last_seconds:.1f} ms; "
                  f"median {1e3 * _median([s.last_seconds for s in read]):.1f} ms")
        shown = ", ".join(f"{s.bmc.name} reachable={s.reachable} ({s.last_error})"
                          for s in hung_state)
        print(f"  hung: {shown or 'none'}")
        print(f"  BMCs other than the hung not read this cycle: {len(missed)}"
              + (f" ({', '.join(missed[:5])})" if missed else ""))
        ok = ok and not missed
    stop.set()
    await task
    await poller.aclose()
    print(f"points {points}; unreachable reports {len(refusals)}")
    print("one hung BMC delayed no other" if ok else "some BMCs were not read in a cycle")
    return 0 if ok else 1


def _median(xs: list[float]) -> float:
    xs = sorted(x for x in xs if not math.isnan(x))
    return xs[len(xs) // 2] if xs else math.nan


if __name__ == "__main__":
    sys.exit(main())
