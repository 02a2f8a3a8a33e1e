"""Fusion: one risk in [0, 1] per entity from its rules' findings, the node risk, and the
explanation (which signals, their values, the thresholds they crossed)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.findings import Finding, Signal

F32 = npt.NDArray[np.float32]
B = npt.NDArray[np.bool_]


@dataclass(slots=True)
class ScopeRisk:
    risk: F32  # fused risk per entity slot
    hard: B  # a hard rule fired for this entity
    findings: list[Finding] = field(default_factory=list)

    def explain(self, slot: int) -> list[Signal]:
        out = [
            Signal(f.rule, f.signal_of(slot), float(f.value[slot]), f.threshold,
                   float(f.risk[slot]), f.hard)
            for f in self.findings
            if f.risk[slot] > 0
        ]
        out.sort(key=lambda s: -s.risk)
        return out


AGREE_CAP = 0.85  # rules and model agreeing raise risk up to warning, never to a page


def fuse(findings: list[Finding], sizes: dict[Scope, int]) -> dict[Scope, ScopeRisk]:
    """Noisy-OR of independent rule risks: several weak signals add up, one strong one
    dominates, and the result never exceeds 1. A model's probabilities (source "model") are
    one opinion beside the rules: the larger of the two counts, and where both see risk their
    noisy-OR may lift it, but only up to AGREE_CAP, because model and rules read the same
    evidence and a page needs one of them to be sure on its own."""
    out: dict[Scope, ScopeRisk] = {}
    for scope, n in sizes.items():
        keep = {"rule": np.ones(n, np.float32), "model": np.ones(n, np.float32)}
        hard = np.zeros(n, bool)
        mine = [f.fitted(n) for f in findings if f.scope is scope]
        for f in mine:
            r = f.risk
            k = keep["model" if f.source == "model" else "rule"]
            k *= 1 - r
            if f.hard:
                hard |= r >= 0.999  # only a full-certainty hard rule skips the wait
        rules, model = 1 - keep["rule"], 1 - keep["model"]
        both = np.minimum(1 - keep["rule"] * keep["model"], AGREE_CAP)
        risk = np.maximum(np.maximum(rules, model), both).astype(np.float32)
        out[scope] = ScopeRisk(risk, hard, mine)
    return out


def node_risk(risks: dict[Scope, ScopeRisk], node_of: dict[Scope, npt.NDArray[np.int32]],
              n_nodes: int) -> F32:
    """A node is as risky as its riskiest GPU, link or port."""
    out = np.zeros(n_nodes, np.float32)
    for scope, sr in risks.items():
        nodes = node_of[scope][: len(sr.risk)]
        valid = nodes >= 0
        np.maximum.at(out, nodes[valid], sr.risk[valid])
    return out
