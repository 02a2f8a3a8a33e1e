"""The report's figures (matplotlib, Agg backend: no display needed): the PR curve of each
detector's risk score, the lead-time histogram of its watch-level hits, its false alarms per
level and the reliability diagram of the model's heads. Each function writes one PNG and
returns its file name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def pr_curves(curves: Mapping[str, tuple[Sequence[float], Sequence[float], float | None]],
              prevalence: float, path: Path) -> str:
    """curves: detector -> (recall, precision, AP), all seeds pooled."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, (rec, prec, ap) in curves.items():
        if len(rec):
            label = f"{name} (AP {ap:.3f})" if ap is not None else name
            ax.step(np.r_[0.0, rec], np.r_[prec[0], prec], where="post", label=label)
    ax.axhline(prevalence, color="grey", linestyle=":", label=f"prevalence {prevalence:.4f}")
    ax.set(xlabel="recall", ylabel="precision", xlim=(0, 1), ylim=(0, 1.02),
           title="Risk score, (entity, day) samples, failure within 24 h")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def lead_histogram(leads_h: Mapping[str, Sequence[float]], path: Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    bins = np.logspace(np.log10(1 / 60), np.log10(7 * 24), 25)
    for name, leads in leads_h.items():
        a = np.clip(np.asarray(leads, dtype=np.float64), bins[0], bins[-1])
        if len(a):
            ax.hist(a, bins=bins, histtype="step", linewidth=1.5, label=f"{name} (n={len(a)})")
    for h, text in ((1.0, "1 h"), (24.0, "24 h")):
        ax.axvline(h, color="grey", linestyle=":")
        ax.text(h, ax.get_ylim()[1] * 0.95, text, fontsize=8)
    ax.set(xscale="log", xlabel="lead time (h)", ylabel="detected failures",
           title="Lead time of watch-level hits")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def false_alarm_bars(rates: Mapping[str, Sequence[float]], levels: Sequence[str],
                     targets: Sequence[float], path: Path) -> str:
    """rates: detector -> false alarms per 1,000 node-days per level; targets per level
    (docs/evaluation.md, Metrics) are drawn as markers."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    width = 0.8 / max(len(rates), 1)
    x = np.arange(len(levels))
    for i, (name, r) in enumerate(rates.items()):
        ax.bar(x + i * width, np.nan_to_num(np.asarray(r, dtype=np.float64)), width, label=name)
    ax.scatter(x + 0.4 - width / 2, targets, marker="_", s=400, color="black",
               label="target", zorder=3)
    ax.set_xticks(x + 0.4 - width / 2, levels)
    ax.set(yscale="symlog", ylabel="false alarms per 1,000 node-days",
           title="False alarms per level")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def reliability(heads: Mapping[str, Mapping[str, Any]], title: str, path: Path) -> str:
    """heads: head -> its reliability table (models/evaluation/reliability.py): one line per
    head through its bins' (mean predicted, observed rate), and the diagonal. Both axes are
    symlog so the bins near 0, where almost every sample lies, stay readable."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 5.5))
    diag = np.r_[0.0, np.logspace(-4, 0, 64)]  # many points: a straight line bends in symlog
    ax.plot(diag, diag, color="grey", linestyle=":", label="perfectly calibrated")
    colors = plt.get_cmap("tab20").colors
    for k, (head, h) in enumerate(heads.items()):
        bins = h.get("bins", [])
        if bins:
            ece = h.get("ece")
            label = f"{head} (ECE {ece:.3f})" if ece is not None else head
            ax.plot([b["predicted"] for b in bins], [b["observed"] for b in bins],
                    marker="o", markersize=3, linewidth=1, label=label,
                    color=colors[k % len(colors)])
    ax.set_xscale("symlog", linthresh=1e-3)
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean predicted probability",
           ylabel="observed rate", title=title)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
