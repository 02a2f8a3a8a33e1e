"""Command hook: run an operator's program for drain, release and (optionally) inspect. The
argv is a list, never a shell line; `{node}`, `{action_id}`, `{alert_id}` and `{reason}` are
replaced inside each argument, so a value with spaces or quotes stays one argument and is
never re-parsed. Exit 0 = done, 75 (EX_TEMPFAIL, sysexits.h) = try again later, anything else
= failed.

The inspect program, when configured, gets `{node}` and prints one JSON object:
`{"exists": bool, "drained_by_us": bool, "drained_by_other": bool, "detail": str}` (missing
keys read as exists=true, the others false)."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.remediation.hooks.base import ActionRequest, HookResult, NodeState, Step
from service.remediation.hooks.runner import CommandRunner, SubprocessRunner, one_line
from service.remediation.hooks.slurm import drain_reason

EX_TEMPFAIL = 75
PLACEHOLDER = re.compile(r"\{(node|action_id|alert_id|reason)\}")
NODE_ONLY = frozenset({"node"})  # release and inspect know nothing but the node


class CommandConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    drain: list[str] = Field(min_length=1)  # e.g. ["/opt/site/drain", "--node", "{node}"]
    release: list[str] = Field(min_length=1)
    inspect: list[str] | None = None
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    env: dict[str, str] = Field(default_factory=dict)  # added to the inherited environment

    @field_validator("drain", "release", "inspect")
    @classmethod
    def _program_first(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v[0].strip() or PLACEHOLDER.search(v[0])):
            raise ValueError("argv[0] must be a fixed program, not empty or a placeholder")
        return v

    @model_validator(mode="after")
    def _node_only(self) -> CommandConfig:
        for name, argv in (("release", self.release), ("inspect", self.inspect)):
            used = {m.group(1) for arg in argv or [] for m in PLACEHOLDER.finditer(arg)}
            if used - NODE_ONLY:
                raise ValueError(f"{name} may only use {{node}}, not "
                                 f"{', '.join(sorted('{' + u + '}' for u in used - NODE_ONLY))}")
        return self


def substitute(argv: list[str], values: Mapping[str, str]) -> list[str]:
    """One pass per argument: a value that itself contains "{node}" is not expanded again."""
    return [PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), arg) for arg in argv]


class CommandHook:
    name = "command"

    def __init__(self, config: CommandConfig, runner: CommandRunner | None = None) -> None:
        self.config = config
        self.runner: CommandRunner = runner or SubprocessRunner(env=config.env)

    def drain_argv(self, req: ActionRequest) -> list[str]:
        return substitute(self.config.drain, {"node": req.node, "action_id": req.action_id,
                                              "alert_id": str(req.alert_id),
                                              "reason": drain_reason(req)})

    def plan(self, req: ActionRequest) -> list[Step]:
        return [Step(call=shlex.join(self.drain_argv(req)), detail="operator's drain command")]

    def execute(self, req: ActionRequest) -> HookResult:
        return self._run(self.drain_argv(req), f"drain of {req.node}")[0]

    def release(self, node: str) -> HookResult:
        return self._run(substitute(self.config.release, {"node": node}),
                         f"release of {node}")[0]

    def inspect(self, node: str) -> NodeState:
        if self.config.inspect is None:
            return NodeState(node=node, exists=True, drained_by_us=False,
                             detail="no inspect command configured: state unknown",
                             extra={"unknown": True})
        result, out = self._run(substitute(self.config.inspect, {"node": node}),
                                f"inspect of {node}")
        if not result.ok:
            return NodeState(node=node, exists=True, drained_by_us=False, detail=result.detail,
                             extra={"error": result.detail})
        try:
            data = json.loads(out)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            why = f"inspect printed no JSON object ({exc}): {one_line(out, 120)!r}"
            return NodeState(node=node, exists=True, drained_by_us=False, detail=why,
                             extra={"error": why})
        return NodeState(node=node, exists=bool(data.get("exists", True)),
                         drained_by_us=bool(data.get("drained_by_us", False)),
                         drained_by_other=bool(data.get("drained_by_other", False)),
                         detail=str(data.get("detail", "")), extra={"output": data})

    def _run(self, argv: list[str], what: str) -> tuple[HookResult, str]:
        """The result and the program's stdout."""
        call = shlex.join(argv)
        try:
            done = self.runner.run(argv, self.config.timeout_s)
        except OSError as exc:
            why = f"cannot run {argv[0]!r}: {exc.strerror or exc}"
            return HookResult(ok=False, retry=False, detail=f"{what}: {why}",
                              steps=(Step(call=call, ok=False, detail=why),)), ""
        said = one_line(done.stderr or done.stdout)
        if done.timed_out:
            ok, retry, detail = False, True, f"timed out after {self.config.timeout_s:g} s"
        elif done.returncode == 0:
            ok, retry, detail = True, False, one_line(done.stdout)
        elif done.returncode == EX_TEMPFAIL:
            ok, retry, detail = False, True, f"exit 75 (temporary failure): {said}"
        else:
            ok, retry, detail = False, False, f"exit {done.returncode}: {said}"
        step = Step(call=call, ok=ok, detail=detail, duration_s=done.duration_s)
        return HookResult(ok=ok, retry=retry, detail=f"{what}: {detail}",
                          steps=(step,)), done.stdout
