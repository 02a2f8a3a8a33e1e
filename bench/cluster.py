"""HA and sharding on loopback, with real processes: PostgreSQL, influxd, a webhook receiver that
records every message, `gpuhealth serve` replicas and simulated node agents.

    python -m bench.cluster [--quick] [--failovers N] [--[no-]starting-round]
                            [--[no-]partition-round] [--shards N] [--[no-]add-shard] [--json]

Three scenarios (bench/cluster_failover.py, bench/cluster_sharded.py,
bench/cluster_rebalance.py): an HA pair whose leader is `kill -9`ed mid-incident `--failovers`
times, then killed while the standby is still starting (`--starting-round`) and paused past
its lease with SIGSTOP (`--partition-round`), every live replica asked who leads all along
(the lease, first-notification and page-after-lease times: min, median and max, and per
round); then `--shards` shards with a static shard map, measured per shard, then
(`--add-shard`) three shards with live membership in PostgreSQL, a fourth added mid-run, one
stopped and one killed (how fast the map moves, how many nodes move, the per-shard figures
before and after). Prints the invariants as the soak does (bench.soak) and exits 1 if one
fails (a round with no notification, a failure not paged, a lost resolve, a duplicate page, a
page later than two ticks after the lease moved each break one), 2 if the stack could not be
run. `--quick` (two failovers, short leases, a short window, no extra rounds, no rebalancing:
about 3 minutes) is what the test suite runs smaller still (tests/bench_smoke/test_cluster.py,
tests/bench_smoke/test_cluster_failover.py); the default is the benchmark and the failover
gate (docs/design.md, "HA and sharding: measured"). The work directory (every process's log,
the ledgers, what the receiver got) is removed after a run whose invariants all hold.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from bench import cluster_verdict as verdict
from bench.cluster_agents import Failure
from bench.cluster_failover import FailoverRun
from bench.cluster_rebalance import RebalanceRun
from bench.cluster_sharded import ShardedRun
from bench.cluster_stack import ClusterStack, Timers
from bench.soak import table
from bench.soak_run import Outcome

log = logging.getLogger("bench.cluster")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the run like Ctrl-C: through the clean-up path


def run(args: argparse.Namespace, root: Path) -> Outcome:
    timers = Timers(lease_ttl_s=args.lease_ttl, lease_renew_s=args.lease_renew,
                    resolve_s=args.resolve_s)
    stack = ClusterStack(root, timers)
    out = Outcome()
    info: dict[str, Any] = {"timers": {**asdict(timers), "xid_hold_s": timers.xid_hold_s}}
    failures: list[Failure] = []
    ledgers: list[Path] = []
    since = time.time() - 60
    try:
        stack.start()
        extra = [k for k, on in (("starting", args.starting_round),
                                 ("partition", args.partition_round)) if on]
        if args.failovers + len(extra) > 0:
            fo = FailoverRun(stack, args.ha_nodes, args.gpus)
            try:
                fo.start()
                for i in range(args.failovers):
                    log.info("failover %d of %d", i + 1, args.failovers)
                    fo.kill_round()
                for kind in extra:
                    log.info("failover round: %s", kind)
                    (fo.starting_round if kind == "starting" else fo.partition_round)()
            finally:
                fo.stop()
                stack.stop_replicas()
            failures += fo.result.failures
            ledgers.append(root / "ledger-failover.lp")
            out.checks += verdict.failover(fo.result, args.failovers + len(extra))
            assert fo.probe is not None
            out.checks += verdict.truth(fo.probe.snapshot(), fo.result)
            info["failover"] = {**fo.result.summary(), "probe_answers": len(fo.probe.seen),
                                "probe_unanswered": fo.probe.errors}
        if args.shards > 0:
            sh = ShardedRun(stack, args.shards, args.nodes, args.gpus)
            try:
                sh.start()
                failed = sh.fail()  # paged and resolved while the window is measured
                sh.measure(args.rounds)
                sh.recover(failed)
            finally:
                sh.stop()
            failures += sh.result.failures
            ledgers.append(root / "ledger-sharded.lp")
            out.checks += verdict.sharding(sh.result, args.gpus)
            info["sharded"] = {**sh.result.summary(), "gpus": args.nodes * args.gpus}
        if args.add_shard:
            rb = RebalanceRun(stack, args.nodes, args.gpus)
            try:
                rb.start()
                rb.run(args.rounds)
            finally:
                rb.stop()
                stack.stop_replicas()
            failures += rb.result.failures
            ledgers.append(root / "ledger-rebalance.lp")
            out.checks += verdict.rebalance(rb.rebalance)
            info["rebalance"] = {**rb.rebalance.summary(), "gpus": args.nodes * args.gpus,
                                 "window_s": round(rb.result.window_s, 1),
                                 "rounds": rb.result.rounds}
        time.sleep(timers.step_s + 5)  # the last rounds reach InfluxDB
        out.checks += verdict.pages(stack.receiver.of("/notify"), failures)
        out.checks.append(verdict.actions(stack.receiver.of("/remediate")))
        out.checks += verdict.samples(ledgers, stack.influx.url, since)
        info["notifications"] = len(stack.receiver.of("/notify"))
        info["remediation_calls"] = len(stack.receiver.of("/remediate"))
        info["work_dir"] = str(root)
        out.info = info
        return out
    finally:
        stack.close()


def report(out: Outcome) -> str:
    lines = [table(out).split("\n\n")[0], ""]
    fo = out.info.get("failover")
    if fo:
        lines += failover_report(fo)
    sh = out.info.get("sharded")
    if sh:
        lines.append(f"sharded: {sh['gpus']} GPUs over {len(sh['shards'])} shards, "
                     f"{sh['rounds']} rounds in {sh['window_s']} s; PostgreSQL "
                     f"{sh['pg_xact_per_s']} commits/s, {sh['pg_rows_per_s']} rows/s; InfluxDB "
                     f"{sh['influx_points_per_s']} points/s")
        lines.append(f"{'shard':<6} {'nodes':>5} {'CPU s/round':>11} {'RSS MiB':>8} "
                     f"{'samples/round':>13} {'307s':>5} {'forwarded':>9}")
        for s, d in sh["shards"].items():
            lines.append(f"{s:<6} {d['nodes_owned']:>5g} {d['cpu_s_per_round']:>11.3f} "
                         f"{d['rss_mib']:>8.1f} {d['samples_ingested_per_round']:>13.0f} "
                         f"{d['redirects_307']:>5g} {d['parts_forwarded']:>9g}")
    rb = out.info.get("rebalance")
    if rb:
        lines += rebalance_report(rb)
    return "\n".join(lines)


def failover_report(fo: dict[str, Any]) -> list[str]:
    kinds = ", ".join(f"{n} {k}" for k, n in fo["kinds"].items())
    lines = [f"failover ({fo['rounds']} rounds: {kinds}), seconds min / median / max:"]
    for what, label in (("lease_s", "lease taken over after the loss"),
                        ("notify_s", "first notification after the loss"),
                        ("page_after_lease_s", "the Xid paged after the lease was taken")):
        d = fo[what]
        lines.append(f"  {label:<40} {d['min']} / {d['median']} / {d['max']}")
    lines.append(f"{'round':<5} {'kind':<9} {'lost':<15} {'to':<5} {'lease':>6} {'notify':>6} "
                 f"{'page':>6} {'p-lease':>7}  paged resolved dup")
    for i, r in enumerate(fo["each_round"], 1):
        lines.append(f"{i:<5} {r['kind']:<9} {r['lost']:<15} {r['to']:<5} "
                     f"{_s(r['lease_s']):>6} {_s(r['notify_s']):>6} {_s(r['page_s']):>6} "
                     f"{_s(r['page_after_lease_s']):>7}  {r['paged']:<5} {r['resolved']:<8} "
                     f"{r['duplicates']}")
    return lines


def rebalance_report(rb: dict[str, Any]) -> list[str]:
    lines = [f"rebalance: {rb['gpus']} GPUs, membership in PostgreSQL; shard {rb['added']} added,"
             f" then stopped (SIGTERM), shard {rb['killed']} killed (SIGKILL, limit "
             f"{rb['limit_s']:g} s) and restarted; moved nodes warm-started: "
             f"{'yes' if rb['warm_started'] else 'NO'}"]
    lines.append(f"{'change':<22} {'epoch':>5} {'map s':>6} {'samples s':>9} {'settled s':>9} "
                 f"{'moved':>9}  to")
    for m in rb["moves"]:
        lines.append(f"{m['what']:<22} {m['epoch']:>5} {_s(m['map_s']):>6} "
                     f"{_s(m['first_samples_s']):>9} {_s(m['settled_s']):>9} "
                     f"{m['moved']:>4} of {m['of']:<3} {','.join(m['to'])}")
    lines.append(f"{'shard':<6} {'nodes':>11} {'CPU s/round':>13} {'RSS MiB':>13} "
                 f"{'samples/round':>13}   (before -> after shard {rb['added']} joined, "
                 f"{rb['rounds']} rounds each)")
    for s in sorted(set(rb["before"]) | set(rb["after"])):
        b, a = rb["before"].get(s, {}), rb["after"].get(s, {})

        def pair(k: str, fmt: str, b: dict[str, float] = b, a: dict[str, float] = a) -> str:
            return f"{_f(b.get(k), fmt)}->{_f(a.get(k), fmt)}"

        lines.append(f"{s:<6} {pair('nodes_owned', '.0f'):>11} "
                     f"{pair('cpu_s_per_round', '.3f'):>13} {pair('rss_mib', '.0f'):>13} "
                     f"{pair('samples_ingested_per_round', '.0f'):>13}")
    return lines


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.cluster",
                                description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="2 failovers, 6/2 s leases, a 4-round window (about 3 minutes)")
    p.add_argument("--failovers", type=int, help="kills of the leader (default 10; 0: none)")
    p.add_argument("--starting-round", action=argparse.BooleanOptionalAction,
                   help="after the kills, kill the leader while the standby is restarting "
                   "(default: on, off with --quick)")
    p.add_argument("--partition-round", action=argparse.BooleanOptionalAction,
                   help="after the kills, pause the leader (SIGSTOP) past its lease, then "
                   "continue it (default: on, off with --quick)")
    p.add_argument("--shards", type=int, default=3, help="shards of the sharded run (0: none)")
    p.add_argument("--nodes", type=int, help="nodes of the sharded run (default 48)")
    p.add_argument("--ha-nodes", type=int, default=6, help="nodes of the HA pair's fleet")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--rounds", type=int, help="5-s rounds measured (default 12)")
    p.add_argument("--lease-ttl", type=float, help="cluster.lease_ttl_s (default 15, shipped)")
    p.add_argument("--lease-renew", type=float, help="cluster.lease_renew_s (default 5)")
    p.add_argument("--resolve-s", type=float, default=15.0,
                   help="alerts.resolve_for_s (and the Xid hold)")
    p.add_argument("--add-shard", action=argparse.BooleanOptionalAction,
                   help="the rebalancing scenario: 3 shards with membership in PostgreSQL, a "
                   "4th added mid-run, one stopped, one killed (default: on, off with "
                   "--quick)")
    p.add_argument("--json", action="store_true", help="print the invariants as JSON")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--dir", type=Path, help="work directory (default: a new temporary one)")
    return p


def settle(args: argparse.Namespace) -> argparse.Namespace:
    """The defaults of the form asked for (--quick or the full one)."""
    # The rebalancing scenario costs about 4 minutes at the quick size: past --quick's budget.
    # The extra failover rounds cost about a kill round each: past --quick's budget too.
    quick = {"failovers": 2, "nodes": 12, "rounds": 4, "lease_ttl": 6.0, "lease_renew": 2.0,
             "add_shard": False, "starting_round": False, "partition_round": False}
    full = {"failovers": 10, "nodes": 48, "rounds": 12, "lease_ttl": 15.0, "lease_renew": 5.0,
            "add_shard": True, "starting_round": True, "partition_round": True}
    for k, v in (quick if args.quick else full).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.quick and args.gpus == 8:
        args.gpus = 4
    return args


def main(argv: list[str] | None = None) -> int:
    args = settle(parser().parse_args(argv))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    root = args.dir or Path(tempfile.mkdtemp(prefix="gpuhealth-cluster-"))
    root.mkdir(parents=True, exist_ok=True)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    t0 = time.time()
    try:
        out = run(args, root)
    except NotImplementedError as exc:
        print(f"bench.cluster: {exc}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError, httpx.HTTPError) as exc:
        print(f"bench.cluster: the stack could not run: {exc}; logs in {root}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
    out.info["wall_s"] = round(time.time() - t0, 1)
    return out.conclude("bench.cluster", report, as_json=args.json,
                        keep=args.keep or args.dir is not None, root=root)


if __name__ == "__main__":
    raise SystemExit(main())
