"""The alert state machine: three levels with for-durations and separate enter/exit thresholds.

Level 1 records, level 2 emails, level 3 pages and migrates (DESIGN.md decision 8). A level is
entered once risk has stayed at or above its enter threshold for its for-duration (a hard rule
at full certainty enters level 3 at once) and left once risk has stayed below its exit threshold
for `resolve_for_s`, so a risk hovering at a boundary does not flap. The machine is vectorised
over every entity; Python only touches the few entities that change level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.frames import Entity

F64 = npt.NDArray[np.float64]
LEVELS = (1, 2, 3)
LEVEL_NAMES = {0: "ok", 1: "record", 2: "email", 3: "page"}


@dataclass(frozen=True, slots=True)
class AlertPolicy:
    enter: tuple[float, float, float] = (0.3, 0.6, 0.9)
    exit: tuple[float, float, float] = (0.2, 0.45, 0.75)
    for_s: tuple[float, float, float] = (0.0, 120.0, 60.0)
    resolve_for_s: float = 300.0

    def __post_init__(self) -> None:
        for lo, hi in zip(self.exit, self.enter, strict=True):
            if not 0 < lo < hi <= 1:
                raise ValueError(
                    f"exit threshold {lo} must lie below enter threshold {hi} in (0, 1]")
        if list(self.enter) != sorted(self.enter):
            raise ValueError("enter thresholds must rise with the level")


@dataclass(frozen=True, slots=True)
class Transition:
    scope: Scope
    slot: int
    entity: str
    node: str
    old: int
    new: int
    at: float
    risk: float


class _ScopeState:
    def __init__(self) -> None:
        self.level = np.zeros(0, np.int8)
        self.above: F64 = np.zeros((0, 3))  # since when risk >= enter[L], NaN when not
        self.below: F64 = np.zeros(0)  # since when risk < exit[level], NaN when not

    def fit(self, n: int) -> None:
        grow = n - len(self.level)
        if grow > 0:
            self.level = np.concatenate([self.level, np.zeros(grow, np.int8)])
            self.above = np.concatenate([self.above, np.full((grow, 3), np.nan)])
            self.below = np.concatenate([self.below, np.full(grow, np.nan)])


class AlertMachine:
    def __init__(self, policy: AlertPolicy | None = None) -> None:
        self.policy = policy or AlertPolicy()
        self._state: dict[Scope, _ScopeState] = {}
        self._enter = np.array(self.policy.enter)
        self._exit = np.array(self.policy.exit)
        self._for = np.array(self.policy.for_s)

    def restore(self, scope: Scope, slot: int, level: int) -> None:
        """Take back a level persisted before a restart, so it neither re-pages nor is lost."""
        st = self._state.setdefault(scope, _ScopeState())
        st.fit(slot + 1)
        st.level[slot] = level

    def level(self, scope: Scope) -> npt.NDArray[np.int8]:
        return self._state.setdefault(scope, _ScopeState()).level

    def step(self, scope: Scope, risk: npt.NDArray[np.float32], hard: npt.NDArray[np.bool_],
             now: float, entities: Sequence[Entity]) -> list[Transition]:
        p = self.policy
        st = self._state.setdefault(scope, _ScopeState())
        n = len(risk)
        st.fit(n)
        level, above, below = st.level[:n], st.above[:n], st.below[:n]
        r = risk.astype(np.float64)[:, None]
        over = r >= self._enter[None, :]
        above[over & np.isnan(above)] = now
        above[~over] = np.nan
        # Highest level whose for-duration has elapsed (hard rules skip the wait for level 3).
        ready = (now - above) >= self._for[None, :]
        ready[:, 2] |= hard & over[:, 2]
        target = np.where(ready[:, 2], 3, np.where(ready[:, 1], 2, np.where(ready[:, 0], 1, 0)))
        # Hold: the highest level whose exit threshold risk still meets.
        hold = (r >= self._exit[None, :]).sum(axis=1)  # thresholds rise, so a count is a level
        up = target > level
        falling = ~up & (hold < level)
        below[falling & np.isnan(below)] = now
        below[~falling] = np.nan
        down = falling & ((now - below) >= p.resolve_for_s)
        new = level.copy()
        new[up] = target[up]
        new[down] = np.maximum(hold[down], target[down])
        changed = np.flatnonzero(new != level)
        out = [Transition(scope, i, entities[i].key, entities[i].node, int(level[i]),
                          int(new[i]), now, float(risk[i])) for i in map(int, changed)]
        level[:] = new
        below[changed] = np.nan
        return out
