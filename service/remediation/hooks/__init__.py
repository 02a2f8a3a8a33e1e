"""The hook registry (a collectors.plugins.PluginRegistry): every hook type by name, with the
pydantic model its config must pass and the factory that builds it. Explicit (no entry points,
no import-time discovery) so the set of things that can act on a cluster is visible in one place."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from collectors.plugins import Plugin, PluginRegistry
from service.remediation.hooks.base import Hook
from service.remediation.hooks.command import CommandConfig, CommandHook
from service.remediation.hooks.kubernetes import KubernetesConfig, KubernetesHook
from service.remediation.hooks.slurm import SlurmConfig, SlurmHook
from service.remediation.hooks.target import GuardedHook
from service.remediation.hooks.webhook import WebhookHook, WebhookHookConfig

C = TypeVar("C", bound=BaseModel)

HOOK_TYPES: PluginRegistry[Hook] = PluginRegistry("remediation hook")


def register(name: str, config_model: type[C], factory: Callable[[C], Hook]) -> None:
    def guarded(_name: str, config: C) -> Hook:
        # Every hook checks the node name before it acts (hooks/target.py).
        return GuardedHook(factory(config))

    HOOK_TYPES.register(Plugin(name, config_model, guarded))


register("slurm", SlurmConfig, SlurmHook)
register("kubernetes", KubernetesConfig, KubernetesHook)
register("webhook", WebhookHookConfig, WebhookHook)
register("command", CommandConfig, CommandHook)


def check_hook(type_: str, config: Mapping[str, Any]) -> str | None:
    """What is wrong with a hook's settings, or None; builds nothing (no kubeconfig read)."""
    return HOOK_TYPES.check(type_, config)


def build_hook(type_: str, config: Mapping[str, Any]) -> Hook:
    """A hook of the named type; ValueError, naming the type and the bad fields, when either
    is wrong."""
    return HOOK_TYPES.build(type_, config)


__all__ = ["HOOK_TYPES", "build_hook", "check_hook", "register"]
