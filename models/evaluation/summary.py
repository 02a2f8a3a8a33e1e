"""From per-seed runs to one result: per-seed scores, their mean and 95 % interval, PR-AUC of
the samples of all seeds pooled, the data behind every figure, and the files (results.json,
report.md, PNG plots)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models.evaluation import plots
from models.evaluation.aggregate import combine
from models.evaluation.coverage import with_diagnostics
from models.evaluation.reliability import pooled as pooled_reliability
from models.evaluation.report import get, render
from models.evaluation.riskscore import Samples, pr_auc_table
from models.evaluation.windows import pooled as pooled_windows
from models.evaluation.windows import recalibrated, window_scores
from models.predictor.interval import COVERAGE, load_default

Scores = dict[str, Any]
LEVEL_VIEWS = ("watch", "warning", "critical")
# The project's false-alarm targets per 1,000 node-days (docs/evaluation.md, Metrics): watch 2,
# warning 0.5, critical 0.1.
FA_TARGETS = (2.0, 0.5, 0.1)
MAX_CURVE_POINTS = 2000


def _fill(per_seed: Sequence[Scores], path: tuple[str, ...], empty: Any) -> None:
    """Every seed gets every key that some seed has under `path` ("*" = each key there), with
    `empty` where it had none: a rule or trap type that one seed never saw counts 0 there, so
    a mean over seeds is not a mean over only the seeds that saw it."""
    if "*" in path:
        i = path.index("*")
        subs = {k for s in per_seed for k in (get(s, *path[:i]) or {})}
        for k in subs:
            _fill(per_seed, (*path[:i], k, *path[i + 1:]), empty)
        return
    keys = {k for s in per_seed for k in (get(s, *path) or {})}
    for s in per_seed:
        d = get(s, *path)
        if isinstance(d, dict):
            for k in keys:
                d.setdefault(k, dict(empty) if isinstance(empty, dict) else empty)


def summarize(scenario: str, seeds: Sequence[int], runs: Sequence[Scores]) -> Scores:
    """`runs` are service.commands.evaluate.evaluate_source outputs, one per seed, in seed order."""
    dets = list(runs[0]["scores"])
    calibration = load_default()
    per_seed = {d: [_diagnosed(r, r["scores"][d]) for r in runs] for d in dets}
    for d in dets:
        _fill(per_seed[d], ("views", "*", "false_alarms_by_rule"), 0)
        _fill(per_seed[d], ("traps", "*"), {"n": 0, "alerted": 0, "share": None})
    results = {d: combine(per_seed[d]) for d in dets}
    pooled: dict[str, Samples] = {}
    for d in dets:
        pooled[d] = Samples()
        for r in runs:
            s = r["samples"].get(d)
            if s is not None:
                pooled[d].extend(s)
    modes = sorted({m for r in runs for m in (get(r, "truth", "by_mode") or {})
                    if m != "M7_unobservable"})
    curves: Scores = {}
    for d in dets:
        ap, rec, prec, prev = pooled[d].ap(precursor_only=True)
        keep = np.unique(np.linspace(0, len(rec) - 1, min(len(rec), MAX_CURVE_POINTS))
                         .astype(int)) if len(rec) else np.zeros(0, int)
        curves[d] = {"recall": rec[keep].tolist(), "precision": prec[keep].tolist(), "ap": ap,
                     "prevalence": prev}
    return {
        "scenario": scenario, "seeds": list(seeds), "detectors": dets,
        "exposure": combine([r["exposure"] for r in runs]),
        "truth": combine([r["truth"] for r in runs]),
        "active": combine([r.get("active") for r in runs]),
        "results": results,
        "pooled_pr_auc": {d: pr_auc_table(pooled[d], modes) for d in dets},
        "figures": {
            "pr_curve": curves,
            "leads_h": {d: [x for r in runs for x in r["leads_h"][d].get("watch", [])]
                        for d in dets},
            "false_alarms_per_1000_node_days": {
                d: [get(results[d], "views", v, "fa_per_1000_node_days", "mean")
                    for v in LEVEL_VIEWS] for d in dets},
        },
        # Each model's probability bins of all seeds merged, per scope and head.
        "reliability": {m: pooled_reliability([r["reliability"][m] for r in runs
                                               if m in r.get("reliability", {})])
                        for m in sorted({m for r in runs for m in r.get("reliability", {})})},
        # Failure windows of every seed's pre-failure alerts, pooled and scored against the
        # shipped window calibration (models/evaluation/windows.py).
        "windows": {d: window_scores(
            pooled_windows(r.get("pre_failure", {}).get(d, []) for r in runs), calibration)
            for d in dets},
        "window_calibration": calibration.fitted_on if calibration is not None else None,
        # The same windows recalibrated on the earlier half of these runs' own alerts, scored
        # on the later half: what learning from the fleet's labels would give.
        "windows_recalibrated": {d: recalibrated(
            [r.get("pre_failure", {}).get(d, []) for r in runs],
            calibration.coverage if calibration is not None else COVERAGE) for d in dets},
        "per_seed": per_seed,
        "runs": [{"seed": seed, "exposure": r["exposure"], "truth": r["truth"],
                  "alerts": r["alerts"], "timing": r["timing"]}
                 for seed, r in zip(seeds, runs, strict=True)],
    }


def _diagnosed(run: Scores, scores: Scores) -> Scores:
    """A seed's scores with the coverage that counts what its diagnostics found."""
    found = get(run, "active", "by_mode")
    cov = scores.get("coverage")
    if not isinstance(found, dict) or cov is None:
        return scores
    shares = {m: v.get("found_share") for m, v in found.items()}
    return scores | {"coverage": with_diagnostics(cov, shares)}


def write_outputs(result: Scores, out_dir: Path, title: str = "") -> dict[str, str]:
    """results.json, report.md and the plots under out_dir; returns plot name -> file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fig = result["figures"]
    files = {}
    curves = {d: (c["recall"], c["precision"], c["ap"]) for d, c in fig["pr_curve"].items()}
    prevalence = max((c["prevalence"] for c in fig["pr_curve"].values()), default=0.0)
    files["PR curve"] = plots.pr_curves(curves, prevalence, out_dir / "pr_curve.png")
    files["Lead time"] = plots.lead_histogram(fig["leads_h"], out_dir / "lead_time.png")
    rates = {d: [x if x is not None else np.nan for x in r]
             for d, r in fig["false_alarms_per_1000_node_days"].items()}
    files["False alarms"] = plots.false_alarm_bars(rates,
        list(LEVEL_VIEWS), list(FA_TARGETS), out_dir / "false_alarms.png")
    for model, scopes in sorted(result.get("reliability", {}).items()):
        for scope, heads in scopes.items():
            name = f"reliability_{model}_{scope}.png"
            files[f"Reliability {model} {scope}"] = plots.reliability(
                heads, f"Reliability of {model}, {scope} heads", out_dir / name)
    (out_dir / "results.json").write_text(json.dumps(result, indent=1, default=_jsonable))
    (out_dir / "report.md").write_text(render(result, files, title) + "\n")
    return files


def _jsonable(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")
