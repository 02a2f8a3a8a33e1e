"""Evaluation benchmark: wall time and peak memory of simulate + evaluate.

    python -m bench.evaluate [--fleet-days 7] [--step 3600] [--sets ours lstm fused] [--json]

Each scenario runs in its own process (so ru_maxrss is its own peak): ci in full, fleet-year
over its first `--fleet-days` days, projected linearly to the whole year (the per-round cost is
flat once the windows are full; memory is bounded by design). `--step` overrides the presets'
sample step, to size the fleet-year preset. `--sets` scores only those detector sets (the
default is every set; the trees baseline, which fits itself for minutes first, is built only when
asked for). Each set's tick is reported in ms per round; the sets that share a model (lstm and
fused) share its hourly run, which the first of them pays. The goal (issue): fleet-year end to
end in under 30 min on a 2-core machine, in under 4 GB.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

GOAL_S = 30 * 60.0
GOAL_MB = 4096.0


def _worker(scenario: str, days: float | None, step: int | None,
            sets: list[str]) -> dict[str, Any]:
    from models.evaluation.sources import scenario_config, simulator_source
    from models.simulator.simulator import Simulator
    from service.commands.evaluate import DETECTOR_SETS, evaluate_source, quiet_pipeline
    from service.settings import Settings

    quiet_pipeline()
    cfg = scenario_config(scenario, 0, days, step)
    full_days = scenario_config(scenario, 0).time.days
    t0 = time.perf_counter()
    for _ in Simulator(cfg).run():
        pass
    simulate_s = time.perf_counter() - t0
    # The trees baseline fits itself on the model's training data once per process (minutes);
    # that is set-up, not the per-round cost measured here.
    if "trees" in sets:
        DETECTOR_SETS["trees"](Settings(), 0)
    t0 = time.perf_counter()
    out = evaluate_source(simulator_source(cfg), sets)
    wall = time.perf_counter() - t0  # simulate (again, lazily) + feed + score
    tm = out["timing"]
    rounds = max(tm["rounds"], 1)
    scale = full_days / cfg.time.days
    return {
        "scenario": scenario, "step_s": cfg.time.step_s, "days_run": cfg.time.days,
        "days_full": full_days, "gpus": cfg.fleet.gpus, "rounds": tm["rounds"],
        "simulate_s": simulate_s, "wall_s": wall,
        "per_round_ms": 1e3 * wall / rounds,
        "ingest_ms": 1e3 * tm["ingest_s"] / rounds,
        "tick_ms": {k: 1e3 * v / rounds for k, v in tm["tick_s"].items()},
        "model_runs": tm.get("model_runs", {}),
        "projected_wall_s": wall * scale,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "alerts": out["alerts"],
    }


def _run(scenario: str, days: float | None, step: int | None,
         sets: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.evaluate", "--worker", scenario, "--sets", *sets]
    if days is not None:
        cmd += ["--days", str(days)]
    if step is not None:
        cmd += ["--step", str(step)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout)
    result["meets_goal"] = (result["projected_wall_s"] < GOAL_S
                            and result["peak_rss_mb"] < GOAL_MB)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleet-days", type=float, default=7.0,
                    help="days of fleet-year to run before projecting (default 7)")
    ap.add_argument("--ci-days", type=float, help="shorten ci (default: the whole preset)")
    ap.add_argument("--step", type=int, help="override the presets' sample step (seconds)")
    ap.add_argument("--sets", nargs="+", help="detector sets to score (default: all)")
    ap.add_argument("--skip-ci", action="store_true", help="run fleet-year only")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--days", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    from service.commands.evaluate import DETECTOR_SETS

    sets = list(args.sets or DETECTOR_SETS)
    unknown = sorted(set(sets) - set(DETECTOR_SETS))
    if unknown:
        ap.error(f"unknown set(s) {', '.join(unknown)}; known: {', '.join(DETECTOR_SETS)}")
    if args.worker:
        print(json.dumps(_worker(args.worker, args.days, args.step, sets)))
        return 0
    results = [] if args.skip_ci else [_run("ci", args.ci_days, args.step, sets)]
    results.append(_run("fleet-year", args.fleet_days, args.step, sets))
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'scenario':>10} {'step':>5} {'days':>9} {'rounds':>7} {'sim s':>7} {'ms/round':>9} "
          f"{'ingest':>7} " + " ".join(f"{s[:7]:>7}" for s in sets)
          + f" {'wall s':>8} {'projected':>10} {'RSS MB':>7} goal")
    for r in results:
        t = r["tick_ms"]
        print(f"{r['scenario']:>10} {r['step_s']:>5} {r['days_run']:>4g}/{r['days_full']:<4g} "
              f"{r['rounds']:>7} {r['simulate_s']:>7.1f} {r['per_round_ms']:>9.1f} "
              f"{r['ingest_ms']:>7.1f} " + " ".join(f"{t.get(s, 0):>7.1f}" for s in sets)
              + f" {r['wall_s']:>8.1f} {r['projected_wall_s']:>10.0f} {r['peak_rss_mb']:>7.0f} "
              f"{'yes' if r['meets_goal'] else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
