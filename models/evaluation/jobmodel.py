"""Operational value of prediction: a job model on the Young/Daly checkpoint interval
(docs/evaluation.md, Metrics).

Every failure interrupts one data-parallel job of `n_gpu` GPUs that checkpoints every τ
(Young/Daly: τ* = sqrt(2 δ MTTF), MTTF of the job = 1 / (failure rate per GPU x n_gpu)). An
unpredicted failure loses on average τ/2 of work plus the restart R on every GPU of the job. A
correct alert at `act_level` or above, early enough for a just-in-time checkpoint and a drain
(lead >= `min_lead_s`), cuts that to a planned restart R_planned. Each false alarm at that level
costs one unneeded migration (R_planned on the whole job) plus the drained node standing idle
for its diagnostics.

Two shares are reported: `net_share` over all failures (abrupt ones, which no detector can
see coming, included), and `net_share_precursor` over the precursor-bearing failures only: the
savings on those failures minus the cost of every false alarm, over the GPU-hours those
failures lose. The latter is the figure the seed system's claim "two thirds of unplanned
downtime avoided" (CLAIM_SHARE) is comparable with.

Defaults (documented choices, docs/evaluation.md):
- n_gpu = 1,024: the job size whose MTTF (7.9 h) Kokolis et al. measured (HPCA 2025);
- δ = 36 s to write a checkpoint: an assumption, not a published value;
- R = 10 min: middle of the 3-15 min restart figures (FT-HSDP, MegaScale);
- R_planned = 2 min: JIT checkpointing and warm standby bring it to seconds or minutes;
- min lead 1 h: a JIT checkpoint plus drain (Gupta et al., Just-In-Time Checkpointing,
  EuroSys 2024);
- act at level 2 (warning: "take a checkpoint now; drain at the next job boundary";
  docs/evaluation.md);
- 1 h of diagnostics per falsely drained node (design choice).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from models.evaluation.events import AlertRecord, Failure
from models.evaluation.matching import DAY, HOUR, FailureIndex, View, match
from models.evaluation.metrics import Scores, ratio

CLAIM_SHARE = 0.67  # the seed system's "two thirds of unplanned downtime avoided"


@dataclass(frozen=True, slots=True)
class JobModel:
    n_gpu: int = 1024
    checkpoint_write_s: float = 36.0
    restart_s: float = 600.0
    planned_restart_s: float = 120.0
    min_lead_s: float = HOUR
    max_lead_s: float = 7 * DAY
    act_level: int = 2
    diagnosis_h: float = 1.0
    gpus_per_node: int = 8
    mttf_h: float | None = None  # None: from the run's own failure rate

    def view(self) -> View:
        return View("act", self.act_level, self.min_lead_s, self.max_lead_s)


def operational(model: JobModel, alerts: Sequence[AlertRecord], failures: Sequence[Failure],
                gpu_hours: float, grace_s: float = DAY, index: FailureIndex | None = None
                ) -> Scores:
    """Share of the failure-caused lost GPU-hours that proactive migration avoids, net of the
    false alarms' migrations; `gpu_hours` is the run's exposure (GPUs x hours)."""
    m = match(alerts, failures, model.view(), grace_s, index)
    rate = len(failures) / gpu_hours if gpu_hours > 0 else 0.0  # failures per GPU-hour
    mttf_h = model.mttf_h if model.mttf_h is not None else (
        1.0 / (rate * model.n_gpu) if rate > 0 else math.inf)
    tau_h = math.sqrt(2 * model.checkpoint_write_s / 3600.0 * mttf_h)
    r_h, rp_h = model.restart_s / 3600.0, model.planned_restart_s / 3600.0
    lost_each = model.n_gpu * (tau_h / 2 + r_h)
    saved_each = model.n_gpu * max(tau_h / 2 + r_h - rp_h, 0.0)
    fa_each = model.n_gpu * rp_h + model.gpus_per_node * model.diagnosis_h
    avoided = len(m.first_alert)
    baseline = lost_each * len(failures)
    saved = saved_each * avoided
    cost = fa_each * len(m.false_alarms)
    pre = [i for i, f in enumerate(failures) if f.precursor]
    avoided_pre = sum(1 for i in pre if i in m.first_alert)
    baseline_pre = lost_each * len(pre)
    saved_pre = saved_each * avoided_pre
    return {
        "n_gpu": model.n_gpu, "act_level": model.act_level, "min_lead_h": model.min_lead_s / HOUR,
        "job_mttf_h": mttf_h if math.isfinite(mttf_h) else None,
        "checkpoint_interval_h": tau_h if math.isfinite(tau_h) else None,
        "lost_gpu_h_per_failure": lost_each if math.isfinite(lost_each) else None,
        "failures": len(failures), "avoided": avoided, "false_alarms": len(m.false_alarms),
        "baseline_lost_gpu_h": baseline if math.isfinite(baseline) else None,
        "saved_gpu_h": saved if math.isfinite(saved) else None,
        "false_alarm_cost_gpu_h": cost,
        "net_saved_gpu_h": saved - cost if math.isfinite(saved) else None,
        "net_share": ratio(saved - cost, baseline) if math.isfinite(baseline) else None,
        "precursor_failures": len(pre), "avoided_precursor": avoided_pre,
        "precursor_lost_gpu_h": baseline_pre if math.isfinite(baseline_pre) else None,
        "net_share_precursor": ratio(saved_pre - cost, baseline_pre)
        if math.isfinite(baseline_pre) else None,
    }
