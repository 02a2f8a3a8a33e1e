"""The return-to-service gate (issue 32): a node gpuhealth drained goes back to work only after
the suites for its failure class pass on it. The remediation controller asks before every
release (`ReleaseGate.check`); the first ask starts the suites on a worker thread, in order,
through the site (never on a node with a job), each run stored with its result and audited
against the drain; a pass releases the node through the controller (under its release_mode),
a failure keeps it drained and reports it once, as a `diag` event whose rule names the failed
check (models/detectors/diagnostic.py): a level-3 alert, and a failure label for learning.
An error (the test could not run) keeps it drained and says why; asking again retries.

Which suites: the drain's summary names the fault (an ECC error, an NVLink or a network link),
mapped to a failure class of the gate settings; anything else gets `default`."""

from __future__ import annotations

import fnmatch
import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor

from collectors.diagnostics.classes import FaultClass, worst
from collectors.diagnostics.parsers import parse
from collectors.diagnostics.result import Status, SuiteResult, describe, failing
from collectors.diagnostics.settings import SuiteSpec
from collectors.frames import Batch
from service.diagnostics.offenders import Offenders
from service.diagnostics.runs import Run, RunStore
from service.diagnostics.settings import DiagnosticsServiceSettings
from service.diagnostics.site import Purpose, Ran, Site
from service.remediation.actions import Action, ActionConflict, AuditEntry

log = logging.getLogger(__name__)
GATE = "gate"  # the audit's actor for what the gate does on its own
# Past its suite's time limit by this much, a run still marked running has no runner left
# (the Slurm site's srun waits up to start_within_s, at most an hour, before its clock starts).
STALE_MARGIN_S = 3600.0 + 600.0

# Words of a drain's summary (the alert's top signal) -> the gate's failure class.
_W = r"(?<![a-z0-9])"  # a word start; rule names join words with "_"
_CLASSES = (
    ("memory", re.compile(_W + r"(dbe|sbe|ecc|hbm|remap|retired|row|memory|"
                          r"xid (48|63|64|94|95)(?![0-9]))", re.I)),
    ("nvlink", re.compile(_W + r"(nvlink|xid 74(?![0-9]))", re.I)),
    ("network", re.compile(_W + r"(ib|infiniband|roce|gid|port|link down|nic)(?![a-z])", re.I)),
)


def failure_class(summary: str) -> str:
    return next((name for name, pattern in _CLASSES if pattern.search(summary)), "default")


class Diagnostics:
    def __init__(self, settings: DiagnosticsServiceSettings, runs: RunStore, site: Site, *,
                 audit: Callable[[AuditEntry], None], publish: Callable[[Batch], object],
                 executor: Executor | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings, self.runs, self.site = settings, runs, site
        self.audit, self.publish, self.clock = audit, publish, clock
        # Releases the node after a pass (the controller's release; the wiring sets it).
        self.release: Callable[[str, str, float], object] | None = None
        # Repeat offenders (service.diagnostics.offenders; the wiring sets it): a node that
        # failed again soon after a release waits for new hardware, not another test round.
        self.offenders: Offenders | None = None
        self._executor = executor or ThreadPoolExecutor(
            max_workers=settings.max_concurrent, thread_name_prefix="diagnostics")
        self._busy: set[str] = set()  # nodes with a round in flight in this process
        self._rounds = 0  # rounds not yet concluded (their release or report included)
        self._lock = threading.Lock()
        self.expire(self.clock())

    def expire(self, now: float) -> list[Run]:
        """Runs still marked running past their suite's time limit (plus the wait to start
        and a margin): their runner stopped (a restart, a replica lost) and nothing will
        finish them. They end as errors, never passes. A run still within its time may be
        another replica's, live on the shared state, and is left alone."""
        out = []
        for run in self.runs.running():
            spec = self.settings.suites.get(run.suite)
            limit = (spec.timeout_s if spec is not None else 0.0) + STALE_MARGIN_S
            if now - run.started_at > limit:
                out.append(self.runs.finish(run.id, SuiteResult(
                    run.suite, Status.ERROR, (), {}, error="interrupted: no result by its "
                    "time limit (its runner stopped: a restart, or a replica lost)"), now))
        return out

    def suites_for(self, drain: Action) -> list[SuiteSpec]:
        return self.settings.gate_for(failure_class(drain.summary))

    # -- ReleaseGate ----------------------------------------------------------------------------

    def check(self, drain: Action, actor: str, now: float) -> str | None:
        held = self.offenders.hold(drain, now) if self.offenders is not None else None
        if held is not None:
            return held
        suites = self.suites_for(drain)
        self.expire(now)
        runs = self.runs.for_drain(drain.id)
        if any(r.status == "running" for r in runs) or drain.node in self._busy:
            return f"its tests are running ({', '.join(s.name for s in suites)})"
        if _passed(runs) >= {s.name for s in suites}:
            return None
        last = runs[-1] if runs else None
        self.start(drain, suites, actor, now)
        again = "" if last is None else f"; the last run ({last.suite}) ended {last.status}"
        return (f"started {', '.join(s.name for s in suites)} on {drain.node} (failure class "
                f"{failure_class(drain.summary)}){again}")

    # -- running --------------------------------------------------------------------------------

    def start(self, drain: Action, suites: list[SuiteSpec], actor: str, now: float) -> bool:
        """Run the suites on the drain's node in the background; False if a round is in
        flight there already."""
        with self._lock:
            if drain.node in self._busy:
                return False
            self._busy.add(drain.node)
            self._rounds += 1
        self._note(drain, "gate_started", now, actor,
                   f"{', '.join(s.name for s in suites)} for failure class "
                   f"{failure_class(drain.summary)}")
        self._executor.submit(self._round, drain, suites)
        return True

    def start_manual(self, node: str, suite: str, actor: str, now: float) -> str:
        """An operator's run of one suite on a node, in the background (the site still
        refuses a node with a job on it). Returns what started; KeyError for an unknown suite,
        ActionConflict while the node has a run in flight here."""
        spec = self.settings.suites[suite]
        with self._lock:
            if node in self._busy:
                raise ActionConflict(f"{node} has a diagnostic run in flight; wait for it")
            self._busy.add(node)
            self._rounds += 1
        self.audit(AuditEntry(at=now, actor=actor, event="manual_started", node=node,
                              result=f"{suite} asked for by {actor}"))
        self._executor.submit(self._manual, node, spec)
        return f"started {suite} on {node} ({self.site.name})"

    def _manual(self, node: str, spec: SuiteSpec) -> None:
        try:
            self.run_suite(node, spec, Purpose.MANUAL)
        except Exception:
            log.exception("the manual run of %s on %s failed", spec.name, node)
        finally:
            with self._lock:
                self._busy.discard(node)
                self._rounds -= 1

    def _round(self, drain: Action, suites: list[SuiteSpec]) -> None:
        results: list[SuiteResult] = []
        try:
            for spec in suites:
                run = self.run_suite(drain.node, spec, Purpose.GATE, drain.id)
                assert run.result is not None
                results.append(run.result)
                if run.result.status is not Status.PASS:
                    break  # the node stays drained: no need to test on
        except Exception:  # a bug must not leave the node marked busy forever
            log.exception("the gate round on %s failed", drain.node)
            results.append(SuiteResult("", Status.ERROR, (), {}, error="the runner failed "
                                       "(the service log has the traceback)"))
        finally:
            with self._lock:
                self._busy.discard(drain.node)
        try:
            self._conclude(drain, results)  # after: a pass's release asks the gate again
        finally:
            with self._lock:
                self._rounds -= 1

    def run_suite(self, node: str, spec: SuiteSpec, purpose: Purpose, drain_id: str = "") -> Run:
        """One suite on one node, stored and published."""
        run = self.runs.start(node, spec.name, purpose, drain_id, self.site.name, self.clock())
        ran = self.site.run(node, spec.argv(self.settings.gpus_per_node), spec.timeout_s,
                            purpose)
        result = self._result(spec, ran, node)
        done = self.runs.finish(run.id, result, self.clock())
        if purpose is not Purpose.GATE:  # a gate's rounds are audited against their drain
            self.audit(AuditEntry(at=self.clock(), actor=GATE, event=f"{purpose}_{result.status}",
                                  node=node, result=_summary(result)[:2000]))
        code = self._code(result)
        if code is not None:
            batch = Batch()
            batch.events.add(node, self.clock(), "diag", float(code))
            self.publish(batch)
        return done

    def _result(self, spec: SuiteSpec, ran: Ran, node: str) -> SuiteResult:
        if ran.refused:
            return SuiteResult(spec.name, Status.ERROR, (), {}, error=ran.refused)
        text = ran.stdout + ("\n" + ran.stderr if ran.stderr else "")
        return parse(text, ran.exit_code, spec, self._model(node))

    def _model(self, node: str) -> str:
        return next((m for pattern, m in self.settings.gpu_models.items()
                     if fnmatch.fnmatchcase(node, pattern)), "")

    @staticmethod
    def _code(result: SuiteResult) -> FaultClass | None:
        """The `diag` event's value: what failed, PASSED for a pass, none for an error (the
        node was not tested; it says nothing about the hardware)."""
        if result.status is Status.PASS:
            return FaultClass.PASSED
        if result.status is Status.FAIL:
            return worst(result.checks)
        return None

    def _conclude(self, drain: Action, results: list[SuiteResult]) -> None:
        now = self.clock()
        last = results[-1] if results else None
        if last is not None and all(r.status is Status.PASS for r in results):
            self._note(drain, "gate_passed", now, GATE,
                       ", ".join(f"{r.suite}: pass" for r in results))
            if self.release is not None:
                try:
                    self.release(drain.node, GATE, now)
                except ActionConflict as exc:
                    self._note(drain, "gate_release_refused", now, GATE, str(exc))
        elif last is not None and last.status is Status.FAIL:
            self._note(drain, "gate_failed", now, GATE,
                       f"{_summary(last)}; {drain.node} stays drained for repair")
        else:
            why = last.error if last is not None else "no suite ran"
            self._note(drain, "gate_error", now, GATE,
                       f"{last.suite if last else ''} could not run: {why}; {drain.node} stays "
                       "drained (ask for its release again to retry)")

    def _note(self, drain: Action, event: str, now: float, actor: str, result: str) -> None:
        self.audit(AuditEntry(at=now, actor=actor, event=event, action_id=drain.id,
                              node=drain.node, mode=drain.mode, result=result[:2000]))

    def wait(self, timeout_s: float) -> bool:
        """Block until no round is in flight (tests, a clean shutdown); True if none is."""
        deadline = time.monotonic() + timeout_s
        while self._rounds and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self._rounds

    def close(self) -> None:
        if isinstance(self._executor, ThreadPoolExecutor):
            self._executor.shutdown(wait=False, cancel_futures=True)


def _passed(runs: list[Run]) -> set[str]:
    """The suites that passed since the drain's last failed or errored run."""
    out: set[str] = set()
    for r in reversed(runs):
        if r.status != "pass":
            break
        out.add(r.suite)
    return out


def _summary(result: SuiteResult) -> str:
    """One line: the suite and its verdict, with the failed checks or why it could not run."""
    if result.status is Status.FAIL:
        return f"{result.suite} failed: " + "; ".join(describe(c) for c in failing(result)[:5])
    if result.status is Status.ERROR:
        return f"{result.suite} could not run: {result.error}"
    return f"{result.suite}: pass"
