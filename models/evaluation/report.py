"""The Markdown report of an evaluation: one table per metric of docs/evaluation.md, every
figure as the mean over seeds with its 95 % interval when there are several seeds.

`render(result)` takes the JSON-able result of service.commands.evaluate (the "results" tree holds
aggregate.combine leaves) and returns Markdown; plots are linked when their files are given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from models.evaluation.aggregate import mean_of
from models.evaluation.jobmodel import CLAIM_SHARE
from models.evaluation.metrics import FAMILIES

Scores = dict[str, Any]
FAMILY_TITLES = ("GPU", "NVLink", "IB port")  # metrics.FAMILIES in words
VIEW_TITLES = {"watch": "watch (level >= 1), [5 min, 7 d]",
               "warning": "warning (level >= 2), [5 min, 24 h]",
               "critical": "critical (level 3), [0, 1 h]", "any": "any level, [0, 7 d]"}


def cell(v: Any, digits: int = 2, scale: float = 1.0) -> str:
    """A combined leaf as "mean ± half-width", a plain number as itself, missing as "–"."""
    if isinstance(v, dict) and "mean" in v:
        m, lo, hi = v.get("mean"), v.get("lo"), v.get("hi")
        if m is None:
            return "–"
        text = f"{m * scale:.{digits}f}"
        if lo is not None and hi is not None and hi - lo > 1e-12 * max(abs(m), 1.0):
            text += f" ± {(hi - lo) / 2 * scale:.{digits}f}"
        return text
    m = mean_of(v)
    return "–" if m is None else f"{m * scale:.{digits}f}"


def get(tree: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(p)
    return tree


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    out.append("")
    return out


def _headline(res: Mapping[str, Scores], dets: Sequence[str]) -> list[str]:
    head = ["View", "Detector", "Precision", "Recall (precursor)", "Recall (M1-M6)",
            "Recall (all)", "F1", "FA / 1k node-days", "Lead median h", "Lead p10 h",
            "Lead >= 1 h", "Lead >= 24 h", "Lead 6-24 h"]
    rows = []
    for view in VIEW_TITLES:
        for d in dets:
            v = get(res[d], "views", view)
            rows.append([view, d] + [cell(get(v, k)) for k in (
                "precision", "recall_precursor", "recall_observable", "recall_all", "f1",
                "fa_per_1000_node_days")] + [cell(get(v, "lead", k), 1) for k in (
                    "median_h", "p10_h")] + [cell(get(v, "lead", k)) for k in (
                        "share_ge_1h", "share_ge_24h", "share_6_24h")])
    return table(head, rows)


def _per_mode(res: Mapping[str, Scores], dets: Sequence[str], modes: Sequence[str]) -> list[str]:
    head = ["Mode", *(f"{d}: recall pre / all, lead h" for d in dets)]
    rows = []
    for m in modes:
        row = [m]
        for d in dets:
            v = get(res[d], "views", "watch", "by_mode", m)
            row.append(f"{cell(get(v, 'recall_precursor'))} / {cell(get(v, 'recall_all'))}, "
                       f"{cell(get(v, 'lead', 'median_h'), 1)}")
        rows.append(row)
    return table(head, rows)


def mode_order(mode: str) -> tuple[int, str]:
    """M1 .. M13 in number order (a plain sort puts M10 before M2)."""
    head = mode.split("_")[0][1:]
    return (int(head) if head.isdigit() else 99, mode)


def _per_mode_levels(res: Mapping[str, Scores], d: str, modes: Sequence[str],
                     node_days: float | None) -> list[str]:
    """One detector's recall at watch and warning per mode, the share of each mode's failures a
    rule fired on (before or after them), the lead, and the false alarms on the mode's scope."""
    head = ["Mode", "failures", "with precursor", "recall pre watch", "recall pre warning",
            "recall all watch", "seen (any alert)", "lead median h (watch)",
            "FA / 1k node-days on its scope: watch", "warning"]
    rows = []
    for m in modes:
        w, a = (get(res[d], "views", v, "by_mode", m) for v in ("watch", "warning"))
        fas = []
        for v in ("watch", "warning"):
            scope = _mode_scope(res[d], m)
            n = (mean_of(get(res[d], "views", v, "by_scope", scope, "false_alarms")) or 0.0) \
                if scope else None
            fas.append("–" if n is None or not node_days else f"{1000 * n / node_days:.2f}")
        rows.append([m, cell(get(w, "failures"), 1), cell(get(w, "precursor"), 1),
                     cell(get(w, "recall_precursor")), cell(get(a, "recall_precursor")),
                     cell(get(w, "recall_all")),
                     cell(get(res[d], "coverage", "by_mode", m, "share")),
                     cell(get(w, "lead", "median_h"), 1), *fas])
    return table(head, rows)


def _mode_scope(res: Scores, mode: str) -> str | None:
    from models.simulator.modes import MODE_SCOPE, Mode

    try:
        return MODE_SCOPE[Mode(mode)].value
    except ValueError:
        return None


def _coverage(res: Mapping[str, Scores], dets: Sequence[str]) -> list[str]:
    names = list(get(res[dets[0]], "coverage", "classes") or {})
    rows = [[n, cell(get(res[dets[0]], "coverage", "classes", n, "downtime_share"), 3),
             str(get(res[dets[0]], "coverage", "classes", n, "mode") or "–")]
            + [cell(get(res[d], "coverage", "classes", n, "seen_share")) for d in dets]
            for n in names]
    rows.append(["**observed share of the known-cause downtime**", "1.000", ""]
                + [cell(get(res[d], "coverage", "observed_share"), 3) for d in dets])
    rows.append(["weighted by the share of failures seen", "1.000", ""]
                + [cell(get(res[d], "coverage", "weighted_share"), 3) for d in dets])
    if any(get(res[d], "coverage", "observed_share_diagnostics") is not None for d in dets):
        rows.append(["**observed with diagnostics** (gates and sweeps find at least half of an "
                     "active-only class's faults before a job does)", "1.000", ""]
                    + [cell(get(res[d], "coverage", "observed_share_diagnostics"), 3)
                       for d in dets])
    return table(["Fault class (public fault log)", "downtime share", "simulated mode",
                  *(f"{d}: seen" for d in dets)], rows)


_TALLY = (("faults", 1), ("found_gate", 1), ("found_sweep", 1), ("hit", 1), ("latent", 1),
          ("baseline_gpu_h", 0), ("saved_gpu_h", 0), ("saved_share", 3))
_TALLY_HEAD = ["faults", "found by gate", "found by sweep", "hit by a job first",
               "latent at the end", "GPU-h lost without diagnostics", "saved GPU-h",
               "saved share"]


def active_section(active: Scores) -> list[str]:
    """The active-only faults (M14-M16) at the configured diagnostics policy, per mode, and the
    totals over a few sweep rates (models/evaluation/active.py)."""
    pol = active.get("policy") or {}
    every = mean_of(pol.get("sweep_every_days"))
    rate = f"every {every:g} days" if every is not None else "no sweeps"
    gates = "gates on" if pol.get("gates") else "no gates"
    modes = sorted(active.get("by_mode") or {}, key=mode_order)
    rows = [[m, *(cell(get(active, "by_mode", m, k), n) for k, n in _TALLY)] for m in modes]
    rows.append(["**all**", *(cell(get(active, "total", k), n) for k, n in _TALLY)])
    out = [f"Configured policy: {gates}, sweeps {rate} (at most "
           f"{cell(pol.get('sweep_max_share'))} of the fleet at once, "
           f"{cell(pol.get('sweep_test_min'), 0)} min a test); per seed "
           f"{cell(active.get('gates'), 1)} gate runs and {cell(active.get('sweeps'), 1)} "
           f"sweep tests.", ""]
    out += table(["Mode", *_TALLY_HEAD], rows)
    rates = active.get("sweep_rates") or {}
    out += table(["Policy (gates on unless off)", *_TALLY_HEAD[1:4], "saved GPU-h",
                  "saved share", "sweep tests", "idle GPU-h under test"],
                 [[k, *(cell(get(v, x), n) for x, n in (
                     ("found_gate", 1), ("found_sweep", 1), ("hit", 1), ("saved_gpu_h", 0),
                     ("saved_share", 3), ("sweeps", 1), ("sweep_gpu_h", 0)))]
                  for k, v in rates.items()])
    return out


def _rows(dets: Sequence[str], fn: Callable[[str], list[str]]) -> list[list[str]]:
    return [[d, *fn(d)] for d in dets]


def section(title: str, body: list[str]) -> list[str]:
    return [f"### {title}", "", *body]


def render(result: Scores, plots: Mapping[str, str] | None = None, title: str = "") -> str:
    res: Mapping[str, Scores] = result["results"]
    dets = list(res)
    truth = result.get("truth", {})
    exp = result.get("exposure", {})
    modes = sorted(get(truth, "by_mode") or {}, key=mode_order)
    lines = [f"## {title or result.get('scenario', 'evaluation')}", ""]
    lines += [f"{cell(exp.get('nodes'), 0)} nodes ({cell(exp.get('gpus'), 0)} GPUs), "
              f"{cell(exp.get('days'), 1)} days at a {cell(exp.get('step_s'), 0)} s step: "
              f"{cell(exp.get('node_days'), 0)} node-days "
              f"per seed; seeds {result.get('seeds')}. Failures per seed: "
              f"{cell(get(truth, 'failures'), 1)} ({cell(get(truth, 'precursor'), 1)} with a "
              f"precursor, {cell(get(truth, 'observable'), 1)} observable).", ""]
    lines += section("Event-level scores", _headline(res, dets))
    lines += section("Per failure mode (watch view)", _per_mode(res, dets, modes))
    days = mean_of(exp.get("node_days"))
    for d in [d for d in dets if d in ("ours", "fused")] or dets[:1]:
        if get(res[d], "coverage") is not None:
            lines += section(f"Per failure mode, levels ({d})",
                             _per_mode_levels(res, d, modes, days))
    if all(get(res[d], "coverage") is not None for d in dets):
        lines += section("Share of the scenario's downtime in classes gpuhealth observes "
                         "(a class is observed when a rule fires on at least half of its "
                         "mode's failures)", _coverage(res, dets))
    if result.get("active") is not None:
        lines += section("Active-only faults: what gates and sweeps find before a job does",
                         active_section(result["active"]))
    lines += section("False alarms per 1,000 node-days per level", table(
        ["Detector", "watch", "warning", "critical", "main watch-level causes"],
        _rows(dets, lambda d: [cell(get(res[d], "views", v, "fa_per_1000_node_days"))
                               for v in ("watch", "warning", "critical")]
              + [_causes(get(res[d], "views", "watch", "false_alarms_by_rule"))])))
    lines += section("Critical (level 3) false alarms per 1,000 node-days per family",
                     _critical(res, dets))
    traps = sorted({t for d in dets for t in (get(res[d], "traps", "1") or {})})
    lines += section("Benign traps that raised an alert (level >= 1, span + 1 h)", table(
        ["Trap", "n", *dets],
        [[t, cell(get(res[dets[0]], "traps", "1", t, "n"), 1)]
         + [cell(get(res[d], "traps", "1", t, "share")) for d in dets] for t in traps]))
    lines += section("Detection delay of abrupt faults (no precursor, M1-M6; level >= 1)", table(
        ["Detector", "detected", "median s", "p90 s", "within 60 s"],
        _rows(dets, lambda d: [cell(get(res[d], "delay", "1", "share")),
                               cell(get(res[d], "delay", "1", "median_s"), 0),
                               cell(get(res[d], "delay", "1", "p90_s"), 0),
                               cell(get(res[d], "delay", "1", "within_60s"))])))
    lines += section("PR-AUC of the risk score ((entity, day) samples, failure within 24 h)", table(
        ["Detector", "precursor-bearing", "prevalence", "observable", "prevalence", *modes[:6]],
        _rows(dets, lambda d: [cell(get(res[d], "pr_auc", "precursor", "pr_auc"), 3),
                               cell(get(res[d], "pr_auc", "precursor", "prevalence"), 5),
                               cell(get(res[d], "pr_auc", "observable", "pr_auc"), 3),
                               cell(get(res[d], "pr_auc", "observable", "prevalence"), 5)]
              + [cell(get(res[d], "pr_auc", "by_mode", m, "pr_auc"), 3) for m in modes[:6]])))
    lines += section("Operational value (Young/Daly job model)", table(
        ["Detector", "failures", "avoided", "false alarms", "saved GPU-h", "FA cost GPU-h",
         "net share of lost GPU-h", "precursor-bearing: failures", "avoided",
         f"net share (seed's claim {CLAIM_SHARE:.2f})"],
        _rows(dets, lambda d: [cell(get(res[d], "operational", k), n) for k, n in (
            ("failures", 1), ("avoided", 1), ("false_alarms", 1), ("saved_gpu_h", 0),
            ("false_alarm_cost_gpu_h", 0), ("net_share", 3), ("precursor_failures", 1),
            ("avoided_precursor", 1), ("net_share_precursor", 3))])))
    lines += section("Time split: first half vs second half (watch view)", table(
        ["Detector", "precision 1st", "precision 2nd", "recall pre 1st", "recall pre 2nd",
         "FA/1k 1st", "FA/1k 2nd"],
        _rows(dets, lambda d: [cell(get(res[d], "halves", h, "watch", k))
                               for k in ("precision", "recall_precursor", "fa_per_1000_node_days")
                               for h in ("first", "second")])))
    if any(get(w, "by_mode") for w in (result.get("windows") or {}).values()):
        lines += section("Failure windows of pre-failure alerts (all seeds pooled; coverage / "
                         "median width in hours)", _windows(result))
        again = result.get("windows_recalibrated") or {}
        if any(get(w, "by_mode") for w in again.values()):
            first = next(iter(again.values()))
            lines += section("Failure windows recalibrated on the runs' own earlier alerts "
                             "(scored on the later half)",
                             _windows({"windows": again,
                                       "window_calibration": first.get("fitted_on")}))
    for model, scopes in (result.get("reliability") or {}).items():
        lines += section(f"Reliability of the model's probabilities ({model}, all seeds pooled)",
                         _reliability(scopes))
    for name, path in (plots or {}).items():
        lines += [f"![{name}]({path})", ""]
    return "\n".join(lines)


def _windows(result: Scores) -> list[str]:
    """Per detector set and failure mode: the windows shown raw, calibrated, and the constant
    baselines (models/evaluation/windows.py), as coverage / median width."""
    def pair(side: Any) -> str:
        if not side or not side.get("n"):
            return "–"
        return f"{cell(side.get('coverage'))} / {cell(side.get('median_width_h'), 1)}"

    rows = []
    stated = None
    for d, w in (result.get("windows") or {}).items():
        stated = w.get("coverage") or stated
        for mode, r in sorted((w.get("by_mode") or {}).items(),
                              key=lambda kv: (kv[0] == "all", mode_order(kv[0]))):
            src = ", ".join(f"{k} {v}" for k, v in sorted((r.get("sources") or {}).items()))
            rows.append([d, mode, cell(r.get("alerts"), 0), pair(r.get("raw")),
                         pair(r.get("calibrated")), src or "–", cell(r.get("hidden"), 0),
                         pair(r.get("constant")), pair(r.get("fixed_1_24h"))])
    head = ["Detector", "Failure mode", "alerts", "raw", "shown", "shown from", "withheld",
            "constant (same coverage)", "constant 1-24 h"]
    note = [f"Stated coverage {stated:.0%}; calibrated on {result.get('window_calibration')}."
            if stated else "No window calibration shipped: raw windows only.", ""]
    return note + table(head, rows)


def _critical(res: Mapping[str, Scores], dets: Sequence[str]) -> list[str]:
    """Per detector: critical false alarms per 1,000 node-days on each entity family and in
    all, their main causes (the strongest signal of each), and the pages that rode on a
    combination of signals none of which supported a page alone (issue 28)."""
    def row(d: str) -> list[str]:
        crit = get(res[d], "views", "critical")
        fams = [cell(get(crit, "fa_per_1000_node_days_by_family", f)) for f in FAMILIES]
        combined = get(res[d], "combined_pages")
        judged = mean_of(get(combined, "judged"))
        pages = "–" if not judged else (f"{cell(get(combined, 'combined'), 1)} of "
                                        f"{cell(get(combined, 'judged'), 1)}")
        return [*fams, cell(get(crit, "fa_per_1000_node_days")),
                _causes(get(crit, "false_alarms_by_rule")), pages]

    return table(["Detector", *FAMILY_TITLES, "all", "main causes (per seed)",
                  "pages on combined signals"], _rows(dets, row))


def _causes(counts: Any, top: int = 3) -> str:
    if not isinstance(counts, dict):
        return "–"
    means = sorted(((mean_of(v) or 0.0, k) for k, v in counts.items()), reverse=True)[:top]
    return ", ".join(f"{k} {m:.1f}" for m, k in means if m > 0) or "–"


def _reliability(scopes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Per head: samples, positives, mean predicted against observed rate, ECE, and the bins
    as "predicted -> observed (n)" (those with at least 100 samples; results.json has all)."""
    rows = []
    for scope, heads in scopes.items():
        for head, h in heads.items():
            bins = "; ".join(f"{b['predicted']:.3f}→{b['observed']:.3f} ({b['n']})"
                             for b in h.get("bins", []) if b["n"] >= 100)
            rows.append([scope, head, f"{h.get('n', 0)}", f"{h.get('positives', 0):.0f}",
                         _num(h.get("predicted"), 4), _num(h.get("observed"), 4),
                         _num(h.get("ece"), 4), bins or "–"])
    return table(["Scope", "Head", "samples", "positives", "mean predicted", "observed",
                  "ECE", "bins: predicted → observed (n)"], rows)


def _num(v: Any, digits: int) -> str:
    return "–" if v is None else f"{v:.{digits}f}"
