"""The share of the scenario's downtime in the fault classes gpuhealth observes (issue 31).

Each class of the public fault log of 400 eight-GPU servers over 349 days (SIGCOMM 2025;
models/simulator/fault_log.py) weighs by its share of the known-cause downtime. A class counts as
observed when a rule fires on it in the simulator: when at least half of the failures of its
simulated mode have a related alert at any level, from the watch view's 7 days before the
failure to the end of its grace after it (a prediction or a detection). A class with no
simulated mode or no failure in the run is not observed; nor, by passive telemetry, are the
active-only classes (M14-M16: no sample shows them). The weighted figure gives each class its
mode's detected share instead of 0 or 1.

With diagnostics (issue 32), a class also counts as observed when gates and sweeps find at least
half of its mode's faults before a job fails on them (of those settled within the run:
models/evaluation/active.py); both figures are reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from models.evaluation.events import Failure
from models.simulator.fault_log import CLASSES

Scores = dict[str, Any]
OBSERVED_AT = 0.5  # the share of a mode's failures a rule must fire on


def mode_detection(failures: Sequence[Failure], predicted: set[int], detected: set[int]
                   ) -> Scores:
    """Per mode: failures, those with an alert before (predicted) or after (detected) them."""
    out: Scores = {}
    for mode in sorted({f.mode for f in failures}):
        mine = [i for i, f in enumerate(failures) if f.mode == mode]
        hit = sum(i in predicted or i in detected for i in mine)
        out[mode] = {"failures": len(mine), "seen": hit, "share": hit / len(mine)}
    return out


def downtime_coverage(by_mode: Scores) -> Scores:
    total = sum(c.share for c in CLASSES)
    classes: Scores = {}
    observed = weighted = 0.0
    for c in CLASSES:
        seen = by_mode.get(c.mode.value, {}) if c.mode is not None else {}
        share = float(seen.get("share", 0.0)) if seen.get("failures") else 0.0
        ok = share >= OBSERVED_AT
        observed += c.share * ok
        weighted += c.share * share
        classes[c.name] = {"downtime_share": c.share / total,
                           "mode": c.mode.value if c.mode is not None else None,
                           "failures": seen.get("failures", 0), "seen_share": share,
                           "observed": 1.0 if ok else 0.0}
    return {"observed_share": observed / total, "weighted_share": weighted / total,
            "classes": classes}


def with_diagnostics(cov: Scores, found: Mapping[str, float | None]) -> Scores:
    """`cov` (downtime_coverage) plus the observed share when a class also counts by the share
    of its mode's faults that diagnostics found first (`found`, per mode)."""
    total = sum(c.share for c in CLASSES)
    observed = 0.0
    for c in CLASSES:
        passive = float(cov["classes"].get(c.name, {}).get("observed", 0.0)) > 0
        share = found.get(c.mode.value) if c.mode is not None else None
        observed += c.share * (passive or (share is not None and share >= OBSERVED_AT))
    return cov | {"observed_share_diagnostics": observed / total}
