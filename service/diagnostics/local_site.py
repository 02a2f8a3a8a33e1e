"""A site that runs the suite on this host: the node agent's local mode, or a one-node
deployment. Busy is what the GPUs say: any compute process on them (nvidia-smi's
`--query-compute-apps`, one line per process) is someone's work, and the test does not start.
A busy check that cannot run refuses too: not knowing is not idle."""

from __future__ import annotations

import shlex

from pydantic import BaseModel, ConfigDict, Field

from service.diagnostics.site import Purpose, Ran
from service.remediation.hooks.base import Step
from service.remediation.hooks.runner import CommandRunner, SubprocessRunner, one_line

BUSY_CHECK = ["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"]


class LocalSiteConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    node: str = Field(default="", description="this host's node name as gpuhealth knows it; "
                      "empty: the host name")
    busy_check: list[str] = Field(default_factory=lambda: list(BUSY_CHECK), min_length=1)
    busy_timeout_s: float = Field(default=30.0, gt=0, le=600)


class LocalSite:
    name = "local"

    def __init__(self, config: LocalSiteConfig, node: str,
                 runner: CommandRunner | None = None) -> None:
        self.config, self.node = config, config.node or node
        self.runner: CommandRunner = runner or SubprocessRunner()

    def run(self, node: str, argv: list[str], timeout_s: float, purpose: Purpose) -> Ran:
        if node != self.node:
            return Ran(refused=f"the local site runs on {self.node} only, not {node}")
        steps: list[Step] = []
        busy = self._busy(steps)
        if busy:
            return Ran(refused=busy, steps=tuple(steps))
        try:
            done = self.runner.run(argv, timeout_s)
        except OSError as exc:
            why = f"cannot run {argv[0]!r}: {exc.strerror or exc}"
            return Ran(refused=why, steps=(*steps, Step(shlex.join(argv), ok=False, detail=why)))
        steps.append(Step(shlex.join(argv), ok=done.returncode == 0 and not done.timed_out,
                          detail=f"exit {done.returncode}", duration_s=done.duration_s))
        return Ran(exit_code=None if done.timed_out else done.returncode, stdout=done.stdout,
                   stderr=done.stderr, timed_out=done.timed_out, steps=tuple(steps),
                   duration_s=done.duration_s)

    def _busy(self, steps: list[Step]) -> str:
        argv = self.config.busy_check
        try:
            done = self.runner.run(argv, self.config.busy_timeout_s)
        except OSError as exc:
            why = f"cannot tell whether {self.node} is busy: {argv[0]!r}: {exc.strerror or exc}"
            steps.append(Step(shlex.join(argv), ok=False, detail=why))
            return why
        lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
        ok = done.returncode == 0 and not done.timed_out
        steps.append(Step(shlex.join(argv), ok=ok and not lines,
                          detail=one_line(done.stdout or done.stderr, 200),
                          duration_s=done.duration_s))
        if not ok:
            return (f"cannot tell whether {self.node} is busy: {argv[0]} "
                    f"{'timed out' if done.timed_out else f'exit {done.returncode}'}")
        if lines:
            return f"{self.node} has {len(lines)} process(es) on its GPUs; not testing"
        return ""
