"""The receiver registry and config validation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from service.notify.message import Delivery, Message
from service.notify.receivers import (
    RECEIVER_TYPES,
    AlertmanagerReceiver,
    EmailReceiver,
    PagerDutyReceiver,
    ReceiverType,
    TwilioReceiver,
    WebhookReceiver,
    build_receiver,
    register,
)
from service.notify.receivers.email import EmailConfig
from tests.notify.receivers.samples import message

VALID: dict[str, dict[str, Any]] = {
    "alertmanager": {"urls": ["http://am-1.example.org:9093", "http://am-2.example.org:9093"]},
    "email": {"to": ["ops@example.org"], "from_addr": "gpuhealth@example.org",
              "host": "smtp.example.org"},
    "pagerduty": {"routing_key": "k" * 32},
    "twilio": {"account_sid": "AC1", "auth_token": "t", "from_number": "+15550000000",
               "to": ["+15550000001"]},
    "webhook": {"url": "https://hooks.example.org/gpu"},
}


def test_the_five_types_are_registered() -> None:
    assert set(RECEIVER_TYPES) == set(VALID)
    kinds = {"alertmanager": AlertmanagerReceiver, "email": EmailReceiver,
             "pagerduty": PagerDutyReceiver, "twilio": TwilioReceiver, "webhook": WebhookReceiver}
    for type_, cfg in VALID.items():
        r = build_receiver(f"my-{type_}", type_, cfg)
        assert isinstance(r, kinds[type_]) and r.name == f"my-{type_}"
        assert issubclass(RECEIVER_TYPES[type_].config, BaseModel)


def test_defaults() -> None:
    pd = build_receiver("pd", "pagerduty", VALID["pagerduty"])
    assert isinstance(pd, PagerDutyReceiver)
    assert str(pd.config.url) == "https://events.pagerduty.com/"
    mail = build_receiver("m", "email", VALID["email"])
    assert isinstance(mail, EmailReceiver)
    assert (mail.config.tls, mail.config.verify, mail.config.effective_port) == (
        "starttls", True, 587)
    assert EmailConfig(**VALID["email"], tls="implicit").effective_port == 465


class _NullConfig(BaseModel):
    note: str = ""


class _Null:
    def __init__(self, name: str, config: _NullConfig) -> None:
        self.name = name

    async def notify(self, msg: Message) -> Delivery:
        return Delivery(ok=True)


def test_register_refuses_duplicates_and_adds_new_types() -> None:
    with pytest.raises(ValueError, match="'webhook' is already registered"):
        register(ReceiverType("webhook", _NullConfig, _Null))
    register(ReceiverType("null-test", _NullConfig, _Null))
    try:
        r = build_receiver("n", "null-test", {})
        assert asyncio.run(r.notify(message())).ok
    finally:
        RECEIVER_TYPES.unregister("null-test")


def test_unknown_type_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"receiver 'x': unknown type 'slack' "
                                         r"\(known: alertmanager, email, "):
        build_receiver("x", "slack", {})


@pytest.mark.parametrize(("type_", "change", "field"), [
    ("email", {"to": []}, "to"),
    ("email", {"to": ["not an address"]}, "to.0"),
    ("email", {"tls": "ssl"}, "tls"),
    ("email", {"ca_file": "/nonexistent/ca.pem"}, "ca_file"),
    ("email", {"port": 0}, "port"),
    ("email", {"from_addr": "a@b.org\r\nBcc: x@y.org"}, "from_addr"),
    ("pagerduty", {"routing_key": ""}, "routing_key"),
    ("pagerduty", {"url": "ftp://example.org"}, "url"),
    ("pagerduty", {"timeout_s": 0}, "timeout_s"),
    ("twilio", {"to": ["5550001"]}, "to.0"),
    ("twilio", {"account_sid": "AC/../other"}, "account_sid"),
    ("webhook", {"max_alerts": -1}, "max_alerts"),
    ("webhook", {"headers": {"Webhook-Signature": "v1,forged"}}, "headers"),
    ("webhook", {"secret": "short"}, "secret"),
    ("webhook", {"retries": 3}, "retries"),  # a typo must not pass silently
])
def test_bad_config_names_receiver_and_field(type_: str, change: dict[str, Any],
                                             field: str) -> None:
    with pytest.raises(ValueError, match=rf"^receiver 'r1' \({type_}\): .*{field}: "):
        build_receiver("r1", type_, VALID[type_] | change)


def test_cross_field_rules() -> None:
    base = VALID["email"]
    with pytest.raises(ValueError, match="username and password go together"):
        build_receiver("m", "email", base | {"username": "u"})
    with pytest.raises(ValueError, match="password without TLS"):
        build_receiver("m", "email", base | {"tls": "none", "username": "u", "password": "p"})
    build_receiver("m", "email", base | {"host": "127.0.0.1", "tls": "none",
                                         "username": "u", "password": "p"})


def test_errors_never_echo_a_secret() -> None:
    secret = "SUPER-SECRET-VALUE-123"
    cases: list[tuple[str, dict[str, Any]]] = [
        ("pagerduty", {"routing_key": 12345, "url": secret}),
        ("email", {"password": secret}),
        ("twilio", {"auth_token": secret, "to": []}),
        ("webhook", {"secret": secret, "headers": {"A": {"x": secret}}}),
    ]
    for type_, change in cases:
        with pytest.raises(ValueError) as info:
            build_receiver("r", type_, VALID[type_] | change)
        assert secret not in str(info.value)
        assert info.value.__cause__ is None
    r = build_receiver("pd", "pagerduty", {"routing_key": secret})
    assert isinstance(r, PagerDutyReceiver) and secret not in repr(r.config)
