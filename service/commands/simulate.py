"""`gpuhealth simulate`: write a labelled synthetic trace (line protocol + labels.jsonl) for a
scenario preset or YAML file, deterministically from its seed."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from collectors.frames import Batch
from service.commands.cli import register
from service.commands.progress import Progress
from service.commands.usage import UsageError, scenario_errors


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="preset (demo, ci, fleet-year), family (train-family, "
                   "shifted-family) or a scenario YAML file")
    p.add_argument("out", type=Path, help="trace directory to write")
    p.add_argument("--overrides", type=Path, help="YAML merged over the scenario")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--days", type=float, help="override the scenario's length in days")
    p.add_argument("--plain", action="store_true", help="write .lp files instead of .lp.gz")


def _run(args: argparse.Namespace) -> int:
    from models.simulator import write_trace
    from models.simulator.config import SimConfig
    from models.simulator.scenarios import scenario_tree

    with scenario_errors(args.scenario, args.overrides):
        seed = 0 if args.seed is None else args.seed  # a family draws its tree from it
        tree = scenario_tree(args.scenario, args.overrides, seed=seed)
        if args.seed is not None:
            tree["seed"] = args.seed
        if args.days is not None:
            tree["time"] = {**tree.get("time", {}), "days": args.days}
        config = SimConfig.model_validate(tree)  # validated with the overrides, --days too
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"{args.out}: not a directory; give the trace directory to write")
    start, hours = float(config.time.start_s), config.time.days * 24
    step = float(config.time.step_s)

    def report(batch: Batch, lines: int) -> None:
        newest = max((float(f.ts.max()) for f in batch.frames.values() if len(f.ts)),
                     default=start - step)
        # The newest sample covers the step that begins with it.
        bar.update(min((newest + step - start) / 3600, hours), f"{lines:,} lines")

    with Progress(f"simulate {args.scenario}", hours, "h") as bar:
        summary = write_trace(config, args.out, gzip=not args.plain, on_batch=report)
    print(json.dumps(dataclasses.asdict(summary), default=str, indent=2))
    return 0


register("simulate", _configure, _run, "write a labelled synthetic trace for a scenario")
