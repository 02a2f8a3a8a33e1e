"""The soak harness: the real stack on loopback, in real time, through a fault schedule.

    python -m bench.soak [--minutes N] [--gpus N] [--json] [--keep]

Starts Debian's influxd and Alertmanager, the service (`gpuhealth serve`, model on, InfluxDB
storage, an alertmanager receiver for every alert, a webhook receiver for level 3 and the
webhook remediation hook in auto mode, both pointed at a loopback server of the harness), node
agents with nvidia-smi (a fake binary per node printing the real formats), dcgm-exporter pages,
IB sysfs trees and growing kernel logs, and Telegraf-shaped pushes; plays the fault schedule
(bench/soak_plan.py, with its storm phase) scaled to `--minutes`, reading Alertmanager beside
the service every 10 s; then prints a table of invariants (docs/soak.md) and exits 1 if any
breaks, 2 if the stack could not be run.

The short form runs in the test suite (tests/bench_smoke/test_soak.py); the long form
(`--minutes 30 --gpus 256`) is the benchmark. The work directory (logs of every process, the
ledgers of what was sent, what the receiver got) is removed after a run whose invariants all
hold, and kept otherwise or with --keep.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

import httpx

from bench.soak_plan import build
from bench.soak_run import Outcome, SoakRun

log = logging.getLogger("bench.soak")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the run like Ctrl-C: through the clean-up path


def run(minutes: float, gpus: int, root: Path) -> Outcome:
    plan = build(minutes, gpus)
    soak = SoakRun(plan, root)
    try:
        log.info("soak: %d nodes, %d GPUs, %.0f s of schedule; work dir %s", len(plan.nodes),
                 plan.gpus, plan.duration_s, root)
        soak.start()
        soak.play()
        owed_by = soak.settle()
        return soak.judge(owed_by)
    finally:
        soak.close()


def table(out: Outcome) -> str:
    width = max(len(c.name) for c in out.checks)
    rows = [f"{'invariant':<{width}}  {'':4}  {'value':<16}  detail"]
    for c in out.checks:
        mark = ("ok" if c.ok else "FAIL") if c.judged else "info"
        rows.append(f"{c.name:<{width}}  {mark:4}  {c.value:<16}  "
                    f"{c.detail}")
    info = out.info
    rows.append("")
    rows.append(f"{info.get('gpus')} GPUs on {info.get('nodes')} nodes for "
                f"{info.get('duration_s', 0):.0f} s; {info.get('samples_sent')} samples sent, "
                f"{info.get('samples_stored')} stored; {info.get('notifications')} notifications,"
                f" {info.get('drain_requests')} drain requests; service started "
                f"{info.get('service_starts')} times; Alertmanager read {info.get('am_probes')} "
                f"times ({info.get('am_probes_missed')} missed: a side did not answer)")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=3.0, help="length of the fault schedule")
    p.add_argument("--gpus", type=int, default=16, help="fleet size (rounded to whole nodes)")
    p.add_argument("--json", action="store_true", help="print the invariants as JSON")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--dir", type=Path, help="work directory (default: a new temporary one)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd: a line per connection
    root = args.dir or Path(tempfile.mkdtemp(prefix="gpuhealth-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    t0 = time.time()
    try:
        out = run(args.minutes, args.gpus, root)
    except ValueError as exc:
        print(f"bench.soak: {exc}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError, httpx.HTTPError) as exc:
        print(f"bench.soak: the stack could not run: {exc}; logs in {root}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
    out.info["wall_s"] = round(time.time() - t0, 1)
    return out.conclude("bench.soak", table, as_json=args.json,
                        keep=args.keep or args.dir is not None, root=root)


if __name__ == "__main__":
    raise SystemExit(main())
