"""PagerDuty Events API v2: one PagerDuty alert per aggregation group. The group's dedup_key
ties a trigger, its updates and the final resolve together; PagerDuty only honours them
through the same routing_key."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import AnyHttpUrl, Field, SecretStr

from service.notify.message import AlertRef, Delivery, Message
from service.notify.receivers._common import (
    MAX_DETAIL,
    HttpClient,
    ReceiverConfig,
    base_url,
    failure,
    json_body,
)
from service.notify.receivers.render import MAX_SIGNALS, one_line, truncate

MAX_ALERTS = 20  # in custom_details; the payload limit is 512 KB
MAX_LINKS = 10


class PagerDutyConfig(ReceiverConfig):
    routing_key: SecretStr = Field(min_length=1)
    url: AnyHttpUrl = AnyHttpUrl("https://events.pagerduty.com")


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def _joined(values: set[str], limit: int = 255) -> str:
    return truncate(", ".join(sorted(v for v in values if v)), limit)


def _alert_details(a: AlertRef) -> dict[str, Any]:
    return {"summary": a.summary, "status": a.status, "entity": a.labels.get("entity", ""),
            "node": a.labels.get("node", ""), "level": a.level, "risk": round(a.risk, 4),
            "started": iso(a.starts_at), "fingerprint": a.fingerprint,
            "explanation": list(a.explanation[:MAX_SIGNALS]), "url": a.url}


def event(msg: Message, routing_key: str) -> dict[str, Any]:
    """The Events v2 body for `msg`: a resolve when nothing fires, else a (re-)trigger."""
    if msg.status == "resolved":
        return {"routing_key": routing_key, "event_action": "resolve",
                "dedup_key": msg.dedup_key}
    firing = msg.firing
    top = max(firing, key=lambda a: (a.level, a.risk))
    source = msg.group_labels.get("node") or top.labels.get("node") or "gpuhealth"
    ordered = sorted(msg.alerts, key=lambda a: (a.status != "firing", -a.level, -a.risk))
    details: dict[str, Any] = {
        "reason": msg.reason, "group": msg.group_labels, "firing": len(firing),
        "resolved": len(msg.resolved), "max_risk": round(max(a.risk for a in firing), 4),
        "alerts": [_alert_details(a) for a in ordered[:MAX_ALERTS]],
    }
    if len(ordered) > MAX_ALERTS:
        details["truncated_alerts"] = len(ordered) - MAX_ALERTS
    if msg.digest_of:
        details["digest_of"] = list(msg.digest_of)
    payload: dict[str, Any] = {
        "summary": one_line(msg, 1024), "source": source, "severity": msg.severity,
        "timestamp": iso(min(a.starts_at for a in firing)),
        "component": _joined({a.labels.get("entity", "") for a in firing}),
        "group": msg.group_labels.get("cluster") or _joined(
            {a.labels.get("cluster", "") for a in firing}),
        "class": _joined({a.labels.get("alertname", "") for a in firing}),
        "custom_details": details,
    }
    body: dict[str, Any] = {
        "routing_key": routing_key, "event_action": "trigger", "dedup_key": msg.dedup_key,
        "payload": {k: v for k, v in payload.items() if v != ""},
        "links": [{"href": a.url, "text": truncate(a.summary, 200)}
                  for a in ordered if a.url and a.status == "firing"][:MAX_LINKS],
        "client": "gpuhealth",
    }
    if msg.external_url:
        body["client_url"] = msg.external_url
    return body


class PagerDutyReceiver:
    """A Notifier posting to {url}/v2/enqueue. Call aclose() when done with it."""

    def __init__(self, name: str, config: PagerDutyConfig) -> None:
        self.name = name
        self.config = config
        self._http = HttpClient(config.timeout_s, [config.routing_key.get_secret_value()])

    async def notify(self, msg: Message) -> Delivery:
        body = event(msg, self.config.routing_key.get_secret_value())
        got = await self._http.post(f"{base_url(self.config.url)}/v2/enqueue",
                                    content=json_body(body),
                                    headers={"content-type": "application/json"})
        if isinstance(got, Delivery):
            return got
        if not got.is_success:
            return failure(got, self._http.secrets)
        return Delivery(ok=True, key=_dedup_key(got) or msg.dedup_key,
                        detail=f"{body['event_action']} accepted (HTTP {got.status_code})"
                        [:MAX_DETAIL])

    async def aclose(self) -> None:
        await self._http.aclose()


def _dedup_key(resp: httpx.Response) -> str:
    try:
        data = resp.json()
    except ValueError:
        return ""
    key = data.get("dedup_key") if isinstance(data, dict) else None
    return key if isinstance(key, str) else ""
