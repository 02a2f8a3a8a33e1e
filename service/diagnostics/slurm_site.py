"""A site that runs the suite as a Slurm job pinned to the node, through the scheduler so no
job of anyone's shares it.

A drained node takes no job, not even root's, so a gate test goes through a maintenance
reservation (scontrol(1) `create reservation`, Flags=MAINT) for our user alone: reserve the
node, resume it (the reservation keeps every other job off), `srun` the command there (its
output comes back on the pipe, no shared file system needed), then drain it again with the
reason it had and drop the reservation. Whether it goes back to work is the gate's decision,
taken after, through the remediation hook's release. Without IGNORE_JOBS, Slurm itself refuses
the reservation while a job runs on the node; the job listing before it only says so in
plainer words. A sweep tests an idle node the same way, minus the resume.

Every call is an argv list with a timeout; the node name passed the hostname grammar first
(service.remediation.hooks.target)."""

from __future__ import annotations

import getpass
import math
import shlex
from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field

from service.diagnostics.site import Purpose, Ran
from service.remediation.hooks.base import Step
from service.remediation.hooks.runner import CommandRunner, Completed, SubprocessRunner, one_line
from service.remediation.hooks.slurm import SlurmConfig, SlurmHook, parse_jobs
from service.remediation.hooks.target import target_problem

JOB_NAME = "gpuhealth-diag"
RESERVATION_PREFIX = "gpuhealth_diag_"
WAITING_FOR_CAPACITY = frozenset({"Resources", "Priority"})  # squeue(1) job reason codes


class SlurmSiteConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scontrol: str = Field(default="scontrol", min_length=1)
    squeue: str = Field(default="squeue", min_length=1)
    srun: str = Field(default="srun", min_length=1)
    scancel: str = Field(default="scancel", min_length=1)
    slurm_conf: str | None = None  # exported as SLURM_CONF; None: Slurm's default
    timeout_s: float = Field(default=15.0, gt=0, le=300)  # per control call
    user: str = Field(default="", description="the reservation's user; empty: ours")
    partition: str | None = None
    start_within_s: int = Field(default=120, ge=1, le=3600,
                                description="srun --immediate: give up if not started by then")


class SlurmSite:
    name = "slurm"

    def __init__(self, config: SlurmSiteConfig, runner: CommandRunner | None = None) -> None:
        self.config = config
        env = {"SLURM_CONF": config.slurm_conf} if config.slurm_conf else None
        self.runner: CommandRunner = runner or SubprocessRunner(env=env)
        self.hook = SlurmHook(SlurmConfig(scontrol=config.scontrol, squeue=config.squeue,
                                          timeout_s=config.timeout_s,
                                          slurm_conf=config.slurm_conf), self.runner)

    # -- the argv lists -------------------------------------------------------------------------

    def reserve_argv(self, node: str, minutes: int) -> list[str]:
        user = self.config.user or getpass.getuser()
        return [self.config.scontrol, "create", "reservation",
                f"ReservationName={RESERVATION_PREFIX}{node}", f"Nodes={node}",
                f"Users={user}", "StartTime=now", f"Duration={minutes}", "Flags=MAINT"]

    def unreserve_argv(self, node: str) -> list[str]:
        return [self.config.scontrol, "delete", f"ReservationName={RESERVATION_PREFIX}{node}"]

    def srun_argv(self, node: str, argv: list[str], minutes: int) -> list[str]:
        out = [self.config.srun, f"--reservation={RESERVATION_PREFIX}{node}",
               f"--nodelist={node}", "--nodes=1", "--exclusive", f"--time={minutes}",
               f"--job-name={JOB_NAME}", f"--immediate={self.config.start_within_s}"]
        if self.config.partition:
            out.append(f"--partition={self.config.partition}")
        return [*out, "--", *argv]

    def cancel_argv(self, node: str) -> list[str]:
        return [self.config.scancel, f"--name={JOB_NAME}", f"--nodelist={node}"]

    def redrain_argv(self, node: str, reason: str) -> list[str]:
        return [self.config.scontrol, "update", f"NodeName={node}", "State=DRAIN",
                f"Reason={reason}"]

    # -- Site -----------------------------------------------------------------------------------

    def run(self, node: str, argv: list[str], timeout_s: float, purpose: Purpose) -> Ran:
        why = target_problem(node)
        if why is not None:
            return Ran(refused=why)
        steps: list[Step] = []
        state = self.hook.inspect(node)
        if not state.exists or "error" in state.extra:
            return Ran(refused=f"cannot read {node} from Slurm: {state.detail}")
        flags = str(state.extra.get("state", "")).split("+")
        drained = state.drained_by_us
        if state.drained_by_other:
            return Ran(refused=f"{node} was drained by someone else ({state.detail}); "
                               "not testing it")
        if purpose is Purpose.GATE and not drained:
            return Ran(refused=f"{node} is not drained by gpuhealth ({state.detail}); a gate "
                               "tests only nodes gpuhealth holds")
        if not drained and flags[0] != "IDLE":
            return Ran(refused=f"{node} is not idle ({state.detail}); not testing it")
        busy = self._jobs(node, steps) or (self.queued(steps) if purpose is Purpose.SWEEP
                                           else "")
        if busy:
            return Ran(refused=busy, steps=tuple(steps))
        minutes = max(1, math.ceil(timeout_s / 60))
        reserved = self._call(self.reserve_argv(node, minutes + 5), steps)
        if reserved is None or reserved.returncode != 0:
            said = "" if reserved is None else one_line(reserved.stderr or reserved.stdout)
            return Ran(refused=f"Slurm would not reserve {node}: {said or 'no answer'}",
                       steps=tuple(steps))
        try:
            ran = self._run_reserved(node, argv, timeout_s, minutes, drained,
                                     str(state.extra.get("reason", "")), steps)
        finally:
            self._call(self.unreserve_argv(node), steps)
        return replace(ran, steps=tuple(steps))  # the clean-up's calls too

    def _run_reserved(self, node: str, argv: list[str], timeout_s: float, minutes: int,
                      drained: bool, reason: str, steps: list[Step]) -> Ran:
        if drained:
            resumed = self._call(self.hook.resume_argv(node), steps)
            if resumed is None or resumed.returncode != 0:
                return Ran(refused=f"could not resume {node} into its reservation",
                           steps=tuple(steps))
        try:
            cmd = self.srun_argv(node, argv, minutes)
            limit = timeout_s + self.config.start_within_s + 10
            try:
                done = self.runner.run(cmd, limit)
            except OSError as exc:
                why = f"cannot run {cmd[0]!r}: {exc.strerror or exc}"
                steps.append(Step(shlex.join(cmd), ok=False, detail=why))
                return Ran(refused=why, steps=tuple(steps))
            steps.append(Step(shlex.join(cmd), ok=done.returncode == 0 and not done.timed_out,
                              detail=f"exit {done.returncode}" + (" (timed out)"
                                                                   if done.timed_out else ""),
                              duration_s=done.duration_s))
            if done.timed_out:
                self._call(self.cancel_argv(node), steps)
            return Ran(exit_code=None if done.timed_out else done.returncode,
                       stdout=done.stdout, stderr=done.stderr, timed_out=done.timed_out,
                       steps=tuple(steps), duration_s=done.duration_s)
        finally:
            if drained:  # back as it was: whether it returns to work is the gate's call
                self._call(self.redrain_argv(node, reason), steps)

    def _jobs(self, node: str, steps: list[Step]) -> str:
        listed = self._call(self.hook.list_jobs_argv(node), steps)
        if listed is None or listed.returncode != 0:
            return f"cannot list the jobs on {node}; not testing it"
        jobs = parse_jobs(listed.stdout)
        if jobs:
            ids = ", ".join(j.job_id for j in jobs[:5])
            return f"{node} has {len(jobs)} job(s) on it ({ids}); not testing it"
        return ""

    def pending_argv(self) -> list[str]:
        out = [self.config.squeue, "-h", "--states=PENDING", "--format=%i|%r"]
        return [*out, f"--partition={self.config.partition}"] if self.config.partition else out

    def queued(self, steps: list[Step]) -> str:
        """Why a sweep must wait: jobs queued for capacity (squeue's reason Resources or
        Priority), which a sweep would take. A job held, or waiting for its begin time or a
        dependency, waits for something else."""
        listed = self._call(self.pending_argv(), steps)
        if listed is None or listed.returncode != 0:
            return "cannot list the queue; not sweeping"
        waiting = [ln for ln in listed.stdout.splitlines()
                   if ln.partition("|")[2].strip() in WAITING_FOR_CAPACITY]
        if waiting:
            return (f"{len(waiting)} job(s) wait in the queue; a sweep takes only idle "
                    "capacity nobody waits for")
        return ""

    def _call(self, argv: list[str], steps: list[Step]) -> Completed | None:
        try:
            done = self.runner.run(argv, self.config.timeout_s)
        except OSError as exc:
            steps.append(Step(shlex.join(argv), ok=False, detail=str(exc.strerror or exc)))
            return None
        ok = done.returncode == 0 and not done.timed_out
        steps.append(Step(shlex.join(argv), ok=ok,
                          detail=one_line(done.stdout if ok else done.stderr or done.stdout,
                                          200), duration_s=done.duration_s))
        return done
