"""The model card: what a trained artifact was trained on, what it reads, what it predicts, how
well it did on data it did not see, and the exact command that reproduces it."""

from __future__ import annotations

import math
from typing import Any

from models.predictor.artifact import ModelArtifact
from models.predictor.card_history import history_lines
from models.predictor.features import FEATURES


def _num(x: Any, fmt: str = ".3f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return format(x, fmt)


def _init_lines(ft: dict[str, Any] | None) -> list[str]:
    if not ft:
        return []
    return [f"Fine-tuned from **{ft['version']}** (`{ft['path']}`): learning rate "
            f"{ft['lr']:g}, at most {ft['epochs']} epochs, patience {ft['patience']}, the "
            "init model's weights scored as epoch 0; input scaler kept from the init model; "
            "calibration refitted on this data's validation split (a head without a positive "
            "there keeps the init model's calibrator).", ""]


def model_card(art: ModelArtifact, digest: str) -> str:
    card = art.card
    cfg = art.config
    lines = [f"# Model card: {art.version}", "",
             "LSTM failure predictor for gpuhealth (models/predictor). Reproduce with:", "",
             "```", str(card.get("command", "")), "```", "",
             f"Weights sha256 `{digest}`. Architecture {cfg['architecture']}: LSTM "
             f"(hidden {cfg['hidden']}, dropout {cfg['dropout']}) over the last "
             f"{int(cfg['window_h']) + 1} to {2 * int(cfg['window_h'])} hours of hourly "
             "features (two chunk states restarted every "
             f"{2 * int(cfg['window_h'])} h, {cfg['window_h']} h apart, carried hour by hour; "
             "models/predictor/chunks.py), the last hour also fed to the heads directly; one "
             "sigmoid per failure mode and horizon, calibrated per head on the validation "
             "split.", "", *_init_lines(card.get("fine_tuned_from")),
             "## Data", "",
             "| Source | Seed | Nodes | GPUs | Days | Step s | Failures |",
             "|---|---|---|---|---|---|---|"]
    for d in card.get("data", []):
        lines.append(f"| {d.get('source', '')} | {d.get('seed', '–')} | {d.get('nodes', '–')} "
                     f"| {d.get('gpus', '–')} | {_num(d.get('days'), '.1f')} | "
                     f"{_num(d.get('step_s'), '.0f')} | {d.get('failures', '–')} |")
    if card.get("learned_from"):  # gpuhealth train --from-influx
        lines += ["", *history_lines(card["learned_from"])]
    lines += ["", "Splits per run over time: the first 60 % of hours train, the next 20 % "
              "validate (early stopping, calibration), the last 20 % test; 10 % of nodes are "
              "held out of training and validation and scored separately over the test period. "
              f"Training took {_num(card.get('train_wall_s'), '.0f')} s.", "",
              "## Features", ""]
    for scope, feats in FEATURES.items():
        if scope.value not in art.scopes:
            continue
        groups: dict[str, list[str]] = {}
        for f in feats:
            groups.setdefault(f.group, []).append(f.name)
        lines.append(f"**{scope.value}** ({len(feats)}): " + "; ".join(
            f"{g}: {', '.join(n)}" for g, n in groups.items()))
        lines.append("")
    lines += ["Per hour from the window store's hour buckets: gauge means and peaks, counter "
              "increases as log1p, states as the hour's maximum, values relative to the median "
              "of the same node's peers, NVLink as the worst link and shares of links, "
              "missing-data shares, and the entity against its own last 5 days from the daily "
              "buckets (usual error rates, remaps, temperature offset, days reported, days "
              "since each error group was active).", "", "## Results (test split)", ""]
    for scope_name, m in card.get("metrics", {}).items():
        if m.get("kept_from_init"):
            lines += [f"### {scope_name}", "", f"Kept from {m['kept_from_init']} unchanged: no "
                      "failure of its modes was labelled in the training period.", ""]
            continue
        kept = m.get("init_calibrators_kept")
        lines += [f"### {scope_name}", "",
                  f"Samples: {m['samples']}. Best epoch {m.get('best_epoch')}"
                  + (" (0: the init model's weights)" if m.get("best_epoch") == 0 else "")
                  + "." + (f" Heads without a validation positive, keeping the init model's "
                           f"calibrator: {', '.join(kept)}." if kept else ""), "",
                  "| Head | positives (test) | prevalence | AP test | AP held-out nodes | "
                  "AP validation | ECE test |", "|---|---|---|---|---|---|---|"]
        for head, t in m["test"].items():
            ho = m["held_out"].get(head, {})
            va = m["val"].get(head, {})
            lines.append(f"| {head} | {t['positives']} | {_num(t['prevalence'], '.5f')} | "
                         f"{_num(t.get('average_precision'))} | "
                         f"{_num(ho.get('average_precision'))} | "
                         f"{_num(va.get('average_precision'))} | {_num(t.get('ece'), '.4f')} |")
        lines.append("")
        rel = [(h, t["reliability"]) for h, t in m["test"].items() if t.get("reliability")
               and h.endswith("@24h")]
        if rel:
            lines += ["Calibration (test split, 24-h heads): predicted vs observed rate per "
                      "bin.", "", "| Head | bins (predicted → observed, n) |", "|---|---|"]
            for h, bins in rel:
                lines.append(f"| {h} | " + "; ".join(
                    f"{b['predicted']:.3f} → {b['observed']:.3f} ({b['n']})" for b in bins)
                    + " |")
            lines.append("")
    lines += ["## Use", "",
              "The service loads the artifact named by `detectors.model.path`; without one it "
              "runs rules and thresholds only and says so in `/readyz`. Risk per failure mode is "
              "the largest calibrated probability over the horizons held for two scored hours, "
              "a week's horizon capped at 0.5 (watch) and a day's at 0.85 (below a page); "
              "fusion takes the larger of the model's and the rules' risk, agreement lifting "
              "it up to 0.85 (docs/design.md).", ""]
    return "\n".join(lines)

