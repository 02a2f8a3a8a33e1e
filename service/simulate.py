"""`gpuhealth simulate`: write a labelled synthetic trace (line protocol + labels.jsonl) for a
scenario preset or YAML file, deterministically from its seed."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from service.cli import register


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="preset (demo, ci, fleet-year) or a scenario YAML file")
    p.add_argument("out", type=Path, help="trace directory to write")
    p.add_argument("--overrides", type=Path, help="YAML merged over the scenario")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--days", type=float, help="override the scenario's length in days")
    p.add_argument("--plain", action="store_true", help="write .lp files instead of .lp.gz")


def _run(args: argparse.Namespace) -> int:
    from models.simulator import load_scenario, write_trace

    config = load_scenario(args.scenario, args.overrides)
    if args.seed is not None:
        config = config.model_copy(update={"seed": args.seed})
    if args.days is not None:
        config = config.model_copy(
            update={"time": config.time.model_copy(update={"days": args.days})})
    summary = write_trace(config, args.out, gzip=not args.plain)
    print(json.dumps(dataclasses.asdict(summary), default=str, indent=2))
    return 0


register("simulate", _configure, _run, "write a labelled synthetic trace for a scenario")
