"""The learning loop end to end, on a simulated fleet whose failure mix differs from the shipped
model's training data, against a real influxd:

1. the first `--train-days` run through the live pipeline (InfluxDB sink, auto-labeller, the
   shipped model active): samples and auto labels land in InfluxDB;
2. `gpuhealth train --from-influx` over that span, in a child process, from the auto labels only
   (the simulator's own labels are never read);
3. the new model goes into shadow beside the shipped one for the remaining days;
4. both are scored against the auto labels that arrive meanwhile (`gpuhealth model compare`),
   and the judgement says whether the retrained model may be promoted; the CLI promotes it when
   it is better and rolls it back, to show both work on the result.

    python -m bench.learning                    # 32 nodes, 28 days at 300 s (tens of minutes)
    python -m bench.learning --nodes 4 --days 4 --train-days 2 --epochs 2   # the smoke size
    python -m bench.learning --init default     # fine-tune from the shipped model instead

Figures: the label counts per mode the training saw, the training's wall time and peak memory,
and per stream (active and challenger, fused and model alone) at the watch and warning views:
failures, detected, false alarms, precision, recall, F1, false alarms per 1,000 node-days,
median lead. Nothing is asserted; docs/learning.md keeps a run's figures.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from models.evaluation.rounds import feed_rounds
from models.evaluation.sources import simulator_source
from models.simulator.config import SimConfig
from models.simulator.scenarios import merge, scenario_tree
from service.assembly import Wiring
from service.history.influx.sink import InfluxSink
from service.learning import promotion
from service.learning.scoreboard import PromotionPolicy
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from service.stages.windows import window_config_for
from tests.influx.server import InfluxServer

DAY = 86400.0
# An HBM- and NVLink-heavy fleet with few hard GPU faults: the shipped model's train family
# draws rates around the defaults (M1 0.030, M2 0.050, M3 0.015, M5 0.0025 per GPU-year).
MIX = {"M1_hbm": 0.09, "M2_gpu_hard": 0.015, "M3_nvlink": 0.05, "M4_ib_link": 0.01,
       "M5_thermal": 0.015, "M6_sram": 0.004, "M7_unobservable": 0.02}


def scenario(nodes: int, days: float, seed: int, multiplier: float) -> SimConfig:
    tree = merge(scenario_tree("ci"), {
        "name": "learning-mix", "seed": seed, "fleet": {"nodes": nodes},
        "time": {"days": days},
        "failures": {"rates": MIX, "rate_multiplier": multiplier}})
    return SimConfig.model_validate(tree)


def settings(data: Path, url: str) -> Settings:
    return Settings.model_validate({
        "storage": {"data_dir": data, "influxdb": {"url": url, "database": "learning",
                                                   "cluster": "bench", "raw_retention": "INF",
                                                   "rollup_retention": "INF"}},
        "notify": {"route": {"receiver": "record", "group_wait_s": 0}}})


def config_file(root: Path, data: Path, url: str) -> Path:
    """The settings file `gpuhealth train --from-influx` reads: the bench's InfluxDB."""
    cfg = root / "gpuhealth.yaml"
    cfg.write_text(json.dumps({"storage": {"data_dir": str(data), "influxdb": {
        "url": url, "database": "learning", "cluster": "bench",
        "raw_retention": "INF", "rollup_retention": "INF"}}}))
    return cfg


def _pipeline(s: Settings, step_s: float) -> Pipeline:
    s = s.model_copy(update={"window": window_config_for(step_s)})
    return build_pipeline(s, Wiring(notifiers=(), remediate=False, sample_history=False,
                                    notify_background=False))


def _feed(pipe: Pipeline, rounds: Any, until: float) -> tuple[int, Any]:
    """Feed rounds with data time before `until`; the first round at or after it is handed
    back (it belongs to the next phase)."""
    n = 0
    for r in rounds:
        if r.now >= until:
            return n, r
        pipe.ingest(r.batch, r.now)
        pipe.tick(r.now)
        n += 1
    return n, None


def _train(cfg: Path, start: float, end: float, out: Path, epochs: int | None,
           init: str | None) -> dict[str, Any]:
    cmd = [sys.executable, "-c", "import sys; from service.commands.cli import main; "
           "sys.exit(main())", "train", "--from-influx", "--since", str(start), "--until",
           str(end), "--config", str(cfg), "--out", str(out), "--no-progress", "--json"]
    cmd += [] if epochs is None else ["--epochs", str(epochs)]
    cmd += [] if init is None else ["--init", init]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    # The peak of the children reaped so far: the training (influxd still runs, not counted).
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if done.returncode != 0:
        raise SystemExit(f"training failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    card = json.loads(done.stdout)
    return {"wall_s": round(wall, 1), "peak_rss_mb": round(peak, 1), "card": card}


def run(nodes: int, days: float, train_days: float, seed: int, multiplier: float,
        epochs: int | None, root: Path, init: str | None = None) -> dict[str, Any]:
    cfg_sim = scenario(nodes, days, seed, multiplier)
    src = simulator_source(cfg_sim)
    step = src.step_s
    srv = InfluxServer(root / "influxd")
    srv.start()
    try:
        data = root / "data"
        s = settings(data, srv.url)
        cfg = config_file(root, data, srv.url)
        start = float(src.start or 0.0)
        split = start + train_days * DAY
        rounds = iter(feed_rounds(src.chunks, step))
        # One service throughout, as in production: it keeps scoring while the model trains.
        pipe = _pipeline(s, step)
        try:
            t0 = time.perf_counter()
            n1, carry = _feed(pipe, rounds, split)
            for sink in (x for x in pipe.sinks if isinstance(x, InfluxSink)):
                sink.flush(600)
            phase1 = {"rounds": n1, "wall_s": round(time.perf_counter() - t0, 1),
                      "labels": pipe.labels.counts()}
            art = root / "retrained"
            trained = _train(cfg, start, split, art, epochs, init)
            assert pipe.registry is not None and pipe.roles is not None
            promotion.shadow(pipe.registry, art, "bench", split)
            pipe.roles.check(force=True)
            t0 = time.perf_counter()
            n2 = 0
            if carry is not None:
                pipe.ingest(carry.batch, carry.now)
                pipe.tick(carry.now)
                n2 = 1
            more, _ = _feed(pipe, rounds, float("inf"))
            n2 += more
            end = float(src.end or split)
            policy = PromotionPolicy(min_days=min(7.0, (end - split) / DAY * 0.9))
            board = promotion.compare(pipe.registry, pipe.labels, policy, end,
                                      pipe.roles.active())
            phase2 = {"rounds": n2, "wall_s": round(time.perf_counter() - t0, 1),
                      "labels": pipe.labels.counts(since=split)}
        finally:
            pipe.close()
        return {"scenario": {"nodes": nodes, "gpus": nodes * 8, "days": days,
                             "train_days": train_days, "seed": seed, "step_s": step,
                             "rate_multiplier": multiplier, "rates": MIX},
                "phase1": phase1, "training": {k: trained[k] for k in ("wall_s",
                                                                       "peak_rss_mb")},
                "learned_from": trained["card"].get("learned_from"),
                "fine_tuned_from": trained["card"].get("fine_tuned_from"),
                "history": trained["card"].get("history"),
                "shadow": phase2, "compare": board}
    finally:
        srv.stop()


def _table(board: dict[str, Any]) -> str:
    rows = [("stream", "view", "failures", "detected", "false alarms", "precision", "recall",
             "F1", "FA/1k node-days", "median lead h")]
    for stream, views in board.get("scores", {}).items():
        for view in ("watch", "warning"):
            x = views[view]
            lead = (x.get("lead") or {}).get("median_h")
            rows.append((stream, view, str(x["failures"]), str(x["detected"]),
                         str(x["false_alarms"]), _n(x["precision"]), _n(x["recall_all"]),
                         _n(x["f1_all"]), _n(x["fa_per_1000_node_days"]), _n(lead)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def _n(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, default=32)
    p.add_argument("--days", type=float, default=28.0)
    p.add_argument("--train-days", type=float, default=14.0)
    p.add_argument("--seed", type=int, default=3000)
    p.add_argument("--rate-multiplier", type=float, default=30.0)
    p.add_argument("--epochs", type=int, help="training epochs (default: train's, 20 from "
                   "scratch, 8 with --init)")
    p.add_argument("--init", metavar="PATH|default", help="fine-tune from this artifact "
                   "(`default`: the shipped model) instead of training from scratch")
    p.add_argument("--json", action="store_true")
    p.add_argument("--loop", action="store_true", help="the default loop on its own, in "
                   "simulated time (bench/learning_loop.py): no --train-days, --epochs, --init")
    args = p.parse_args(argv)
    if args.loop:
        from bench.learning_loop import run as loop
        from bench.learning_loop import show

        with tempfile.TemporaryDirectory(prefix="gpuhealth-loop-") as tmp:
            res = loop(args.nodes, args.days, args.seed, args.rate_multiplier, Path(tmp))
        if args.json:
            print(json.dumps(res, indent=2, default=str))
        else:
            show(res)
        return 0
    if not 0 < args.train_days < args.days:
        p.error("--train-days must lie between 0 and --days")
    with tempfile.TemporaryDirectory(prefix="gpuhealth-learning-") as tmp:
        out = run(args.nodes, args.days, args.train_days, args.seed, args.rate_multiplier,
                  args.epochs, Path(tmp), args.init)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    sc = out["scenario"]
    print(f"fleet: {sc['gpus']} GPUs, {sc['days']:g} days at {sc['step_s']:g} s, failure mix "
          f"{sc['rates']} x{sc['rate_multiplier']:g}")
    print(f"phase 1 (days 0-{sc['train_days']:g}): {out['phase1']['rounds']} rounds in "
          f"{out['phase1']['wall_s']} s; auto failure labels per mode "
          f"{out['phase1']['labels']}")
    ft = out.get("fine_tuned_from")
    print(f"train --from-influx{' fine-tuned from ' + ft['version'] if ft else ''}: "
          f"{out['training']['wall_s']} s, peak RSS {out['training']['peak_rss_mb']} MB; "
          "validation AP per epoch " + "; ".join(
              f"{scope} " + " ".join(_n(r['val_ap']) for r in rows)
              for scope, rows in (out.get("history") or {}).items()))
    print(f"shadow (days {sc['train_days']:g}-{sc['days']:g}): {out['shadow']['rounds']} "
          f"rounds in {out['shadow']['wall_s']} s; auto failure labels "
          f"{out['shadow']['labels']}")
    print(_table(out["compare"]))
    j = out["compare"].get("judgement", {})
    print("judgement: " + ("the retrained model is at least as good" if j.get("better") else
                           "refused: " + "; ".join(j.get("reasons", []))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
