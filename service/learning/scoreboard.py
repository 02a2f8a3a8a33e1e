"""The shadow run's scores: each stream's level crossings (service.learning.shadow) matched to the
failure labels that arrived (service.stages.label_store), the way the evaluation matches them
(models.evaluation.matching: event-level precision, recall, lead, false alarms per 1,000
node-days, per mode), and the judgement a promotion goes by.

An alarm is judged against failures up to its lead window (a week at watch) after it, so over a
running shadow the newest alarms are false alarms until their window has passed or a failure
has come; both models are judged on the same span, so neither gains by it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collectors.catalog import Scope
from models.evaluation.events import AlertRecord, truth_from_labels
from models.evaluation.matching import default_views, match
from models.evaluation.metrics import f1, view_scores
from service.learning.model_registry import ModelRegistry, ShadowRun
from service.learning.shadow import STREAMS
from service.stages.label_store import LabelStore

Scores = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PromotionPolicy:
    """What "better" means: on `stream` at `view`, F1 at least the active model's minus
    `f1_margin`, and false alarms per 1,000 node-days at most the active model's times
    `fa_ratio` plus `fa_slack`, after at least `min_days` of shadow; and at `lead_view` a
    median lead at least the active model's minus `lead_margin_h` (a fine-tuned model that
    matched F1 by alerting later cost the operator 17 hours of warning: issue 34)."""

    stream: str = "fused"
    view: str = "warning"
    f1_margin: float = 0.0
    fa_ratio: float = 1.0
    fa_slack: float = 0.1
    min_days: float = 7.0
    lead_view: str = "watch"
    lead_margin_h: float = 0.0


@dataclass(slots=True)
class Judgement:
    better: bool
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"better": self.better, "reasons": self.reasons}


def scores(registry: ModelRegistry, labels: LabelStore, run: ShadowRun,
           now: float) -> dict[str, Scores]:
    """Per stream, per view: the evaluation's scores over the run's span."""
    end = run.ended_at if run.ended_at is not None else now
    found = labels.find(since=run.started_at - 7 * 86400.0, until=end + 1e-6, overruled=False,
                        limit=10_000_000)
    truth = truth_from_labels(lb.label() for lb in found)
    failures = [f for f in truth.failures if run.started_at <= f.time < end]
    out: dict[str, Scores] = {}
    for stream in STREAMS:
        alerts = [AlertRecord(t, e, Scope(s), n, lv, prev, rule)
                  for t, e, s, n, lv, prev, rule in registry.alarms(run.id, stream)]
        out[stream] = {v.name: _trim(view_scores(match(alerts, failures, v), failures,
                                                 max(run.node_days, 1e-9)))
                       for v in default_views()}
    return out


def _trim(s: Scores) -> Scores:
    """What the comparison shows. Live labels carry no precursor onset, so F1 here is over
    every failure (`f1_all`), not the evaluation's precursor-bearing ones."""
    keep = ("alerts", "false_alarms", "failures", "detected", "precision", "recall_all",
            "fa_per_1000_node_days", "lead", "by_mode")
    out = {k: s[k] for k in keep if k in s}
    out["f1_all"] = f1(s["precision"], s["recall_all"])
    for m in out.get("by_mode", {}).values():
        for k in ("precursor", "detected_precursor", "recall_precursor", "f1"):
            m.pop(k, None)
    return out


def judge(board: dict[str, Scores], run: ShadowRun, policy: PromotionPolicy) -> Judgement:
    """Whether the challenger is at least as good as the active model on the agreed metrics."""
    a = board[f"active:{policy.stream}"][policy.view]
    c = board[f"challenger:{policy.stream}"][policy.view]
    reasons: list[str] = []
    if run.node_days < 1e-9 or (run.updated_at - run.started_at) / 86400.0 < policy.min_days:
        reasons.append(f"shadowed {(run.updated_at - run.started_at) / 86400.0:.1f} days, "
                       f"less than the {policy.min_days:g} agreed")
    fa_a, fa_c = a.get("fa_per_1000_node_days") or 0.0, c.get("fa_per_1000_node_days") or 0.0
    if fa_c > fa_a * policy.fa_ratio + policy.fa_slack:
        reasons.append(f"more false alarms ({fa_c:.3g} against {fa_a:.3g} per 1,000 node-days "
                       f"at {policy.view}, {policy.stream})")
    f1_a, f1_c = a.get("f1_all"), c.get("f1_all")
    if a["failures"] == 0:
        reasons.append("no failure labelled in the shadow span: recall cannot be compared")
    elif (f1_c or 0.0) < (f1_a or 0.0) - policy.f1_margin:
        reasons.append(f"lower F1 ({_f(f1_c)} against {_f(f1_a)} at {policy.view}, "
                       f"{policy.stream})")
    la = _median_lead(board[f"active:{policy.stream}"].get(policy.lead_view))
    lc = _median_lead(board[f"challenger:{policy.stream}"].get(policy.lead_view))
    if la is not None and (lc is None or lc < la - policy.lead_margin_h):
        reasons.append(f"shorter median lead ({_f(lc)} h against {_f(la)} h at "
                       f"{policy.lead_view}, {policy.stream})")
    return Judgement(not reasons, reasons)


def _median_lead(s: Scores | None) -> float | None:
    lead = (s or {}).get("lead") or {}
    v = lead.get("median_h")
    return None if v is None else float(v)


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"
