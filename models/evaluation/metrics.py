"""Event-level scores from matched alerts (docs/evaluation.md, Metrics): precision, recall
three ways, F1, lead time, false alarms per 1,000 node-days, benign-trap alert shares and
detection delay, per view (alert level) and per failure mode. Results are plain dicts of
numbers so they go to JSON as they are; None marks a ratio with nothing to divide by.

Definitions:
- precision = detected failures / (detected failures + false alarms): events, not alerts, so
  ten alerts before one failure are one hit (event-level scoring, as Falcon, arXiv 2609.34473);
- recall over precursor-bearing failures (the headline), over observable failures (M1-M6) and
  over all failures (M7 included); their ratios are the recall ceilings (docs/evaluation.md);
- F1 from precision and the headline recall;
- per scope, precision counts detected failures of that label scope against false alarms raised
  on entities of that scope; per mode, precision and F1 use the mode's scope (an approximation:
  a false alarm has no mode).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from models.evaluation.events import Failure, Trap
from models.evaluation.matching import HOUR, ViewMatch

Scores = dict[str, Any]
# The entity families an alert is raised on (a node's or the fleet's derived alerts predict no
# failure and are not scored).
FAMILIES = ("gpu", "nvlink", "ib_port")


def ratio(a: float, b: float) -> float | None:
    return None if b == 0 else a / b


def f1(precision: float | None, recall: float | None) -> float | None:
    if precision is None or recall is None or precision + recall == 0:
        return None if precision is None or recall is None else 0.0
    return 2 * precision * recall / (precision + recall)


def lead_stats(leads_s: Sequence[float]) -> Scores:
    """Median and 10th percentile in hours, and the shares of hits with lead >= 1 h (time for
    a just-in-time checkpoint and drain), >= 24 h (time for planned maintenance) and 6-24 h (a
    warning that means "within a day" and leaves a shift to act); see docs/evaluation.md,
    Metrics."""
    a = np.asarray(leads_s, dtype=np.float64)
    if len(a) == 0:
        return {"n": 0, "median_h": None, "p10_h": None, "share_ge_1h": None,
                "share_ge_24h": None, "share_6_24h": None}
    return {"n": len(a), "median_h": float(np.median(a)) / HOUR,
            "p10_h": float(np.percentile(a, 10)) / HOUR,
            "share_ge_1h": float(np.mean(a >= HOUR)),
            "share_ge_24h": float(np.mean(a >= 24 * HOUR)),
            "share_6_24h": float(np.mean((a >= 6 * HOUR) & (a <= 24 * HOUR)))}


def _in(t: float, span: tuple[float, float] | None) -> bool:
    return span is None or span[0] <= t < span[1]


def view_scores(m: ViewMatch, failures: Sequence[Failure], node_days: float,
                span: tuple[float, float] | None = None) -> Scores:
    """Scores of one view; with `span`, only failures and false alarms inside it count (the
    match itself was made over the whole run, so an alert just before the span's start still
    credits a failure inside it)."""
    idx = [i for i, f in enumerate(failures) if _in(f.time, span)]
    hit = [i for i in idx if i in m.first_alert]
    fas = [a for a in m.false_alarms if _in(a.time, span)]
    prec = ratio(len(hit), len(hit) + len(fas))
    pre = [i for i in idx if failures[i].precursor]
    obs = [i for i in idx if failures[i].observable]
    r_pre = ratio(sum(i in m.first_alert for i in pre), len(pre))
    leads = [failures[i].time - m.first_alert[i] for i in hit]
    by_scope = _by_scope(failures, hit, fas)
    # Alert counts by class are kept for the whole run only: they are not split by time.
    counts = {} if span is not None else {"alerts": m.alerts, "true_alerts": m.true_alerts,
                                          "late": m.late, "post_failure": m.post_failure}
    return counts | {
        "false_alarms": len(fas), "failures": len(idx),
        "detected": len(hit), "precision": prec, "recall_precursor": r_pre,
        "recall_observable": ratio(sum(i in m.first_alert for i in obs), len(obs)),
        "recall_all": ratio(len(hit), len(idx)), "f1": f1(prec, r_pre),
        "fa_per_1000_node_days": ratio(1000.0 * len(fas), node_days),
        "fa_per_1000_node_days_by_family": _per_family(fas, node_days),
        "lead": lead_stats(leads),
        "lead_precursor": lead_stats([failures[i].time - m.first_alert[i] for i in hit
                                      if failures[i].precursor]),
        "by_scope": by_scope,
        "false_alarms_by_rule": dict(Counter(a.rule or "?" for a in fas).most_common()),
        "by_mode": _by_mode(m, failures, idx, by_scope),
    }


def _per_family(fas: Sequence[Any], node_days: float) -> Scores:
    """False alarms per 1,000 node-days per entity family, every family present (0 where it
    raised none), so that the mean over seeds counts the seeds without any."""
    n = Counter(a.scope.value for a in fas)
    return {fam: ratio(1000.0 * n[fam], node_days) for fam in FAMILIES}


def combined_pages(alerts: Sequence[Any], enter: float, level: int = 3) -> Scores:
    """Escalations to `level` whose strongest single signal was below the level's enter
    threshold: pages that rode on a combination of signals rather than on one that supports
    the level alone (issue 28: no page from two signals of one error stream). Escalations
    without a recorded strength are not judged."""
    pages = [a for a in alerts if a.crosses(level)]
    judged = [a for a in pages if np.isfinite(a.strength)]
    weak = [a for a in judged if a.strength < enter]
    return {"pages": len(pages), "judged": len(judged), "combined": len(weak),
            "by_rule": dict(Counter(a.rule or "?" for a in weak).most_common())}


def _by_scope(failures: Sequence[Failure], hit: list[int], fas: Sequence[Any]) -> Scores:
    tp = Counter(failures[i].scope.value for i in hit)
    fa = Counter(a.scope.value for a in fas)
    return {s: {"detected": tp[s], "false_alarms": fa[s], "precision": ratio(tp[s], tp[s] + fa[s])}
            for s in sorted(set(tp) | set(fa))}


def _by_mode(m: ViewMatch, failures: Sequence[Failure], idx: list[int],
             by_scope: Scores) -> Scores:
    out: Scores = {}
    for mode in sorted({failures[i].mode for i in idx}):
        mine = [i for i in idx if failures[i].mode == mode]
        pre = [i for i in mine if failures[i].precursor]
        det = [i for i in mine if i in m.first_alert]
        det_pre = [i for i in pre if i in m.first_alert]
        scope = failures[mine[0]].scope.value
        fa = by_scope.get(scope, {}).get("false_alarms", 0)
        prec = ratio(len(det), len(det) + fa)
        r_pre = ratio(len(det_pre), len(pre))
        out[mode] = {
            "failures": len(mine), "precursor": len(pre), "detected": len(det),
            "detected_precursor": len(det_pre), "recall_precursor": r_pre,
            "recall_all": ratio(len(det), len(mine)), "precision_scope": prec,
            "f1": f1(prec, r_pre),
            "lead": lead_stats([failures[i].time - m.first_alert[i] for i in det]),
        }
    return out


def trap_shares(traps: Sequence[Trap], hits: Sequence[bool],
                span: tuple[float, float] | None = None) -> Scores:
    """Per benign trap type: how many were injected and the share whose entity alerted."""
    n: Counter[str] = Counter()
    hit: Counter[str] = Counter()
    for tr, h in zip(traps, hits, strict=True):
        if _in(tr.start, span):
            n[tr.trap] += 1
            hit[tr.trap] += int(h)
    return {k: {"n": n[k], "alerted": hit[k], "share": ratio(hit[k], n[k])} for k in sorted(n)}


def delay_stats(failures: Sequence[Failure], delays: dict[int, float],
                span: tuple[float, float] | None = None) -> Scores:
    """Detection delay of abrupt observable faults (no precursor, not M7): docs/evaluation.md."""
    idx = [i for i, f in enumerate(failures)
           if not f.precursor and f.observable and _in(f.time, span)]
    got = np.array([delays[i] for i in idx if i in delays], dtype=np.float64)
    by_mode: Scores = {}
    for mode in sorted({failures[i].mode for i in idx}):
        mine = [i for i in idx if failures[i].mode == mode]
        d = [delays[i] for i in mine if i in delays]
        by_mode[mode] = {"failures": len(mine), "detected": len(d),
                         "median_s": float(np.median(d)) if d else None}
    return {
        "failures": len(idx), "detected": len(got), "share": ratio(len(got), len(idx)),
        "median_s": float(np.median(got)) if len(got) else None,
        "p90_s": float(np.percentile(got, 90)) if len(got) else None,
        "within_60s": ratio(int(np.sum(got <= 60)), len(idx)),
        "by_mode": by_mode,
    }


def truth_summary(failures: Sequence[Failure], traps: Sequence[Trap]) -> Scores:
    modes = Counter(f.mode for f in failures)
    pre = Counter(f.mode for f in failures if f.precursor)
    return {
        "failures": len(failures), "precursor": sum(pre.values()),
        "observable": sum(f.observable for f in failures),
        "by_mode": {m: {"failures": modes[m], "precursor": pre[m]} for m in sorted(modes)},
        "traps": dict(sorted(Counter(t.trap for t in traps).items())),
    }
