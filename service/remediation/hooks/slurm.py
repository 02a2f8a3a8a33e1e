"""Slurm hook: DRAIN the node with a `gpuhealth:` reason, requeue the batch jobs running on it
that allow requeueing, and report the rest. Only a drain whose reason carries our prefix is
ever resumed (the slurm-operator/NVSentinel convention, reference 4.1).

Written against Slurm 22.05's CLI: `scontrol` has no `--json` there and `squeue --json`
ignores filters such as `-w`, so the job listing uses `squeue -O` with `|` field suffixes and
the node is read from `scontrol show node -o`. Every call is an argv list with a timeout."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from service.notify.cause import MAX_CAUSE
from service.remediation.hooks.base import (
    PROVENANCE,
    ActionRequest,
    HookResult,
    NodeState,
    Step,
)
from service.remediation.hooks.runner import (
    CommandRunner,
    Completed,
    SubprocessRunner,
    one_line,
)

REASON_PREFIX = PROVENANCE  # then a space; releases before 2026-12 wrote "gpuhealth:<id>:"
OURS = (f"{PROVENANCE} ", f"{PROVENANCE}:")
MAX_REASON = 200
# The states `scontrol requeue Incomplete` acts on (scontrol(1)); pending jobs are not on the
# node yet and completing ones are leaving anyway.
ACTIVE_STATES = "CONFIGURING,RUNNING,STOPPED,SUSPENDED"
JOB_FIELDS = "JobID:|,State:|,Requeue:|,BatchFlag:|"
# stderr of a failed call that says the controller was unreachable or slow: worth a retry.
TRANSIENT = ("unable to contact slurm controller", "socket timed out", "connection refused",
             "communication connection failure", "resource temporarily unavailable",
             "slurm backup controller in standby mode", "zero bytes were transmitted")


class SlurmConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scontrol: str = Field(default="scontrol", min_length=1)  # a name on PATH or a path
    squeue: str = Field(default="squeue", min_length=1)
    timeout_s: float = Field(default=15.0, gt=0, le=300)  # per call
    requeue: bool = True  # False: drain only, every job is reported in `left`
    slurm_conf: str | None = None  # exported as SLURM_CONF to the calls; None: Slurm's default


@dataclass(frozen=True, slots=True)
class Job:
    job_id: str
    state: str
    requeue: bool
    batch: bool


@dataclass(frozen=True, slots=True)
class NodeInfo:
    state: str  # e.g. "MIXED+DRAIN"
    reason: str  # without Slurm's "[user@time]" suffix
    found: bool = True

    @property
    def drained(self) -> bool:
        return any(flag.startswith("DRAIN") for flag in self.state.split("+"))

    @property
    def ours(self) -> bool:
        return self.reason.startswith(OURS)


def drain_reason(req: ActionRequest) -> str:
    """`gpuhealth <cause> #<alert_id>: <the rest of the summary>`, the cause first (`sinfo -R`
    shows 20 characters: `gpuhealth DBE gpu3 #1`); a summary without a short cause in
    front (service.notify.cause) reads `gpuhealth #<alert_id>: <summary>`. On one line
    (control characters would break the one-line `scontrol show node -o` output we parse
    back), bounded."""
    summary = " ".join("".join(c if c.isprintable() else " " for c in req.summary).split())
    cause, sep, rest = summary.partition(": ")
    if sep and 0 < len(cause) <= MAX_CAUSE and ":" not in cause:
        reason = f"{REASON_PREFIX} {cause} #{req.alert_id}: {rest}"
    else:
        reason = f"{REASON_PREFIX} #{req.alert_id}: {summary}"
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"


_REASON_AT_END = re.compile(r" Reason=(.*) \[[^\]\s]*@[^\]\s]*\]\s*$")
_REASON_ANY = re.compile(r" Reason=(.*?)(?: \[[^\]\s]*@[^\]\s]*\]|$)")
_STATE = re.compile(r"(?:^| )State=(\S+)")


def parse_node(line: str) -> NodeInfo:
    """The State and Reason of one `scontrol show node -o` line. Reason comes last in 22.05
    and may contain spaces, '=' and brackets; Slurm appends " [user@time]" to it."""
    state = _STATE.search(line)
    match = _REASON_AT_END.search(line) or _REASON_ANY.search(line)
    reason = match.group(1).strip() if match else ""
    return NodeInfo(state=state.group(1) if state else "",
                    reason="" if reason == "(null)" else reason)


def parse_jobs(text: str) -> list[Job]:
    """`squeue -h -O JobID:|,State:|,Requeue:|,BatchFlag:|` output, one job per line."""
    jobs = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 4 or not fields[0]:
            continue
        jobs.append(Job(job_id=fields[0], state=fields[1], requeue=fields[2] == "1",
                        batch=fields[3] == "1"))
    return jobs


def _transient(done: Completed) -> bool:
    return done.timed_out or any(t in done.stderr.lower() for t in TRANSIENT)


class SlurmHook:
    name = "slurm"

    def __init__(self, config: SlurmConfig, runner: CommandRunner | None = None) -> None:
        self.config = config
        env = {"SLURM_CONF": config.slurm_conf} if config.slurm_conf else None
        self.runner: CommandRunner = runner or SubprocessRunner(env=env)

    # -- the argv lists, public so a plan and a test can show exactly what runs --------------

    def drain_argv(self, req: ActionRequest) -> list[str]:
        return [self.config.scontrol, "update", f"NodeName={req.node}", "State=DRAIN",
                f"Reason={drain_reason(req)}"]

    def list_jobs_argv(self, node: str) -> list[str]:
        # `--nodelist=NAME` in one argument: the name can never be read as an option.
        return [self.config.squeue, "-h", f"--nodelist={node}", "-t", ACTIVE_STATES,
                "-O", JOB_FIELDS]

    def requeue_argv(self, job_ids: Iterable[str]) -> list[str]:
        # Incomplete: a job that ended since the listing is not requeued to run again.
        return [self.config.scontrol, "requeue", "Incomplete", ",".join(job_ids)]

    def show_node_argv(self, node: str) -> list[str]:
        return [self.config.scontrol, "show", "node", "-o", node]

    def resume_argv(self, node: str) -> list[str]:
        return [self.config.scontrol, "update", f"NodeName={node}", "State=RESUME"]

    # -- Hook ----------------------------------------------------------------------------------

    def plan(self, req: ActionRequest) -> list[Step]:
        steps = [Step(call=shlex.join(self.show_node_argv(req.node)),
                      detail="check the name is exactly one known node"),
                 Step(call=shlex.join(self.drain_argv(req)), detail="drain: no new jobs"),
                 Step(call=shlex.join(self.list_jobs_argv(req.node)),
                      detail="list the jobs on the node")]
        if self.config.requeue:
            steps.append(Step(call=shlex.join(self.requeue_argv(["<job ids>"])),
                              detail="requeue the listed jobs with Requeue=1 and BatchFlag=1; "
                                     "the others are reported, not touched"))
        return steps

    def execute(self, req: ActionRequest) -> HookResult:
        steps: list[Step] = []
        # Exactly one known node by exactly this name, or nothing is drained: `scontrol
        # update NodeName=` takes hostlists, and a name Slurm does not know is not ours to act on.
        known = self._show(req.node, steps)
        if isinstance(known, HookResult):
            return known
        if not known.found:
            return HookResult(ok=False, retry=False, steps=tuple(steps),
                              detail=f"{req.node} is not a Slurm node; nothing drained")
        drained = self._call(self.drain_argv(req), steps)
        if isinstance(drained, str):
            return HookResult(ok=False, retry=False, detail=drained, steps=tuple(steps))
        if drained.returncode != 0:
            return HookResult(ok=False, retry=_transient(drained), steps=tuple(steps),
                              detail=f"drain of {req.node} failed: {one_line(drained.stderr)}")

        listed = self._call(self.list_jobs_argv(req.node), steps)
        if isinstance(listed, str) or listed.returncode != 0:
            why = listed if isinstance(listed, str) else one_line(listed.stderr)
            retry = not isinstance(listed, str) and _transient(listed)
            return HookResult(ok=False, retry=retry, steps=tuple(steps),
                              detail=f"drained {req.node}, but listing its jobs failed: {why}")

        eligible: list[str] = []
        left: list[str] = []
        for job in parse_jobs(listed.stdout):
            if not self.config.requeue:
                left.append(f"job {job.job_id}: requeue is off in the hook config; "
                            "it runs on until it ends")
            elif not job.batch:
                left.append(f"job {job.job_id}: interactive (srun/salloc), Slurm cannot "
                            "requeue it; it runs on until it ends")
            elif not job.requeue:
                left.append(f"job {job.job_id}: not requeueable (--no-requeue or "
                            "JobRequeue=0); it runs on until it ends")
            else:
                eligible.append(job.job_id)

        moved: list[str] = []
        ok, retry = True, False
        if eligible:
            requeued = self._call(self.requeue_argv(eligible), steps)
            if isinstance(requeued, str):
                return HookResult(ok=False, detail=requeued, steps=tuple(steps),
                                  left=tuple(left))
            failed = _requeue_failures(requeued, eligible)
            for job_id in eligible:
                if job_id not in failed:
                    moved.append(job_id)
                elif "invalid job id" in failed[job_id].lower():
                    left.append(f"job {job_id}: ended before the requeue")  # gone: benign
                else:
                    left.append(f"job {job_id}: requeue failed: {failed[job_id]}")
                    ok, retry = False, retry or _transient(requeued)
        detail = (f"drained {req.node} (Reason={drain_reason(req)!r}); requeued "
                  f"{len(moved)} job(s), {len(left)} left")
        return HookResult(ok=ok, retry=retry, detail=detail, steps=tuple(steps),
                          moved=tuple(moved), left=tuple(left))

    def release(self, node: str) -> HookResult:
        steps: list[Step] = []
        info = self._show(node, steps)
        if isinstance(info, HookResult):
            return info
        if not info.found:
            return HookResult(ok=False, steps=tuple(steps), detail=f"node {node} not found")
        if not info.drained:
            if info.state.split("+")[0] == "DOWN":
                return HookResult(ok=False, steps=tuple(steps),
                                  detail=f"{node} is DOWN, not drained (Reason="
                                         f"{info.reason!r}); a human must look at it")
            return HookResult(ok=True, steps=tuple(steps),
                              detail=f"{node} is not drained (State={info.state}); "
                                     "nothing to resume")
        if not info.ours:
            return HookResult(ok=False, retry=False, steps=tuple(steps),
                              detail=f"{node} was drained by someone else (Reason="
                                     f"{info.reason!r}); not resuming it")
        resumed = self._call(self.resume_argv(node), steps)
        if isinstance(resumed, str):
            return HookResult(ok=False, detail=resumed, steps=tuple(steps))
        if resumed.returncode != 0:
            return HookResult(ok=False, retry=_transient(resumed), steps=tuple(steps),
                              detail=f"resume of {node} failed: {one_line(resumed.stderr)}")
        return HookResult(ok=True, steps=tuple(steps),
                          detail=f"resumed {node} (was {info.state}, Reason={info.reason!r})")

    def inspect(self, node: str) -> NodeState:
        """On a failed read, `extra["error"]` says why and `exists` stays True (unknown is not
        gone)."""
        steps: list[Step] = []
        info = self._show(node, steps)
        if isinstance(info, HookResult):
            return NodeState(node=node, exists=True, drained_by_us=False, detail=info.detail,
                             extra={"error": info.detail})
        if not info.found:
            return NodeState(node=node, exists=False, drained_by_us=False,
                             detail=f"node {node} not found")
        return NodeState(node=node, exists=True, drained_by_us=info.drained and info.ours,
                         drained_by_other=info.drained and not info.ours,
                         detail=f"State={info.state} Reason={info.reason!r}",
                         extra={"state": info.state, "reason": info.reason})

    # -- helpers -----------------------------------------------------------------------------

    def _call(self, argv: list[str], steps: list[Step]) -> Completed | str:
        """Run one call and record its Step; a string is why it could not run at all."""
        call = shlex.join(argv)
        try:
            done = self.runner.run(argv, self.config.timeout_s)
        except OSError as exc:
            why = (f"cannot run {argv[0]!r}: {exc.strerror or exc} (is Slurm's client "
                   "installed, and the path in the hook config right?)")
            steps.append(Step(call=call, ok=False, detail=why))
            return why
        ok = done.returncode == 0 and not done.timed_out
        if done.timed_out:
            detail = f"timed out after {self.config.timeout_s:g} s"
        elif ok:
            detail = one_line(done.stdout, 200)
        else:
            detail = f"exit {done.returncode}: {one_line(done.stderr or done.stdout)}"
        steps.append(Step(call=call, ok=ok, detail=detail, duration_s=done.duration_s))
        return done

    def _show(self, node: str, steps: list[Step]) -> NodeInfo | HookResult:
        shown = self._call(self.show_node_argv(node), steps)
        if isinstance(shown, str):
            return HookResult(ok=False, detail=shown, steps=tuple(steps))
        if shown.returncode != 0:
            said = one_line(shown.stderr or shown.stdout)
            if "not found" in said.lower():  # "Node n9 not found"
                return NodeInfo(state="", reason="", found=False)
            return HookResult(ok=False, retry=_transient(shown), steps=tuple(steps),
                              detail=f"reading {node} failed: {said}")
        lines = [ln for ln in shown.stdout.splitlines() if ln.startswith("NodeName=")]
        names = [ln.split(None, 1)[0].removeprefix("NodeName=") for ln in lines]
        if names != [node]:
            return HookResult(ok=False, retry=False, steps=tuple(steps),
                              detail=f"{node!r} names {len(names)} Slurm node(s) "
                                     f"{names[:5]}, not exactly that one node; not acting")
        return parse_node(lines[0])


_FAILED_JOB = re.compile(r"^(?P<msg>.*?) for job (?P<id>\S+)\s*$")


def _requeue_failures(done: Completed, job_ids: list[str]) -> dict[str, str]:
    """Job id -> error for the jobs `scontrol requeue` refused. It goes on after a refused
    job and names each one ("Requested operation is presently disabled for job 2")."""
    if done.returncode == 0 and not done.timed_out:
        return {}
    failed: dict[str, str] = {}
    for line in done.stderr.splitlines():
        m = _FAILED_JOB.match(line.strip())
        if m and m.group("id") in job_ids:
            failed[m.group("id")] = m.group("msg")
    if not failed:  # no per-job lines: assume none was requeued
        why = "timed out" if done.timed_out else one_line(done.stderr) or f"exit {done.returncode}"
        failed = dict.fromkeys(job_ids, why)
    return failed
