"""Active diagnostics as hard signals: a run of a suite on a node (service/diagnostics) ends in
a `diag` event whose value is what failed (collectors/diagnostics/classes.py). The node's latest
run within `hold_s` decides: a failure fires the rule of its class, naming it in the alert
(`diag_memory`, `diag_p2p_bandwidth`, ...); a later run that passed (value 0) clears it, as a
repair clears a hard rule.

A failed active test is ground truth that the node is bad (issue 32): every hardware class is
risk 1.0, a page and a migration off the node. A failure of the node's set-up (DCGM's
deployment checks: persistence mode, a denylisted driver) is a warning: fix the configuration;
the board is not the fault."""

from __future__ import annotations

import numpy as np

from collectors.catalog import Scope
from collectors.diagnostics.classes import RULE_NAMES, FaultClass
from models.detectors.findings import F64, Finding
from models.detectors.view import FleetView, ScopeView

SOFTWARE_RISK = 0.7  # level 2: a warning (models.detectors.chassis.LEVEL2_RISK)
_WHAT = {
    FaultClass.MEMORY: "its memory test",
    FaultClass.PCIE: "its PCIe / host copy test",
    FaultClass.P2P_BANDWIDTH: "its GPU-to-GPU bandwidth test (NCCL / nvbandwidth)",
    FaultClass.STRESS: "its stress test",
    FaultClass.DATA_CORRUPTION: "with wrong results (silent data corruption)",
    FaultClass.SOFTWARE: "its set-up checks (the node's configuration, not the board)",
    FaultClass.OTHER: "a check",
}


def diag_findings(view: FleetView, g: ScopeView, now: float, hold_s: float) -> list[Finding]:
    """One finding per fault class, over the node scope."""
    latest: dict[str, tuple[float, int]] = {}
    for ev in view.events_since(now - hold_s):
        if ev.metric == "diag" and ev.ts <= now:
            seen = latest.get(ev.entity)
            if seen is None or ev.ts >= seen[0]:
                latest[ev.entity] = (ev.ts, int(ev.value))
    index = {e.key: i for i, e in enumerate(g.entities)} if latest else {}
    out = []
    for cls, rule in RULE_NAMES.items():
        risk = np.zeros(len(g), np.float32)
        value: F64 = np.full(len(g), np.nan)
        for node, (_, code) in latest.items():
            i = index.get(node)
            if i is not None and code == cls:
                risk[i] = SOFTWARE_RISK if cls is FaultClass.SOFTWARE else 1.0
                value[i] = float(code)
        out.append(Finding(rule, Scope.NODE, risk, value, np.nan,
                           f"the node failed {_WHAT[cls]} in its last diagnostic run "
                           f"(GET /v1/nodes/<node>/diagnostics has the figures)", hard=True))
    return out
