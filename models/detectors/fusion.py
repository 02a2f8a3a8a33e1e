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


def fuse(findings: list[Finding], sizes: dict[Scope, int]) -> dict[Scope, ScopeRisk]:
    """Noisy-OR of independent rule risks: several weak signals add up, one strong one
    dominates, and the result never exceeds 1."""
    out: dict[Scope, ScopeRisk] = {}
    for scope, n in sizes.items():
        keep = np.ones(n, np.float32)
        hard = np.zeros(n, bool)
        mine = [f for f in findings if f.scope is scope]
        for f in mine:
            r = f.risk[:n]
            keep *= 1 - r
            if f.hard:
                hard |= r >= 0.999  # only a full-certainty hard rule skips the wait
        out[scope] = ScopeRisk((1 - keep).astype(np.float32), hard, mine)
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
