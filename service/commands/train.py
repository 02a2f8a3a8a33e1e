"""`gpuhealth train`: replay labelled data through the window store, record hourly features,
train the failure predictor per scope, calibrate it, and write the artifact and its model card.

    gpuhealth train --scenario ci --seeds 1000 1001 --out var/model
    gpuhealth train --trace DIR [--labels FILE] --out var/model
    gpuhealth train --from-influx --since 90d [--config FILE] --out var/model

Training data never comes from the seeds the evaluation scores (0-4 by default): a model is
judged on fleets it has not seen. The features are the ones the live detector computes, from
the same window store fed the same way, so what is trained on is what is served.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from service.commands.cli import register
from service.commands.train_artifact import write_artifact
from service.commands.usage import UsageError, no_data, out_dir, scenario_errors, trace_missing

log = logging.getLogger(__name__)
HELP = "train the LSTM failure predictor on a scenario or a labelled trace"
DEFAULT_SEEDS = (1000, 1001)


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", default="ci", help="preset (demo, ci, fleet-year), family "
                   "(train-family, shifted-family) or YAML file")
    p.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS),
                   help="simulator seeds to train on (default 1000 1001; evaluation uses 0-4)")
    p.add_argument("--days", type=float, help="shorten (or lengthen) the scenario")
    p.add_argument("--trace", type=Path, action="append",
                   help="train on a recorded trace with labels instead (repeatable)")
    p.add_argument("--labels", type=Path, help="labels file for a single --trace")
    p.add_argument("--out", type=Path, required=True, help="artifact directory to write")
    from service.commands import train_init

    train_init.add_arguments(p)
    p.add_argument("--seed", type=int, default=0, help="training seed (weights, sampling)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    from service.commands.train_influx import add_arguments

    add_arguments(p)


def record_source(src: Any) -> tuple[dict[Any, Any], list[Any]]:
    """Replay one source through a window store; the hourly features per scope and the
    failures it is labelled with."""
    from models.evaluation.events import truth_from_labels
    from models.evaluation.rounds import feed_rounds
    from models.predictor.dataset import HourlyRecorder
    from service.assembly import Wiring
    from service.pipeline import build_pipeline
    from service.settings import Settings
    from service.stages.windows import window_config_for

    settings = Settings(window=window_config_for(src.step_s),
                        detectors={"model": {"path": "none"}})  # type: ignore[arg-type]
    pipe = build_pipeline(settings, Wiring.offline())
    rec = HourlyRecorder()
    rounds = 0
    try:
        for r in feed_rounds(src.chunks, src.step_s):
            if src.start is not None and r.now < src.start:
                continue
            pipe.ingest(r.batch, r.now)
            rec.observe(pipe.scorer.view, r.now)
            rounds += 1
    finally:
        pipe.close()
    if not rounds:  # a file that is not line protocol: no model is better than an empty one
        raise NoData(f"{src.name}: no data")
    return rec.runs(), list(truth_from_labels(src.labels).failures)


class NoData(ValueError):
    """A source gave no round to learn from."""


def sources(args: argparse.Namespace) -> list[Any]:
    from models.evaluation.sources import scenario_config, simulator_source, trace_source

    if args.trace:
        if args.labels and len(args.trace) > 1:
            raise UsageError("--labels goes with a single --trace")
        if args.labels is not None and not args.labels.is_file():
            raise UsageError(f"--labels {args.labels}: no such file")
        try:
            return [trace_source(t, args.labels) for t in args.trace]
        except FileNotFoundError as exc:
            raise trace_missing(exc) from None
    with scenario_errors(args.scenario):
        return [simulator_source(scenario_config(args.scenario, s, days=args.days))
                for s in args.seeds]


def run(args: argparse.Namespace) -> int:
    from collectors.catalog import Scope
    from models.predictor.dataset import targets
    from models.predictor.package import to_artifact
    from models.predictor.train import TrainConfig, train_scope
    from service.commands.train_init import resolve

    for flag in ("epochs", "hidden", "window", "threads", "patience"):  # before hours of work
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise UsageError(f"--{flag} {getattr(args, flag)}: give 1 or more")
    if args.lr is not None and not 0 < args.lr < 1:
        raise UsageError(f"--lr {args.lr:g}: give a learning rate between 0 and 1")
    init = resolve(args)  # before any data is read: a mismatched init is refused at once
    out_dir(args.out)
    if args.from_influx:
        from service.commands import train_influx

        return train_influx.run(args, _progress, init)
    if args.days is not None and args.days <= 0:
        raise UsageError(f"--days {args.days:g}: give a positive number of days")
    cfg = TrainConfig(window_h=args.window, hidden=args.hidden, epochs=args.epochs,
                      seed=args.seed, threads=args.threads, lr=args.lr, patience=args.patience)
    started = time.perf_counter()
    runs: dict[Scope, list[Any]] = {}
    failures: list[list[Any]] = []
    data: list[dict[str, Any]] = []
    for src in sources(args):
        t0 = time.perf_counter()
        try:
            per_scope, fails = record_source(src)
        except NoData:
            trace = next((t for t in args.trace or () if t.name == src.name), Path(src.name))
            raise no_data(trace, src.step_s) from None
        for scope, rf in per_scope.items():
            runs.setdefault(scope, []).append(rf)
        failures.append(fails)
        data.append({"source": src.name, **src.meta, "step_s": src.step_s,
                     "failures": len(fails), "record_s": round(time.perf_counter() - t0, 1)})
        log.info("recorded %s in %.0f s: %d failures", src.name, time.perf_counter() - t0,
                 len(fails))
    results = []
    for scope, rfs in runs.items():
        tg = [targets(rf, fails, cfg.horizons, cfg.window_h)
              for rf, fails in zip(rfs, failures, strict=True)]
        if not any(t.valid.any() for t in tg):
            raise UsageError(f"no usable {scope} samples in the data")
        bar = _progress(scope.value, cfg.epochs, not args.no_progress)
        try:
            results.append(train_scope(scope, rfs, tg, cfg, progress=bar.update,
                                       init=None if init is None else init.scopes.get(scope)))
        finally:
            bar.close()
    wall = time.perf_counter() - started
    meta: dict[str, Any] = {"data": data, "train_wall_s": round(wall, 1),
                            "command": _reconstruct(args)}
    if init is not None:
        meta["fine_tuned_from"] = init.describe(args.lr, args.epochs, args.patience)
    artifact = to_artifact(results, cfg, meta, version=_version(meta, cfg))
    write_artifact(artifact, args.out, args.json, lambda digest: (
        f"trained in {wall:.0f} s; artifact {args.out} (weights sha256 {digest[:12]}); "
        f"model card {args.out / 'MODEL_CARD.md'}"))
    return 0


def _reconstruct(args: argparse.Namespace) -> str:
    from service.commands.train_init import command_flag

    parts = ["gpuhealth train"]
    if args.trace:
        parts += [f"--trace {t}" for t in args.trace]
    else:
        parts += [f"--scenario {args.scenario}", "--seeds " + " ".join(map(str, args.seeds))]
        if args.days is not None:
            parts.append(f"--days {args.days:g}")
    parts += [f"--epochs {args.epochs}", f"--hidden {args.hidden}", f"--window {args.window}",
              f"--lr {args.lr:g}", f"--patience {args.patience}",
              f"--seed {args.seed}", f"--threads {args.threads}", *command_flag(args),
              f"--out {args.out}"]
    return " ".join(parts)


def _version(meta: dict[str, Any], cfg: Any) -> str:
    blob = json.dumps({"data": [{k: v for k, v in d.items() if k != "record_s"}
                                for d in meta["data"]], "cfg": cfg.as_dict(),
                       **({"init": meta["fine_tuned_from"]["version"]}
                          if "fine_tuned_from" in meta else {})},
                      sort_keys=True, default=str)
    return "lstm-" + hashlib.sha256(blob.encode()).hexdigest()[:10]


class _Bar:
    def __init__(self, name: str, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=f"train {name}", unit="epoch", disable=not enabled,
                         file=sys.stderr)

    def update(self, scope: str, row: dict[str, float]) -> None:
        self._bar.set_postfix(loss=f"{row['train_loss']:.4f}", val_ap=f"{row['val_ap']:.3f}")
        self._bar.update(1)
        log.debug("%s epoch %d: %s", scope, int(row["epoch"]), row)

    def close(self) -> None:
        self._bar.close()


def _progress(name: str, total: int, enabled: bool) -> _Bar:
    return _Bar(name, total, enabled)


register("train", configure_parser, run, HELP)
