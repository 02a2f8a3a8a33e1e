"""The active-only faults (M14-M16) and what diagnostics save on them (docs/evaluation.md,
"Active diagnostics").

The simulator plans latent faults that no sample shows and decides, for a diagnostics policy,
which a gate or a sweep finds before a job fails on them (models/simulator/diagnostics.py).
Without diagnostics every latent fault a job hits costs, in GPU-hours:

- the job's lost work: each of its GPUs loses the work since the checkpoint it restarts from,
  plus the restart R (JobModel.restart_s, as the job model's unpredicted failure);
- the node's diagnosis (ActiveConfig.diagnose_h: nothing in the telemetry names it) and its
  repair, on the node's GPUs.

A fault a diagnostic finds before that costs its repair only, so the saving is the job's lost
work and the diagnosis. A fault found that no job would have hit within the trace saves nothing
here (its cost falls after the run). The sweeps' own cost, idle GPU-hours under test, is
reported beside it: a sweep only fills an idle gap, so it takes no work from a job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from models.evaluation.jobmodel import JobModel
from models.evaluation.metrics import ratio
from models.simulator.config_active import ActiveConfig
from models.simulator.diagnostics import Diagnosed, Hit, Outcome
from models.simulator.modes import ACTIVE_ONLY
from models.simulator.simulator import Simulator

Scores = dict[str, Any]
# The sweep rates of the report's table (days between two tests of a node; None: gates only).
SWEEP_TABLE: tuple[float | None, ...] = (None, 30.0, 14.0, 7.0)


def _costs(o: Outcome, job: JobModel, policy: ActiveConfig, gpus_per_node: int
           ) -> tuple[float, float]:
    """The fault's GPU-hours lost without diagnostics, and those the policy saved."""
    if o.hit is None:
        return 0.0, 0.0
    lost = o.hit.gpus * (o.hit.lost_s + job.restart_s) / 3600.0
    node = gpus_per_node * (policy.diagnose_h + o.fault.repair_s / 3600.0)
    saved = lost + gpus_per_node * policy.diagnose_h if o.found_by is not None else 0.0
    return lost + node, saved


def tally(outcomes: Sequence[Outcome], job: JobModel, policy: ActiveConfig,
          gpus_per_node: int) -> Scores:
    found_gate = sum(o.found_by == "gate" for o in outcomes)
    found_sweep = sum(o.found_by == "sweep" for o in outcomes)
    hit = sum(o.found_by is None and o.hit is not None for o in outcomes)
    costs = [_costs(o, job, policy, gpus_per_node) for o in outcomes]
    base, saved = sum(c[0] for c in costs), sum(c[1] for c in costs)
    return {"faults": len(outcomes), "found_gate": found_gate, "found_sweep": found_sweep,
            "hit": hit, "latent": len(outcomes) - found_gate - found_sweep - hit,
            # Of the faults settled within the run (found, or hit by a job), the share found.
            "found_share": ratio(found_gate + found_sweep, found_gate + found_sweep + hit),
            "baseline_gpu_h": base, "saved_gpu_h": saved, "saved_share": ratio(saved, base)}


def _summary(d: Diagnosed, job: JobModel, policy: ActiveConfig, gpus_per_node: int) -> Scores:
    by_mode = {m.value: tally([o for o in d.outcomes if o.fault.mode is m], job, policy,
                              gpus_per_node) for m in ACTIVE_ONLY}
    total = tally(d.outcomes, job, policy, gpus_per_node)
    test_h = policy.sweep_test_min / 60.0
    return {"by_mode": by_mode, "total": total, "sweeps": len(d.sweeps), "gates": d.gates,
            "sweep_gpu_h": len(d.sweeps) * test_h * gpus_per_node}


def rate_key(every: float | None) -> str:
    return "gates only" if every is None else f"every {every:g} d"


def active_report(sim: Simulator, job: JobModel | None = None,
                  rates: Sequence[float | None] = SWEEP_TABLE) -> Scores:
    """Per active-only mode at the configured policy, and the totals over a few sweep rates
    (gates on in each; "off" is neither, which saves nothing by definition)."""
    job = job or JobModel()
    cfg = sim.config
    policy = cfg.active
    sched = sim.schedule
    hits: list[Hit | None] = [sched.hit(f) for f in sim.latent]
    gpn = cfg.fleet.gpus_per_node
    configured = _summary(sched.diagnose(sim.latent, policy, hits), job, policy, gpn)
    table: Scores = {}
    variants = [("off", policy.model_copy(update={"gates": False, "sweep_every_days": None}))]
    variants += [(rate_key(r), policy.model_copy(update={"gates": True, "sweep_every_days": r}))
                 for r in rates]
    for key, p in variants:
        s = _summary(sched.diagnose(sim.latent, p, hits), job, p, gpn)
        table[key] = s["total"] | {"sweeps": s["sweeps"], "sweep_gpu_h": s["sweep_gpu_h"]}
    return {"policy": {"gates": policy.gates, "sweep_every_days": policy.sweep_every_days,
                       "sweep_max_share": policy.sweep_max_share,
                       "sweep_test_min": policy.sweep_test_min},
            **configured, "sweep_rates": table}
