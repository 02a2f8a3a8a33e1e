"""Where an evaluation's data comes from: the simulator (a scenario preset or YAML, one seed)
or a recorded trace with its labels. An EvaluationInput is chunks in time order, the labels, the
step and the span the run covers."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.frames import Batch
from models.simulator.config import SimConfig

Labels = list[dict[str, Any]]


@dataclass(slots=True)
class EvaluationInput:
    """One run's data: chunks in time order, its labels and what it covers."""

    name: str
    step_s: float
    labels: Labels
    chunks: Iterable[Batch]
    start: float | None = None  # None: from the data (traces)
    end: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # The active-only faults and what diagnostics save on them (models/evaluation/active.py):
    # simulator sources only, since a trace has no latent faults or job schedule.
    active: dict[str, Any] | None = None


def simulator_source(config: SimConfig) -> EvaluationInput:
    from models.evaluation.active import active_report
    from models.simulator.simulator import Simulator

    sim = Simulator(config)
    t = config.time
    return EvaluationInput(config.name, float(t.step_s), sim.labels, sim.run(), float(t.start_s),
                  float(t.end_s), {"nodes": config.fleet.nodes, "gpus": config.fleet.gpus,
                                   "days": t.days, "seed": config.seed}, active_report(sim))


def trace_source(trace: Path, labels: Path | None = None,
                 step_s: float | None = None) -> EvaluationInput:
    from collectors.trace import LABELS_FILE, TraceReader

    step = step_s if step_s is not None else infer_step(trace)
    reader = TraceReader(trace, step_s=step)
    path = labels if labels is not None else (trace / LABELS_FILE if trace.is_dir() else None)
    rows = read_labels(path) if path is not None and path.exists() else []
    return EvaluationInput(trace.name, step, rows, (r.batch for r in reader.rounds()))


def read_labels(path: Path) -> Labels:
    """JSON lines; every kind is kept ("repair" too, which collectors.trace does not know)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def infer_step(trace: Path, rounds: int = 8) -> float:
    """The smallest gap between the first few distinct timestamps of a trace, in seconds."""
    from collectors.trace import TraceReader

    times: list[float] = []
    for r in TraceReader(trace, step_s=1.0).rounds():
        if r.time is not None:
            times.append(r.time)
        if len(times) >= rounds:
            break
    gaps = [b - a for a, b in itertools.pairwise(times) if b > a]
    return float(min(gaps)) if gaps else 5.0


def scenario_config(scenario: str | Path, seed: int, days: float | None = None,
                    step_s: int | None = None) -> SimConfig:
    """A preset, family or YAML scenario at `seed` (a family draws its tree from it),
    optionally shortened or at another step (validated again, so a step that is not a multiple
    of 5 s is refused)."""
    from models.simulator.scenarios import scenario_tree

    tree = scenario_tree(scenario, seed=seed)
    tree["seed"] = seed
    time = dict(tree.get("time", {}))
    if days is not None:
        time["days"] = days
    if step_s is not None:
        time["step_s"] = step_s
    tree["time"] = time
    return SimConfig.model_validate(tree)
