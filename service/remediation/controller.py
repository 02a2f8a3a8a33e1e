"""The remediation controller: turns level-3 alerts into migrations through a Hook, separate
from notification (docs/design.md, "Remediation"). It decides whether and when; the hook acts. Every
side effect and every refusal is audited; hook calls run on worker threads so the scoring
tick never waits on a scheduler; a restart reconciles instead of replaying (NVSentinel #1280,
#1808). Time is always passed in (`now`), so tests drive it with plain floats."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any, Protocol

from service.remediation import guards
from service.remediation.actions import (
    OPEN,
    Action,
    ActionState,
    ActionStore,
    AuditEntry,
    action_id,
)
from service.remediation.actions import ActionConflict as ActionConflict
from service.remediation.actions import ActionNotFound as ActionNotFound
from service.remediation.breaker import SYSTEM, CircuitBreaker
from service.remediation.config import RemediationSettings
from service.remediation.hooks.base import ActionRequest, Hook, HookResult, Step

log = logging.getLogger(__name__)


class ReleaseGate(Protocol):
    def check(self, drain: Action, actor: str, now: float) -> str | None:
        """None when the node `drain` holds may go back to work; else why not yet (its tests
        started or still running, or they failed), having started them where due."""
        ...


@dataclass(frozen=True, slots=True)
class MigrationRequest:
    node: str
    alert_id: int  # the alert episode
    fingerprint: str
    level: int
    risk: float
    summary: str
    at: float  # when the alert reached the level that asks for migration


@dataclass(frozen=True, slots=True)
class _Flight:
    future: Future[tuple[HookResult, float]]  # the result and how long the call took
    node: str
    kind: str


def _steps(steps: list[Step] | tuple[Step, ...]) -> list[dict[str, Any]]:
    return [s.as_dict() for s in steps]


class RemediationController:
    def __init__(self, store: ActionStore, hook: Hook, settings: RemediationSettings,
                 recheck: guards.Recheck, fleet_size: Callable[[], int],
                 executor: Executor | None = None) -> None:
        self._store, self._hook, self._settings = store, hook, settings
        self._recheck, self._fleet_size = recheck, fleet_size
        self._breaker = CircuitBreaker(store, settings)
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(
            max_workers=settings.max_concurrent + 2, thread_name_prefix="remediation")
        # In flight in this process, timed-out ones included: a hung hook still holds a slot.
        self._running: dict[str, _Flight] = {}
        self._lock = threading.RLock()
        # Whether this replica may start actions (the fleet's leader; service.cluster.roles).
        # One that may not records requests and approvals; the leader's step starts them.
        self.acting: Callable[[], bool] = lambda: True
        # The return-to-service gate a release waits for (service.diagnostics); None: none.
        self.gate: ReleaseGate | None = None
        # Whether this shard owns a node (service.cluster.ownership; the pipeline sets it):
        # a request for another shard's node is refused, whatever led to it.
        self.owns: Callable[[str], bool] = lambda node: True

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    @property
    def store(self) -> ActionStore:
        return self._store

    def close(self) -> None:
        if self._own_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _audit(self, a: Action, event: str, now: float, result: str = "", *,
               actor: str = SYSTEM, steps: list[dict[str, Any]] | None = None,
               duration_s: float | None = None) -> AuditEntry:
        return AuditEntry(at=now, actor=actor, event=event, action_id=a.id, node=a.node,
                          mode=a.mode, dry_run=a.mode == "dry_run", steps=steps or [],
                          result=result, duration_s=duration_s)

    # -- requests -----------------------------------------------------------------------------

    def request(self, req: MigrationRequest, now: float) -> Action | None:
        """Ask for a migration; idempotent per alert episode. None when the mode is off."""
        mode = self._settings.mode
        aid = action_id(req.node, req.fingerprint, "migrate", str(req.alert_id))
        with self._lock:
            got = self._store.get(aid)
            if got is not None:
                return got
            if not self.owns(req.node):
                if not self._store.has_audit(aid, "not_owned"):
                    self._store.append_audit(AuditEntry(
                        at=now, actor=SYSTEM, event="not_owned", action_id=aid, node=req.node,
                        mode=mode, result=f"{req.node} is another shard's node; this shard "
                        f"never acts on it: {req.summary}"))
                log.error("refused to act on %s: another shard owns it", req.node)
                return None
            if mode == "off":
                if not self._store.has_audit(aid, "off"):
                    self._store.append_audit(AuditEntry(
                        at=now, actor=SYSTEM, event="off", action_id=aid, node=req.node,
                        mode="off", result=f"remediation is off; not migrating: {req.summary}"))
                return None
            plan, err = self._plan(ActionRequest(aid, req.node, req.alert_id, req.fingerprint,
                                                 req.summary, req.at))
            a = Action(id=aid, kind="migrate", episode=str(req.alert_id), node=req.node,
                       alert_id=req.alert_id, fingerprint=req.fingerprint, summary=req.summary,
                       mode=mode, state=ActionState.PLANNED, requested_at=req.at, deadline=None,
                       level=req.level, risk=req.risk, plan=plan)
            return self._admit(a, now, err)

    def _plan(self, req: ActionRequest) -> tuple[list[dict[str, Any]], str]:
        try:
            return _steps(self._hook.plan(req)), ""
        except Exception as e:  # a broken plan must not break the scoring tick
            log.exception("hook %s could not plan %s", self._hook.name, req.action_id)
            err = f"plan failed: {type(e).__name__}: {e}"
            return [Step(f"{self._hook.name}: (no plan)", ok=False, detail=err).as_dict()], err

    def _admit(self, a: Action, now: float, plan_error: str = "") -> Action:
        event, note = "requested", a.mode
        if a.mode == "dry_run":  # the guards look (the breaker does not trip) but nothing acts
            why = plan_error or str(self._refusal(a, now, dry_run=True) or "")
            event, note = "dry_run", f"would be refused: {why}" if why else "would execute"
            a = replace(a, state=ActionState.DRY_RUN, finished_at=now,
                        result={"would_execute": not why, "detail": note})
        elif a.mode == "approve":
            a = replace(a, state=ActionState.AWAITING_APPROVAL,
                        deadline=a.requested_at + self._settings.approval_ttl_s)
        else:
            a = replace(a, deadline=a.requested_at + self._settings.event_ttl_s)
        a, created = self._store.insert(a, self._audit(a, event, now, note, steps=a.plan))
        if created and a.state == ActionState.PLANNED and self.acting():
            return self._advance(a, now)
        return a  # a replica that is not the leader records it; the leader's step starts it

    def approve(self, action_id: str, actor: str, now: float) -> Action:
        with self._lock:
            a = self._get(action_id)
            if a.state != ActionState.AWAITING_APPROVAL:
                raise ActionConflict(f"{action_id} is {a.state}, not awaiting approval")
            why = self._lapsed(a, now)
            if why is not None:
                self._expire(a, now, why)
                raise ActionConflict(f"{action_id} expired: {why}")
            a = self._store.update(a.id, self._audit(a, "approved", now, actor=actor),
                                   state=ActionState.PLANNED, approved_at=now, actor=actor,
                                   deadline=now + self._settings.event_ttl_s)
            return self._advance(a, now) if self.acting() else a

    def abort(self, action_id: str, actor: str, now: float) -> Action:
        """Stop an action. One executing is marked aborted when its hook returns (a scheduler
        call cannot be interrupted safely) and is never retried."""
        with self._lock:
            a = self._get(action_id)
            if a.state in (ActionState.PLANNED, ActionState.AWAITING_APPROVAL) or (
                    a.state == ActionState.EXECUTING and a.id not in self._running):
                return self._store.update(a.id, self._audit(a, "aborted", now, actor=actor),
                                          state=ActionState.ABORTED, finished_at=now, actor=actor)
            if a.state == ActionState.EXECUTING:
                return self._store.update(
                    a.id, self._audit(a, "abort_requested", now, "stops when the hook returns",
                                      actor=actor), abort_requested=True, actor=actor)
            raise ActionConflict(f"{action_id} is {a.state}; nothing to abort")

    def release(self, node: str, actor: str, now: float, *, skip_gate: str = "") -> Action:
        """Resume a node we drained (hook.release), under release_mode, once its return-to-
        service gate passed (`gate`; none: at once). `skip_gate`: an operator's reason to
        release it untested, audited."""
        with self._lock:
            drains = self._store.drains(node)
            if not drains:
                raise ActionConflict(f"{node} is not drained by gpuhealth; not releasing")
            d, tries = drains[0], self._store.find(node=node, kind="release", limit=10_000)
            if self.gate is not None:
                self._gated(d, actor, now, skip_gate)
            # One release per drain at a time; a new one only after the last one ended badly.
            live = {*OPEN, ActionState.DRY_RUN}
            for t in tries:
                if t.episode.startswith(d.id) and t.state in live:
                    return t
            episode = f"{d.id}#{len(tries)}"
            a = Action(id=action_id(node, d.fingerprint, "release", episode), kind="release",
                       episode=episode, node=node, alert_id=d.alert_id, fingerprint=d.fingerprint,
                       summary=f"release {node} (drained by {d.id})",
                       mode=self._settings.release_mode, state=ActionState.PLANNED,
                       requested_at=now, deadline=None, actor=actor,
                       plan=[Step(f"{self._hook.name}: release {node}").as_dict()])
            if a.mode == "off":
                self._store.append_audit(self._audit(a, "release_refused", now,
                                                     "release_mode is off", actor=actor))
                raise ActionConflict("remediation.release_mode is off")
            return self._admit(a, now)

    def _gated(self, drain: Action, actor: str, now: float, skip_gate: str) -> None:
        """Raise unless the drain's gate lets the node go (or an operator skips it)."""
        assert self.gate is not None
        if skip_gate.strip():
            self._store.append_audit(self._audit(drain, "gate_skipped", now,
                                                 skip_gate.strip()[:500], actor=actor))
            return
        why = self.gate.check(drain, actor, now)
        if why is not None:
            raise ActionConflict(f"{drain.node} stays drained until its return-to-service "
                                 f"gate passes: {why}")

    def _get(self, action_id: str) -> Action:
        a = self._store.get(action_id)
        if a is None:
            raise ActionNotFound(action_id)
        return a

    # -- the loop -----------------------------------------------------------------------------

    def step(self, now: float) -> None:
        """One pass: collect finished hook calls, time out, expire, start what may start."""
        with self._lock:
            self._collect(now)
            for a in self._store.open_actions():
                if a.state == ActionState.EXECUTING:
                    if a.deadline is not None and now > a.deadline:
                        late = f"timed out after {self._settings.action_timeout_s:g} s"
                        self._store.update(a.id, self._audit(a, "timed_out", now, late),
                                           state=ActionState.FAILED, finished_at=now,
                                           result={"ok": False, "detail": late})
                elif a.state == ActionState.AWAITING_APPROVAL:
                    why = self._lapsed(a, now)
                    if why is not None:
                        self._expire(a, now, why)
                else:
                    self._advance(a, now)

    def _lapsed(self, a: Action, now: float) -> str | None:
        """Why an action awaiting approval can no longer be approved, if it cannot."""
        if a.deadline is not None and now > a.deadline:
            return f"not approved within approval_ttl_s={self._settings.approval_ttl_s:g}"
        return guards.before_reset(a, self._breaker)

    def _expire(self, a: Action, now: float, why: str) -> Action:
        return self._store.update(a.id, self._audit(a, "expired", now, why),
                                  state=ActionState.EXPIRED, finished_at=now,
                                  result={"ok": False, "detail": why, "refusals": a.refusals})

    def _refusal(self, a: Action, now: float, *, dry_run: bool = False) -> guards.Refusal | None:
        # Migrations in flight: those the store says are executing plus hung ones that timed
        # out but still hold a worker (and may still touch their node).
        running = {x.id for x in self._store.find(state=ActionState.EXECUTING, kind="migrate",
                                                  limit=100_000)}
        running |= {aid for aid, f in self._running.items() if f.kind == "migrate"}
        return guards.refusal(a, store=self._store, breaker=self._breaker,
                              settings=self._settings, recheck=self._recheck,
                              fleet_size=self._fleet_size(), running=len(running),
                              busy={f.node for f in self._running.values()}, now=now,
                              dry_run=dry_run)

    def _advance(self, a: Action, now: float) -> Action:
        """A PLANNED action: expire it, leave it waiting (auditing a new refusal), or start."""
        why = guards.expired(a, self._settings, self._breaker, now)
        if why is not None:
            return self._expire(a, now, why)
        if a.next_try_at is not None and now < a.next_try_at:
            return a
        refused = self._refusal(a, now)
        if refused is not None:
            if any(r.startswith(refused.guard + ":") for r in a.refusals):
                return a  # audited already; the wording may change every tick
            return self._store.update(a.id, self._audit(a, "refused", now, str(refused)),
                                      refusals=[*a.refusals, str(refused)])
        return self._start(a, now)

    def _start(self, a: Action, now: float) -> Action:
        # Claimed in one transaction with its count in the breaker's window, and only while
        # it is still as this replica read it: another replica that started it first wins.
        try:
            with self._store.transaction():
                started = self._store.update(
                    a.id, self._audit(a, "started", now, f"attempt {a.attempts + 1}",
                                      steps=a.plan), expect=a,
                    state=ActionState.EXECUTING, attempts=a.attempts + 1, started_at=now,
                    next_try_at=None, deadline=now + self._settings.action_timeout_s)
                if a.kind == "migrate":
                    self._breaker.record(a.node, a.id, now)
        except ActionConflict:
            log.info("action %s was started elsewhere; not running it here", a.id)
            return self._get(a.id)
        a = started
        fn, arg = ((self._hook.execute, ActionRequest(
            a.id, a.node, a.alert_id, a.fingerprint, a.summary, a.requested_at))
            if a.kind == "migrate" else (self._hook.release, a.node))
        self._running[a.id] = _Flight(self._executor.submit(self._call, fn, arg), a.node, a.kind)
        return a

    @staticmethod
    def _call(fn: Callable[[Any], HookResult], arg: Any) -> tuple[HookResult, float]:
        t0 = time.monotonic()
        try:
            res = fn(arg)
        except Exception as e:  # hooks should not raise; a bug must not kill the worker
            log.exception("remediation hook raised")
            res = HookResult(ok=False, detail=f"hook raised {type(e).__name__}: {e}")
        return res, time.monotonic() - t0

    def _collect(self, now: float) -> None:
        for aid, f in list(self._running.items()):
            if f.future.done():
                del self._running[aid]
                self._finish(self._get(aid), *f.future.result(), now)

    def _finish(self, a: Action, res: HookResult, duration_s: float, now: float) -> None:
        ok, result = res.ok, res.as_dict()
        drained = a.drained or (ok and a.kind == "migrate")

        def audit(event: str, note: str = res.detail) -> AuditEntry:
            return self._audit(a, event, now, note, steps=_steps(res.steps),
                               duration_s=duration_s)

        if a.state != ActionState.EXECUTING:  # it timed out earlier; record what finally happened
            self._store.update(a.id, audit("late_result"), drained=drained)
        elif a.abort_requested:
            self._store.update(a.id, audit("aborted"), state=ActionState.ABORTED, finished_at=now,
                               result=result, drained=drained)
        elif ok:
            self._store.update(a.id, audit("succeeded"), state=ActionState.SUCCEEDED,
                               finished_at=now, result=result, drained=drained)
        elif res.retry and a.attempts <= self._settings.max_retries:
            at = now + self._settings.retry_backoff_s * 2 ** (a.attempts - 1)
            self._store.update(a.id, audit("retry_scheduled", f"{res.detail}; retry at {at:.0f}"),
                               state=ActionState.PLANNED, next_try_at=at, result=result,
                               deadline=at + self._settings.event_ttl_s)
            return
        else:
            self._store.update(a.id, audit("failed"), state=ActionState.FAILED, finished_at=now,
                               result=result, drained=drained)
        if ok and a.kind == "release":  # late or aborted, the node is resumed all the same
            self._undrained(a.node, a, now)

    def _undrained(self, node: str, by: Action, now: float) -> None:
        for d in self._store.drains(node):
            self._store.update(d.id, self._audit(d, "released", now, f"by {by.id}"),
                               drained=False)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the hook calls in flight return (tests); True if all did."""
        with self._lock:
            futs = [f.future for f in self._running.values()]
        return not wait(futs, timeout).not_done

    # -- restart ------------------------------------------------------------------------------

    def reconcile(self, now: float) -> list[Action]:
        """Settle actions a restart left EXECUTING by asking the scheduler, never by re-running
        them blindly (NVSentinel #1280). Returns the actions it changed."""
        with self._lock:
            done = [self._reconcile_one(a, now) for a in self._store.find(
                state=ActionState.EXECUTING, limit=100_000) if a.id not in self._running]
        return [a for a in done if a is not None]

    def _reconcile_one(self, a: Action, now: float) -> Action | None:
        try:
            ns = self._hook.inspect(a.node)
        except Exception as e:  # left EXECUTING: its deadline fails it if this persists
            self._store.append_audit(self._audit(a, "reconcile_failed", now, repr(e)))
            return None
        done = ns.drained_by_us if a.kind == "migrate" else (ns.exists and not ns.drained_by_us)
        why = ns.detail if ns.exists else "the node no longer exists"
        note = f"reconciled after restart: {why or ('done' if done else 'not done')}"
        audit = self._audit(a, "reconciled", now, note)
        basis = a.approved_at if a.approved_at is not None else a.requested_at
        if not (done or a.abort_requested or not ns.exists):
            if now - basis > self._settings.event_ttl_s:
                return self._expire(a, now, f"{note}; event too old to re-plan")
            return self._store.update(a.id, audit, state=ActionState.PLANNED, next_try_at=None,
                                      deadline=basis + self._settings.event_ttl_s)
        state = (ActionState.ABORTED if a.abort_requested else ActionState.SUCCEEDED if done
                 else ActionState.FAILED)  # FAILED: the node is gone
        if done and a.kind == "release":
            self._undrained(a.node, a, now)
        return self._store.update(a.id, audit, state=state, finished_at=now,
                                  result={"ok": done, "detail": note, "reconciled": True},
                                  drained=a.kind == "migrate" and ns.drained_by_us)

    # -- API ----------------------------------------------------------------------------------

    def status(self, now: float | None = None) -> dict[str, Any]:
        with self._lock:
            running = len(self._running)
        return {"mode": self._settings.mode, "release_mode": self._settings.release_mode,
                "hook": self._hook.name, "counts": self._store.counts(),
                "breaker": self._breaker.status(now, self._fleet_size()).as_dict(),
                "concurrency": {"running": running, "max": self._settings.max_concurrent}}


__all__ = ["ActionConflict", "ActionNotFound", "MigrationRequest", "ReleaseGate",
           "RemediationController"]
