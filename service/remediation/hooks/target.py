"""The one node a hook may act on. Node names come from the wire (an agent's `host` tag, a
Telegraf line), and every hook hands them to something that interprets them: Slurm expands
`gpu[001-512]` and `a,b` into hostlists, `squeue -w --all` reads an option, a command hook's
program may parse `-h`. So every verb of every hook first checks the name against a
conservative hostname grammar (RFC 1123 labels, plus `_` that some sites use), and a name
that fails never reaches a command line or an API path. Ingest refuses such names already;
this is the last line, not the only one."""

from __future__ import annotations

import re

from service.remediation.hooks.base import ActionRequest, Hook, HookResult, NodeState, Step

MAX_NAME = 253  # a DNS name; Slurm and Kubernetes node names both fit in it
MAX_LABEL = 63
_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?")


def target_problem(node: str) -> str | None:
    """Why `node` may not be acted on, or None for a plain single host name."""
    if not node:
        return "empty node name"
    if len(node) > MAX_NAME:
        return f"node name longer than {MAX_NAME} characters"
    shown = node[:80].encode("unicode_escape").decode("ascii")
    for label in node.split("."):
        if len(label) > MAX_LABEL or not _LABEL.fullmatch(label):
            return (f"node name {shown!r} is not one plain host name (letters, digits, '-', "
                    f"'_' in dot-separated labels of at most {MAX_LABEL}; no brackets, commas, "
                    "spaces or leading '-'): refusing to act on it")
    return None


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
