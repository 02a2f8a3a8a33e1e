"""The alert state machine: three levels with for-durations, separate enter/exit thresholds,
minimum dwell, flap detection, a long window for pages, and a no-data state.

Level 1 records, level 2 emails, level 3 pages and may migrate jobs (docs/design.md, "Alert state
machine").

This is the second half of the path probability -> risk -> level: `AlertPolicy` turns the fused
risk of every detector into levels. The first half, the model's calibrated probabilities into its
risk (caps per horizon, persistence, floor), is the predictor's post-rule
(models/predictor/post_rules.py), configured by `PredictorConfig` (models/predictor/policy.py).

- A level is entered once risk has stayed at or above its enter threshold for its for-duration
  (pending meanwhile). Level 3 also needs the long window to agree: the risk's exponentially
  weighted mean over `long_window_s` must reach `long_enter`, so one noisy tick cannot page. A
  hard rule at full certainty (a GPU off the bus, a double-bit ECC error) is its own
  corroboration and skips both waits.
- A level is left once risk has stayed below its exit threshold for `resolve_for_s`
  (recovering meanwhile), and never before the level's minimum dwell, so a risk hovering at a
  boundary does not flap.
- An instance whose level changed `flap_enter` times within `flap_window_s` is flapping: it
  cannot rise above level 2 (no page, no migration) until its changes fall to `flap_exit`.
- An entity whose telemetry is older than the stale limit is in no-data: its level is frozen,
  so stale data neither resolves an alert nor raises one, and no action is taken on it. The
  one exception is a hard fault at certainty: its evidence (an Xid 79 drained late from an
  agent's spool, from a GPU that has since gone silent) raises the level whenever it arrives,
  since a GPU that fell off the bus is exactly the one that stops reporting.

The machine is vectorised over every entity; Python only touches the few that change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.frames import Entity
from models.detectors.fusion import ScopeRisk

F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
LEVELS = (1, 2, 3)
LEVEL_NAMES = {0: "ok", 1: "record", 2: "email", 3: "page"}


class AlertState(IntEnum):
    INACTIVE = 0
    PENDING = 1  # risk over a level's enter threshold, its for-duration still running
    FIRING = 2
    RECOVERING = 3  # below the exit threshold, resolve_for_s still running
    NODATA = 4  # telemetry stale: level frozen, no action


STATE_NAMES = {s: s.name.lower() for s in AlertState}


@dataclass(frozen=True, slots=True)
class AlertPolicy:
    """Risk to level, the settings-facing half of probability -> risk -> level (the model's
    probability -> risk half is models/predictor/post_rules.py)."""

    enter: tuple[float, float, float] = (0.3, 0.6, 0.9)
    exit: tuple[float, float, float] = (0.2, 0.45, 0.75)
    for_s: tuple[float, float, float] = (0.0, 120.0, 60.0)
    resolve_for_s: float = 300.0
    dwell_s: tuple[float, float, float] = (0.0, 300.0, 600.0)  # least time at a level
    # Level 3 also needs risk's weighted mean over this window (time constant half of it) at
    # or above long_enter. 0 disables the long window.
    long_window_s: float = 900.0
    long_enter: float = 0.75
    flap_window_s: float = 3600.0
    flap_enter: int = 6  # level changes within the window that make an instance flapping
    flap_exit: int = 2  # ... and at or below which it stops
    stale_after_s: float = 60.0  # never below three data steps (the window store's step)
    # Automatic migration needs a hard rule or the model this sure (calibrated probability).
    migrate_min_confidence: float = 0.9

    def __post_init__(self) -> None:
        for lo, hi in zip(self.exit, self.enter, strict=True):
            if not 0 < lo < hi <= 1:
                raise ValueError(
                    f"exit threshold {lo} must lie below enter threshold {hi} in (0, 1]")
        if list(self.enter) != sorted(self.enter):
            raise ValueError("enter thresholds must rise with the level")
        if not 0 <= self.flap_exit < self.flap_enter:
            raise ValueError(
                f"flap_exit ({self.flap_exit}) must lie below flap_enter ({self.flap_enter})")
        if self.stale_after_s <= 0:
            raise ValueError("stale_after_s must be positive")
        if not 0 < self.long_enter <= 1:
            raise ValueError("long_enter must lie in (0, 1]")


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
    hard: bool = False  # a hard rule fired at this tick
    corroborated: bool = False  # hard, or the model at least migrate_min_confidence sure
    flapping: bool = False
    alertname: str = ""  # empty: named after the scope (alert_store.ALERTNAMES)

    @property
    def derived(self) -> bool:
        """A node or fleet alert (no data, a storm), not one entity's risk: it predicts no
        failure and has no signals of its own."""
        return bool(self.alertname)


@dataclass(frozen=True, slots=True)
class FlagChange:
    """An instance started or stopped flapping, or its telemetry went stale or came back."""

    scope: Scope
    slot: int
    entity: str
    node: str
    flapping: bool
    stale: bool
    at: float


class _ScopeState:
    def __init__(self, flips: int) -> None:
        self.level = np.zeros(0, np.int8)
        self.above: F64 = np.zeros((0, 3))  # since when risk >= enter[L], NaN when not
        self.below: F64 = np.zeros(0)  # since when risk < exit[level], NaN when not
        self.since: F64 = np.zeros(0)  # when the current level was entered
        self.mean: F64 = np.zeros(0)  # the long window's weighted mean
        self.seen: F64 = np.zeros(0)  # when the mean was last updated
        self.flips: F64 = np.zeros((0, flips))  # times of the latest level changes, newest last
        self.flapping = np.zeros(0, bool)
        self.stale = np.zeros(0, bool)

    def fit(self, n: int) -> None:
        grow = n - len(self.level)
        if grow <= 0:
            return
        cat = np.concatenate
        self.level = cat([self.level, np.zeros(grow, np.int8)])
        self.above = cat([self.above, np.full((grow, 3), np.nan)])
        self.below = cat([self.below, np.full(grow, np.nan)])
        self.since = cat([self.since, np.full(grow, -np.inf)])
        self.mean = cat([self.mean, np.zeros(grow)])
        self.seen = cat([self.seen, np.full(grow, np.nan)])
        self.flips = cat([self.flips, np.full((grow, self.flips.shape[1]), -np.inf)])
        self.flapping = cat([self.flapping, np.zeros(grow, bool)])
        self.stale = cat([self.stale, np.zeros(grow, bool)])

    def take(self, keep: npt.NDArray[np.intp]) -> None:
        keep = keep[keep < len(self.level)]  # slots this scope never stepped stay unfitted
        for name in ("level", "above", "below", "since", "mean", "seen", "flips", "flapping",
                     "stale"):
            setattr(self, name, getattr(self, name)[keep])


class AlertMachine:
    def __init__(self, policy: AlertPolicy | None = None) -> None:
        self.policy = policy or AlertPolicy()
        self._state: dict[Scope, _ScopeState] = {}
        self._enter = np.array(self.policy.enter)
        self._exit = np.array(self.policy.exit)
        self._for = np.array(self.policy.for_s)
        self._dwell = np.concatenate([[0.0], self.policy.dwell_s])
        self.flag_changes: list[FlagChange] = []  # of the latest step

    def _scope(self, scope: Scope) -> _ScopeState:
        st = self._state.get(scope)
        if st is None:
            st = self._state[scope] = _ScopeState(self.policy.flap_enter)
        return st

    def reset(self) -> None:
        """Forget every level (a replica taking over restores them from the alert store)."""
        self._state = {}
        self.flag_changes = []

    def restore(self, scope: Scope, slot: int, level: int, *, since: float = -np.inf,
                flapping: bool = False) -> None:
        """Take back a level persisted before a restart, so it neither re-pages nor is lost."""
        st = self._scope(scope)
        st.fit(slot + 1)
        st.level[slot] = level
        st.since[slot] = since
        st.flapping[slot] = flapping
        # A restored page keeps its long window satisfied: the restart is not new evidence.
        st.mean[slot] = self.policy.long_enter if level >= 3 else 0.0

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        """Follow the window store's forgetting (service.stages.windows.Compaction)."""
        self._scope(scope).take(keep)

    def level(self, scope: Scope) -> npt.NDArray[np.int8]:
        return self._scope(scope).level

    def states(self, scope: Scope) -> npt.NDArray[np.int8]:
        """The state per slot (AlertState values), derived from the timers."""
        st = self._scope(scope)
        out = np.where(st.level > 0, AlertState.FIRING, AlertState.INACTIVE).astype(np.int8)
        out[(st.level == 0) & ~np.isnan(st.above[:, 0])] = AlertState.PENDING
        out[(st.level > 0) & ~np.isnan(st.below)] = AlertState.RECOVERING
        out[st.stale] = AlertState.NODATA
        return out

    def flapping(self, scope: Scope) -> B:
        return self._scope(scope).flapping

    def stale(self, scope: Scope) -> B:
        return self._scope(scope).stale

    def step(self, scope: Scope, risk: npt.NDArray[np.float32], hard: B, now: float,
             entities: Sequence[Entity], *, last_seen: F64 | None = None,
             confidence: npt.NDArray[np.float32] | None = None,
             stale_after_s: float | None = None) -> list[Transition]:
        """Advance every entity of a scope to `now`. `last_seen`: the newest sample time per
        entity (None: all fresh); `confidence`: the model's calibrated probability per entity,
        for the migration corroboration."""
        p = self.policy
        st = self._scope(scope)
        n = len(risk)
        st.fit(n)
        level, above, below = st.level[:n], st.above[:n], st.below[:n]
        r = risk.astype(np.float64)
        limit = stale_after_s if stale_after_s is not None else p.stale_after_s
        stale = (np.zeros(n, bool) if last_seen is None
                 else ~(now - last_seen[:n] <= limit))  # never seen counts as stale
        fresh = ~stale
        self._update_mean(st, n, r, now, fresh)
        over = r[:, None] >= self._enter[None, :]
        above[over & np.isnan(above) & fresh[:, None]] = now
        above[~over] = np.nan
        # Highest level whose for-duration has elapsed; level 3 also needs the long window.
        ready = (now - above) >= self._for[None, :]
        if p.long_window_s > 0:
            ready[:, 2] &= st.mean[:n] >= p.long_enter
        ready[:, 2] |= hard & over[:, 2]  # a hard fault at certainty corroborates itself
        target = np.where(ready[:, 2], 3, np.where(ready[:, 1], 2, np.where(ready[:, 0], 1, 0)))
        flapping = st.flapping[:n]
        target = np.where(flapping, np.minimum(target, 2), target)
        # Hold: the highest level whose exit threshold risk still meets.
        hold = (r[:, None] >= self._exit[None, :]).sum(axis=1)  # thresholds rise: a count
        up = target > level
        falling = ~up & (hold < level)
        below[falling & np.isnan(below)] = now
        below[~falling] = np.nan
        dwelt = (now - st.since[:n]) >= self._dwell[level]
        down = falling & ((now - below) >= p.resolve_for_s) & dwelt
        new = level.copy()
        new[up] = target[up]
        new[down] = np.maximum(hold[down], target[down])
        # Stale data neither raises nor resolves, except hard evidence raising (see above).
        frozen = stale & ~(hard & ready[:, 2] & (new > level))
        new[frozen] = level[frozen]
        changed = np.flatnonzero(new != level)
        conf = confidence if confidence is not None else np.zeros(n, np.float32)
        corroborated = hard | (conf[:n] >= p.migrate_min_confidence)
        out = [Transition(scope, i, entities[i].key, entities[i].node, int(level[i]),
                          int(new[i]), now, float(risk[i]), bool(hard[i]),
                          bool(corroborated[i]), bool(flapping[i]))
               for i in map(int, changed)]
        level[:] = new
        below[changed] = np.nan
        st.since[changed] = now
        self._flags(scope, st, n, changed, stale, now, entities)
        return out

    def _update_mean(self, st: _ScopeState, n: int, r: F64, now: float, fresh: B) -> None:
        tau = self.policy.long_window_s / 2
        if tau <= 0:
            return
        seen = st.seen[:n]
        dt = np.where(np.isnan(seen), 0.0, now - seen)  # first sight: no evidence yet
        a = np.where(fresh, 1.0 - np.exp(-np.maximum(dt, 0.0) / tau), 0.0)
        st.mean[:n] += a * (r - st.mean[:n])
        seen[fresh] = now

    def _flags(self, scope: Scope, st: _ScopeState, n: int, changed: npt.NDArray[np.intp],
               stale: B, now: float, entities: Sequence[Entity]) -> None:
        p = self.policy
        if len(changed):
            st.flips[changed] = np.roll(st.flips[changed], -1, axis=1)
            st.flips[changed, -1] = now
        recent = (now - st.flips[:n] <= p.flap_window_s).sum(axis=1)
        was = st.flapping[:n].copy()
        flapping = st.flapping[:n]
        flapping[recent >= p.flap_enter] = True
        flapping[recent <= p.flap_exit] = False
        moved = np.flatnonzero((flapping != was) | (stale != st.stale[:n]))
        st.stale[:n] = stale
        self.flag_changes = [
            FlagChange(scope, i, entities[i].key, entities[i].node, bool(flapping[i]),
                       bool(stale[i]), now) for i in map(int, moved)]


def step_inputs(risk: ScopeRisk, last_ts: npt.NDArray[np.float64]
                ) -> tuple[F64, npt.NDArray[np.float32]]:
    """What a scope's step needs beside the risk: each entity's newest sample time (over its
    metrics' `last_ts` rows) and the model's calibrated probability, for corroboration."""
    n = len(risk.risk)
    last = last_ts[:n]
    seen: F64 = np.fmax.reduce(last, axis=1) if last.shape[1] else np.full(n, np.nan)
    conf = np.zeros(n, np.float32)
    for f in risk.findings:
        if f.source == "model" and not f.advisory:  # an advisory model corroborates nothing
            np.maximum(conf, f.risk, out=conf)
    return seen, conf
