"""Receiver integrations and their registry (a collectors.plugins.PluginRegistry): a type name
maps to a pydantic config model and a factory, and `build_receiver` validates a config before
anything is built, so a typo fails at load time."""

from __future__ import annotations

from typing import Any

from collectors.plugins import Plugin, PluginRegistry
from service.notify.message import Notifier
from service.notify.receivers.alertmanager import AlertmanagerConfig, AlertmanagerReceiver
from service.notify.receivers.email import EmailConfig, EmailReceiver
from service.notify.receivers.pagerduty import PagerDutyConfig, PagerDutyReceiver
from service.notify.receivers.twilio import TwilioConfig, TwilioReceiver
from service.notify.receivers.webhook import WebhookConfig, WebhookReceiver

# A receiver type: its name, config model and factory (receiver name, validated config).
ReceiverType = Plugin
RECEIVER_TYPES: PluginRegistry[Notifier] = PluginRegistry("receiver")


def register(rt: Plugin[Any, Notifier]) -> None:
    RECEIVER_TYPES.register(rt)


def check_receiver(name: str, type_: str, config: dict[str, Any]) -> str | None:
    """What is wrong with a receiver's settings, or None (settings validate at load)."""
    return RECEIVER_TYPES.check(type_, config, name)


def build_receiver(name: str, type_: str, config: dict[str, Any]) -> Notifier:
    """ValueError naming the receiver and its bad fields when its settings are wrong."""
    return RECEIVER_TYPES.build(type_, config, name)


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
    "check_receiver",
    "register",
]
