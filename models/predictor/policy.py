"""The predictor's settings: how its probabilities become risk (caps per horizon, persistence,
the floor; applied by the post-rule, models/predictor/post_rules.py) and what the explanation
and the forward may cost (models/predictor/detector.py). Apart from both so that settings can
name it without importing torch."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PredictorConfig:
    # Highest risk each horizon's probability may give (hours -> cap): a week's horizon alone
    # stays below warning (0.6 by default), a day's below critical (0.9): the model pages only
    # for the next hour.
    caps: dict[int, float] = field(default_factory=lambda: {1: 1.0, 24: 0.85, 168: 0.5})
    persist_h: int = 2  # scored hours a probability must hold before it counts
    # Below this a probability adds nothing to the risk: at a base rate of one failure per
    # GPU-year every GPU carries some, and fused with noisy-OR it would only blur the rules.
    floor: float = 0.05
    explain_from: float = 0.3  # explain entities at or above watch
    explain_max: int = 256  # bound the occlusion cost in a fleet-wide incident
    min_drop: float = 0.02  # a group whose occlusion moves p less than this is not named
    # torch threads for the hourly forward: one, because OpenMP workers spinning against the
    # collectors and the API on a busy node cost more than they gain (measured: 2 threads were
    # slower than 1 at every batch size on a loaded 2-core machine).
    threads: int = 1
