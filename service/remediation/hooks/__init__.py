"""The hook registry: every hook type by name, with the pydantic model its config must pass
and the factory that builds it. Explicit (no entry points, no import-time discovery) so the
set of things that can act on a cluster is visible in one place."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from service.errors import field_errors
from service.remediation.hooks.base import Hook
from service.remediation.hooks.command import CommandConfig, CommandHook
from service.remediation.hooks.kubernetes import KubernetesConfig, KubernetesHook
from service.remediation.hooks.slurm import SlurmConfig, SlurmHook
from service.remediation.hooks.target import GuardedHook
from service.remediation.hooks.webhook import WebhookHook, WebhookHookConfig

C = TypeVar("C", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class HookType(Generic[C]):
    config_model: type[C]
    factory: Callable[[C], Hook]

    def build(self, config: Mapping[str, Any]) -> Hook:
        # Every hook checks the node name before it acts (hooks/target.py).
        return GuardedHook(self.factory(self.config_model.model_validate(dict(config))))


HOOK_TYPES: dict[str, HookType[Any]] = {}


def register(name: str, config_model: type[C], factory: Callable[[C], Hook]) -> None:
    if name in HOOK_TYPES:
        raise ValueError(f"hook type {name!r} is already registered")
    HOOK_TYPES[name] = HookType(config_model, factory)


register("slurm", SlurmConfig, SlurmHook)
register("kubernetes", KubernetesConfig, KubernetesHook)
register("webhook", WebhookHookConfig, WebhookHook)
register("command", CommandConfig, CommandHook)


def check_hook(type_: str, config: Mapping[str, Any]) -> str | None:
    """What is wrong with a hook's settings, or None; builds nothing (no kubeconfig read)."""
    hook_type = HOOK_TYPES.get(type_)
    if hook_type is None:
        return f"unknown remediation hook {type_!r}; known: {', '.join(sorted(HOOK_TYPES))}"
    try:
        hook_type.config_model.model_validate(dict(config))
    except ValidationError as exc:
        return f"invalid config for remediation hook {type_!r}: {_problems(exc)}"
    return None


def _problems(exc: ValidationError) -> str:
    return "; ".join(field_errors(exc, "(config)"))


def build_hook(type_: str, config: Mapping[str, Any]) -> Hook:
    """A hook of the named type; ValueError, naming the type and the bad fields, when either
    is wrong."""
    hook_type = HOOK_TYPES.get(type_)
    if hook_type is None:
        raise ValueError(f"unknown remediation hook {type_!r}; known: "
                         f"{', '.join(sorted(HOOK_TYPES))}")
    try:
        return hook_type.build(config)
    except ValidationError as exc:
        raise ValueError(
            f"invalid config for remediation hook {type_!r}: {_problems(exc)}") from None


__all__ = ["HOOK_TYPES", "HookType", "build_hook", "register"]
