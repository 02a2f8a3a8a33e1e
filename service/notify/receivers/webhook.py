"""A generic webhook: Alertmanager's version-4 JSON, so tools written for Alertmanager accept
it unchanged, plus our level, risk and explanation. Alertmanager cannot sign its webhooks;
with a secret we sign in the Standard Webhooks scheme (service/notify/signing.py: a `whsec_`
secret is the spec's base64 key, any other is an older raw one)."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, AnyHttpUrl, Field, SecretStr

from service.notify import signing
from service.notify.message import AlertRef, Delivery, Message
from service.notify.receivers._common import (
    MAX_DETAIL,
    HttpClient,
    ReceiverConfig,
    failure,
    json_body,
)

ZERO_TIME = "0001-01-01T00:00:00Z"  # what Alertmanager sends as endsAt of a firing alert
RESERVED = frozenset({"content-type", "content-length", "host", "webhook-id",
                      "webhook-timestamp", "webhook-signature"})


def _no_reserved(v: dict[str, SecretStr]) -> dict[str, SecretStr]:
    bad = sorted(k for k in v if k.lower() in RESERVED)
    if bad:
        raise ValueError(f"headers set by the receiver itself: {', '.join(bad)}")
    return v


# Extra request headers of an HTTP receiver. Values may be credentials (Authorization), so they
# are kept as secrets; the ones the receiver sets itself are refused.
Headers = Annotated[dict[str, SecretStr], AfterValidator(_no_reserved)]


class WebhookConfig(ReceiverConfig):
    url: AnyHttpUrl
    secret: signing.SigningSecret | None = None
    max_alerts: int = Field(default=0, ge=0)  # 0 = all
    headers: Headers = Field(default_factory=dict)


def rfc3339(ts: float | None) -> str:
    """Epoch seconds as RFC 3339, UTC, to the nearest millisecond, `Z`: the one rendering of an
    instant, shared with the REST API (service/api/timefmt.py), so an alert's `startsAt` here
    and its `started_at` there are the same string."""
    if ts is None:
        return ZERO_TIME
    sec, ms = divmod(round(ts * 1000), 1000)
    return datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms:03d}Z"


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    """The pairs every map shares, as Alertmanager computes commonLabels."""
    if not maps:
        return {}
    first, *rest = maps
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in rest)}


def _alert(a: AlertRef) -> dict[str, Any]:
    return {"status": a.status, "labels": a.labels, "annotations": a.annotations,
            "startsAt": rfc3339(a.starts_at), "endsAt": rfc3339(a.ends_at),
            "generatorURL": a.console_url or a.url, "fingerprint": a.fingerprint,
            "level": a.level, "risk": a.risk, "explanation": list(a.explanation)}


def payload(msg: Message, max_alerts: int = 0) -> dict[str, Any]:
    # Firing alerts first, so a truncated list drops resolved ones before live ones.
    alerts = sorted(msg.alerts, key=lambda a: a.status != "firing")
    kept = alerts[:max_alerts] if max_alerts else alerts
    return {
        "version": "4", "groupKey": msg.group_key, "truncatedAlerts": len(alerts) - len(kept),
        "status": msg.status, "receiver": msg.receiver, "groupLabels": msg.group_labels,
        "commonLabels": _common([a.labels for a in msg.alerts]),
        "commonAnnotations": _common([a.annotations for a in msg.alerts]),
        "externalURL": msg.external_url,
        "alerts": [_alert(a) for a in kept],
        "level": msg.level, "risk": max((a.risk for a in msg.firing), default=0.0),
        "reason": msg.reason,
    }


def message_id(msg: Message) -> str:
    """The message's own id: one delivery of one state, the same across retries and a resend
    after a crash (the outbox keeps it), never another message's, so the far end may drop a
    duplicate by it. A message built outside the pipeline (no id) gets one from its content
    and time."""
    if msg.id:
        return msg.id
    alerts = sorted(f"{a.fingerprint}:{a.alert_id}:{a.status}:{a.level}" for a in msg.alerts)
    raw = "\0".join([msg.group_key, msg.reason, msg.receiver, repr(msg.at), *alerts]).encode()
    return "msg_" + hashlib.sha256(raw).hexdigest()[:32]


class WebhookReceiver:
    """A Notifier posting the JSON payload to `url`. Call aclose() when done with it."""

    def __init__(self, name: str, config: WebhookConfig) -> None:
        self.name = name
        self.config = config
        secrets = [v.get_secret_value() for v in config.headers.values()]
        if config.secret is not None:
            secrets.append(config.secret.get_secret_value())
        self._http = HttpClient(config.timeout_s, secrets)
        self._key = None if config.secret is None else signing.key(config.secret.get_secret_value())

    async def notify(self, msg: Message) -> Delivery:
        body = json_body(payload(msg, self.config.max_alerts))
        headers = {k: v.get_secret_value() for k, v in self.config.headers.items()}
        headers["content-type"] = "application/json"
        mid = message_id(msg)
        if self._key is not None:
            headers |= signing.sign(self._key, mid, time.time(), body)
        got = await self._http.post(str(self.config.url), content=body, headers=headers)
        if isinstance(got, Delivery):
            return got
        if not got.is_success:
            return failure(got, self._http.secrets)
        return Delivery(ok=True, key=mid, detail=f"HTTP {got.status_code}"[:MAX_DETAIL])

    async def aclose(self) -> None:
        await self._http.aclose()
