"""Guards checked immediately before a hook is called (docs/design.md, "Remediation").
Each returns why not, or None. Two kinds: `expired` reasons end an action for good (a stale
event must never be acted on late); `refusal` reasons make it wait, and the action expires if
they outlast its deadline. A refusal is named by its guard, so the controller audits each
guard once per action even when the wording changes from tick to tick."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from service.remediation.actions import Action, ActionStore
from service.remediation.breaker import CircuitBreaker
from service.remediation.config import RemediationSettings
from service.remediation.hooks.target import target_problem


class Recheck(Protocol):
    def recheck(self, node: str, fingerprint: str, now: float) -> str | None:
        """None if the node is still at risk on fresh telemetry; else why not (recovered,
        telemetry stale, node unknown)."""
        ...


@dataclass(frozen=True, slots=True)
class Refusal:
    guard: str  # target, opt_out, drained, attempts, concurrency, node_busy, recheck, breaker
    reason: str

    def __str__(self) -> str:
        return f"{self.guard}: {self.reason}"


def event_fresh(action: Action, settings: RemediationSettings, now: float) -> str | None:
    """A first attempt acts on an event at most event_ttl_s old (from the approval, when a
    human approved it). A retry is bounded by its own deadline and max_retries instead."""
    if action.attempts == 0:
        basis = action.approved_at if action.approved_at is not None else action.requested_at
        age = now - basis
        if age > settings.event_ttl_s:
            return f"event is {age:.0f} s old (event_ttl_s={settings.event_ttl_s:g})"
    if action.deadline is not None and now > action.deadline:
        return f"not started by its deadline ({now - action.deadline:.0f} s ago)"
    return None


def before_reset(action: Action, breaker: CircuitBreaker) -> str | None:
    """Migrations queued while the breaker was open never run after a reset (NVSentinel #450)."""
    reset_at = breaker.last_reset_at
    if action.kind == "migrate" and reset_at is not None and action.requested_at < reset_at:
        return "requested before the circuit breaker was reset"
    return None


def expired(action: Action, settings: RemediationSettings, breaker: CircuitBreaker,
            now: float) -> str | None:
    """A node name no hook may be given ends the action at once, as a stale event does."""
    return (target_problem(action.node) or before_reset(action, breaker)
            or event_fresh(action, settings, now))


def not_opted_out(node: str, settings: RemediationSettings) -> str | None:
    pattern = settings.opted_out(node)
    return None if pattern is None else f"node matches opt-out pattern {pattern!r}"


def attempts_left(store: ActionStore, action: Action, settings: RemediationSettings,
                  now: float) -> str | None:
    """A fix that brings its own fault back would loop (NVSentinel #1543): cap it per node."""
    n = store.started_on_node(action.node, now - settings.attempt_window_s, exclude=action.id)
    if n >= settings.max_attempts_per_node:
        return (f"{n} migrations of {action.node} in the last {settings.attempt_window_s:g} s "
                f"(max_attempts_per_node={settings.max_attempts_per_node}): needs a human")
    return None


def not_drained_yet(store: ActionStore, action: Action) -> str | None:
    """Draining a node our drain already empties does nothing but spend an attempt."""
    drains = [d.id for d in store.drains(action.node) if d.id != action.id]
    return f"already drained by {drains[0]}; release it first" if drains else None


def below_concurrency(running: int, settings: RemediationSettings) -> str | None:
    if running >= settings.max_concurrent:
        return f"{running} executions in flight (max_concurrent={settings.max_concurrent})"
    return None


def node_idle(node: str, busy: Collection[str]) -> str | None:
    return f"another action on {node} is executing" if node in busy else None


def condition_holds(recheck: Recheck, action: Action, now: float) -> str | None:
    try:
        return recheck.recheck(action.node, action.fingerprint, now)
    except Exception as e:  # fail closed: no fresh evidence, no action
        return f"recheck failed: {type(e).__name__}: {e}"


def refusal(action: Action, *, store: ActionStore, breaker: CircuitBreaker,
            settings: RemediationSettings, recheck: Recheck, fleet_size: int, running: int,
            busy: Collection[str], now: float, dry_run: bool = False) -> Refusal | None:
    """The first guard that refuses. The breaker goes last: only an action that passes every
    other guard may count toward (and trip) it. A dry run looks without tripping."""
    why = target_problem(action.node)
    if why is not None:
        return Refusal("target", why)
    if action.kind == "release":  # undoing our own drain needs no blast-radius guard
        why = node_idle(action.node, busy)
        return None if why is None else Refusal("node_busy", why)
    checks: list[tuple[str, str | None]] = [
        ("opt_out", not_opted_out(action.node, settings)),
        ("drained", not_drained_yet(store, action)),
        ("attempts", attempts_left(store, action, settings, now)),
    ]
    if not dry_run:
        checks += [("concurrency", below_concurrency(running, settings)),
                   ("node_busy", node_idle(action.node, busy))]
    for guard, why in checks:
        if why is not None:
            return Refusal(guard, why)
    why = condition_holds(recheck, action, now)
    if why is not None:
        return Refusal("recheck", why)
    why = breaker.admit(action.node, fleet_size, now, trip=not dry_run)
    return None if why is None else Refusal("breaker", why)
