"""Score one run of one detector set: every view, the two halves of the run, benign traps,
detection delay, PR-AUC of the risk and the job model's operational value.

The halves are a time-based split (over time, never shuffled: GPU-failure models drift over
time, Liu et al., SYSTOR 2023): a model that is later fitted on the first half can be judged
honestly on the second, and a detector without learning should score the same on both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from models.evaluation.coverage import downtime_coverage, mode_detection
from models.evaluation.events import AlertRecord, Truth
from models.evaluation.jobmodel import JobModel, operational
from models.evaluation.matching import (
    DAY,
    GRACE_S,
    HOUR,
    MIN_WARNING_S,
    FailureIndex,
    View,
    default_views,
    detection_delays,
    match,
    trap_hits,
)
from models.evaluation.metrics import (
    Scores,
    combined_pages,
    delay_stats,
    trap_shares,
    view_scores,
)
from models.evaluation.riskscore import DailyMax, Samples, build_samples, pr_auc_table
from models.evaluation.windows import PreFailure, pre_failure

LEVELS = (1, 2, 3)


@dataclass(frozen=True, slots=True)
class EvalConfig:
    min_warning_s: float = MIN_WARNING_S
    grace_s: float = GRACE_S
    trap_margin_s: float = HOUR
    pr_horizon_s: float = DAY
    # The alert policy's level-3 enter threshold (service.stages.alert_machine.AlertPolicy):
    # a page whose strongest signal was below it rode on a combination (combined_pages).
    page_enter: float = 0.9
    job: JobModel = field(default_factory=JobModel)

    def views(self) -> tuple[View, ...]:
        return default_views(self.min_warning_s)


@dataclass(frozen=True, slots=True)
class Exposure:
    start: float
    end: float
    nodes: int
    gpus: int

    @property
    def days(self) -> float:
        return (self.end - self.start) / DAY

    @property
    def node_days(self) -> float:
        return self.nodes * self.days

    @property
    def mid(self) -> float:
        return (self.start + self.end) / 2


@dataclass(slots=True)
class RunData:
    """What the driver recorded for one detector set: escalations and daily max risk, with
    slot -> entity key per family and the GPU slot of each NVLink slot."""

    alerts: list[AlertRecord] = field(default_factory=list)
    daily: DailyMax | None = None
    keys: dict[str, list[str]] = field(default_factory=dict)
    gpu_of_link: Sequence[int] = ()


@dataclass(slots=True)
class RunScore:
    scores: Scores
    samples: Samples | None = None  # PR-AUC samples, to pool over seeds
    leads_h: dict[str, list[float]] = field(default_factory=dict)  # per view, for plots
    pre_failure: list[PreFailure] = field(default_factory=list)  # alerts with a window


def score_run(truth: Truth, data: RunData, exp: Exposure,
              cfg: EvalConfig | None = None) -> RunScore:
    cfg = cfg or EvalConfig()
    failures, alerts = truth.failures, data.alerts
    index = FailureIndex(failures, cfg.grace_s)
    halves = {"first": (exp.start, exp.mid), "second": (exp.mid, exp.end)}
    views: Scores = {}
    split: Scores = {h: {} for h in halves}
    leads: dict[str, list[float]] = {}
    predicted: set[int] = set()
    for v in cfg.views():
        m = match(alerts, failures, v, cfg.grace_s, index)
        if v.level == 1:
            predicted |= set(m.first_alert)
        views[v.name] = view_scores(m, failures, exp.node_days)
        leads[v.name] = [(failures[i].time - t) / HOUR for i, t in m.first_alert.items()]
        for h, span in halves.items():
            split[h][v.name] = view_scores(m, failures, exp.node_days / 2, span)
    traps: Scores = {}
    delays: Scores = {}
    for level in LEVELS:
        hits = trap_hits(alerts, truth.traps, exp.end, level, cfg.trap_margin_s)
        traps[str(level)] = trap_shares(truth.traps, hits)
        delays[str(level)] = delay_stats(
            failures, detection_delays(alerts, failures, level, cfg.grace_s))
    out: Scores = {"views": views, "halves": split, "traps": traps, "delay": delays,
                   "combined_pages": combined_pages(alerts, cfg.page_enter),
                   "operational": operational(cfg.job, alerts, failures,
                                              exp.gpus * exp.days * 24, cfg.grace_s, index)}
    seen = mode_detection(failures, predicted,
                          set(detection_delays(alerts, failures, 1, cfg.grace_s)))
    out["coverage"] = downtime_coverage(seen) | {"by_mode": seen}
    samples = None
    if data.daily is not None:
        data.daily.flush()
        samples = build_samples(data.daily, data.keys, data.gpu_of_link, failures,
                                cfg.pr_horizon_s, cfg.grace_s)
        out["pr_auc"] = pr_auc_table(samples, sorted({f.mode for f in failures if f.observable}))
    return RunScore(out, samples, leads, pre_failure(alerts, failures, index, cfg.min_warning_s))
