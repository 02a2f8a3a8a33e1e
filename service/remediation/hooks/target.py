"""The one node a hook may act on. Node names come from the wire (an agent's `host` tag, a
Telegraf line), and every hook hands them to something that interprets them: Slurm expands
`gpu[001-512]` and `a,b` into hostlists, `squeue -w --all` reads an option, a command hook's
program may parse `-h`. So every verb of every hook first checks the name against a
conservative hostname grammar (letters, digits, '-' and '_' in dot-separated labels, no
label starting with '-'), and a name that fails never reaches a command line or an API path.
Ingest refuses such names already; this is the last line, not the only one."""

from __future__ import annotations

from collectors.frames import name_problem
from service.remediation.hooks.base import ActionRequest, Hook, HookResult, NodeState, Step


def target_problem(node: str) -> str | None:
    """Why `node` may not be acted on, or None for one plain host name: the same grammar
    ingest holds every entity name to (collectors/frames.py)."""
    why = name_problem(node, "node name")
    return None if why is None else f"{why}: not one plain host name, refusing to act on it"


class GuardedHook:
    """Any hook, behind the name check on every verb (built by hooks.build_hook)."""

    def __init__(self, inner: Hook) -> None:
        self.inner = inner
        self.name = inner.name

    def plan(self, req: ActionRequest) -> list[Step]:
        why = target_problem(req.node)
        if why is not None:
            return [Step(f"{self.name}: (refused)", ok=False, detail=why)]
        return self.inner.plan(req)

    def execute(self, req: ActionRequest) -> HookResult:
        why = target_problem(req.node)
        return self.inner.execute(req) if why is None else HookResult(ok=False, detail=why)

    def release(self, node: str) -> HookResult:
        why = target_problem(node)
        return self.inner.release(node) if why is None else HookResult(ok=False, detail=why)

    def inspect(self, node: str) -> NodeState:
        why = target_problem(node)
        if why is None:
            return self.inner.inspect(node)
        return NodeState(node=node, exists=False, drained_by_us=False, detail=why)
