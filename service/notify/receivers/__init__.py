"""Receiver integrations and their registry. The registry is explicit (no entry points or
import-time discovery): a type name maps to a pydantic config model and a factory, and
`build_receiver` validates a config before anything is built, so a typo fails at load time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from service.errors import field_errors
from service.notify.message import Notifier
from service.notify.receivers.alertmanager import AlertmanagerConfig, AlertmanagerReceiver
from service.notify.receivers.email import EmailConfig, EmailReceiver
from service.notify.receivers.pagerduty import PagerDutyConfig, PagerDutyReceiver
from service.notify.receivers.twilio import TwilioConfig, TwilioReceiver
from service.notify.receivers.webhook import WebhookConfig, WebhookReceiver

C = TypeVar("C", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class ReceiverType(Generic[C]):
    name: str
    config: type[C]
    factory: Callable[[str, C], Notifier]


RECEIVER_TYPES: dict[str, ReceiverType[Any]] = {}


def register(rt: ReceiverType[Any]) -> None:
    if rt.name in RECEIVER_TYPES:
        raise ValueError(f"receiver type {rt.name!r} is already registered")
    RECEIVER_TYPES[rt.name] = rt


def check_receiver(name: str, type_: str, config: dict[str, Any]) -> str | None:
    """What is wrong with a receiver's settings, or None (settings validate at load)."""
    try:
        _validated(name, type_, config)
    except ValueError as e:
        return str(e)
    return None


def _validated(name: str, type_: str, config: dict[str, Any]) -> tuple[ReceiverType[Any], Any]:
    rt = RECEIVER_TYPES.get(type_)
    if rt is None:
        raise ValueError(f"receiver {name!r}: unknown type {type_!r} "
                         f"(known: {', '.join(sorted(RECEIVER_TYPES))})")
    try:
        return rt, rt.config.model_validate(config)
    except ValidationError as exc:
        bad = "; ".join(field_errors(exc, "(config)"))
        raise ValueError(f"receiver {name!r} ({type_}): {bad}") from None


def build_receiver(name: str, type_: str, config: dict[str, Any]) -> Notifier:
    rt, cfg = _validated(name, type_, config)
    return rt.factory(name, cfg)


register(ReceiverType("alertmanager", AlertmanagerConfig, AlertmanagerReceiver))
register(ReceiverType("email", EmailConfig, EmailReceiver))
register(ReceiverType("pagerduty", PagerDutyConfig, PagerDutyReceiver))
register(ReceiverType("twilio", TwilioConfig, TwilioReceiver))
register(ReceiverType("webhook", WebhookConfig, WebhookReceiver))

__all__ = [
    "RECEIVER_TYPES",
    "AlertmanagerConfig",
    "AlertmanagerReceiver",
    "EmailConfig",
    "EmailReceiver",
    "PagerDutyConfig",
    "PagerDutyReceiver",
    "ReceiverType",
    "TwilioConfig",
    "TwilioReceiver",
    "WebhookConfig",
    "WebhookReceiver",
    "build_receiver",
    "register",
]
