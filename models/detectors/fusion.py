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
        # Riskiest first; advisory opinions (fuse: counted for nothing) after every signal
        # that counts.
        fired = sorted((f for f in self.findings if f.risk[slot] > 0),
                       key=lambda f: (f.advisory, -float(f.risk[slot])))
        return [Signal(f.rule, f.signal_of(slot), float(f.value[slot]), f.threshold,
                       float(f.risk[slot]), f.hard) for f in fired]


# Below the alert policy's critical enter threshold (0.9, service.stages.alert_machine): what
# several pieces of evidence reach together, and what rules and model reach in agreement, may
# be a warning, never a page. A page needs one piece of evidence that supports it alone.
COMBINED_CAP = 0.85
AGREE_CAP = COMBINED_CAP  # rules and model agreeing raise risk up to warning, never to a page


def fuse(findings: list[Finding], sizes: dict[Scope, int]) -> dict[Scope, ScopeRisk]:
    """One risk per entity from its findings, counting each piece of evidence once.

    Findings with the same evidence key (models/detectors/evidence.py: rules reading one error
    stream or sharing one growth fit) are one piece of evidence: the strongest of them counts.
    Distinct pieces combine by noisy-OR: several weak signals add up, one strong one dominates,
    and the result never exceeds 1; but a combination never lifts an entity past COMBINED_CAP,
    so it cannot reach a level (a page) that none of its pieces supports alone.

    A model's probabilities (source "model") are one opinion beside the rules: its findings
    (one per failure mode, from one forward over the same inputs) count as one piece, the
    larger of model and rules counts, and where both see risk their noisy-OR may lift it, but
    only up to AGREE_CAP, because model and rules read the same evidence and a page needs one
    of them to be sure on its own. An advisory model finding (`Finding.advisory`: its window is not
    calibrated for the mode) adds nothing: it is explained, after every finding that counts,
    and the risk is the rest's. Capping it below watch was not enough: held at 0.25 it kept
    watch alerts from resolving (the watch exit threshold is 0.2), and the alerts that followed
    differed from the rules' (issue 34)."""
    out: dict[Scope, ScopeRisk] = {}
    for scope, n in sizes.items():
        hard = np.zeros(n, bool)
        mine = [f.fitted(n) for f in findings if f.scope is scope]
        pieces: dict[str, F32] = {}  # evidence key -> its strongest reading per entity
        model = np.zeros(n, np.float32)
        for f in mine:
            if f.advisory:
                continue  # explained, never counted: the rules' timing stands
            if f.source == "model":
                np.maximum(model, f.risk, out=model)
            else:
                held = pieces.get(f.evidence)  # never written in place: no copy needed
                pieces[f.evidence] = f.risk if held is None else np.maximum(held, f.risk)
            if f.hard:
                hard |= f.risk >= 0.999  # only a full-certainty hard rule skips the wait
        rules = combined(list(pieces.values()), n)
        both = np.minimum(1 - (1 - rules) * (1 - model), AGREE_CAP)
        risk = np.maximum(np.maximum(rules, model), both).astype(np.float32)
        out[scope] = ScopeRisk(risk, hard, mine)
    return out


def combined(pieces: list[F32], n: int) -> F32:
    """Noisy-OR of independent pieces of evidence, capped at COMBINED_CAP where no single piece
    reaches further: the strongest piece always stands, the combination adds only below a
    page."""
    if not pieces:
        return np.zeros(n, np.float32)
    keep = np.ones(n, np.float32)
    strongest = np.zeros(n, np.float32)
    for r in pieces:
        keep *= 1 - r
        np.maximum(strongest, r, out=strongest)
    out: F32 = np.maximum(strongest, np.minimum(1 - keep, COMBINED_CAP)).astype(np.float32)
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
