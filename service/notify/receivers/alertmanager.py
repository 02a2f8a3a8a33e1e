"""The `alertmanager` receiver: our alerts posted to one or more Alertmanagers'
`/api/v2/alerts`, the way Prometheus posts its own, so a shop routes, silences and inhibits
them with the Alertmanager it already runs.

- Labels: ours (service/notify/labels.py) plus `fingerprint`, our stable identity; the
  volatile ones (top signal, flapping, stale) travel as annotations, because Alertmanager
  takes any change of labels for another alert.
- Annotations: summary, description (the explanation), risk, the predicted window where a
  growth rule gave one, runbook_url, and whether it was acknowledged here. generatorURL opens
  the alert in our console.
- A firing alert's endsAt is now + `resolve_timeout_s`; Alertmanager resolves it by itself
  once that passes, so the dispatcher hands this receiver every firing alert again every
  `refresh_interval_s` (one batched POST per Alertmanager, service/notify/dispatcher.py). A
  resolve is sent with endsAt = when it resolved. An alert whose level (so severity) changed
  is a new label set to Alertmanager: the superseded set is resolved in the same POST.
- After each refresh the receiver reads back what every Alertmanager made of our alerts
  (active, or suppressed by which silences and inhibitions); the API shows it on the alert.
  Kept in memory only: after a restart it is back within one refresh. The answer is read up
  to `read_back_max_bytes` and parsed in a worker thread; a larger one is refused, and the
  error kept per Alertmanager (`read_errors`).
- What the receiver is given is the truth: every firing alert, muted here or not (the
  dispatcher's inhibitions and silences are for our own receivers; mirror them as
  Alertmanager inhibit rules).

Every Alertmanager of an HA pair gets every post, as Prometheus does; a delivery succeeds
when all of them accepted it (a post is idempotent, so a retry posting to all again is
harmless)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from pydantic import AnyHttpUrl, Field, model_validator

from service.notify.labels import VOLATILE
from service.notify.message import AlertRef, Delivery, Message, UpstreamStatus
from service.notify.receivers._common import (
    MAX_DETAIL,
    HttpClient,
    ReceiverConfig,
    base_url,
    failure,
    json_body,
)
from service.notify.receivers.webhook import Headers, rfc3339

log = logging.getLogger(__name__)
ALERTS_PATH = "/api/v2/alerts"
Clock = Callable[[], float]


class AlertmanagerConfig(ReceiverConfig):
    # Base URLs (http://am-1:9093, or with the route prefix it is served under).
    urls: list[AnyHttpUrl] = Field(min_length=1)
    resolve_timeout_s: float = Field(default=300.0, gt=0)
    refresh_interval_s: float = Field(default=60.0, gt=0)
    read_back: bool = True  # read silences and inhibitions back after each refresh
    read_back_max_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    headers: Headers = Field(default_factory=dict)

    @model_validator(mode="after")
    def _refresh_before_expiry(self) -> AlertmanagerConfig:
        # Twice per timeout at least: one lost post must not let Alertmanager resolve it.
        if self.refresh_interval_s * 2 > self.resolve_timeout_s:
            raise ValueError(f"refresh_interval_s ({self.refresh_interval_s:g}) must be at "
                             f"most half of resolve_timeout_s ({self.resolve_timeout_s:g})")
        return self


LabelSet = tuple[tuple[str, str], ...]


def am_labels(a: AlertRef) -> dict[str, str]:
    """Ours minus the volatile ones, plus `fingerprint`; empty values left out (Prometheus:
    an empty label is no label)."""
    out = {k: v for k, v in a.labels.items() if k not in VOLATILE and v}
    out["fingerprint"] = a.fingerprint
    return out


def am_annotations(a: AlertRef) -> dict[str, str]:
    out = {k: v for k, v in a.annotations.items() if v}
    out["risk"] = f"{a.risk:.2f}"
    for k in sorted(VOLATILE & a.labels.keys()):
        out[k] = a.labels[k]
    return out


def am_alert(a: AlertRef, now: float, resolve_timeout_s: float) -> dict[str, Any]:
    """One entry of the POST body (Alertmanager's postableAlert)."""
    if a.status == "firing":
        ends = now + resolve_timeout_s
    else:
        ends = a.ends_at if a.ends_at is not None else now
    return {"labels": am_labels(a), "annotations": am_annotations(a),
            "startsAt": rfc3339(a.starts_at), "endsAt": rfc3339(max(ends, a.starts_at)),
            "generatorURL": a.console_url or a.url}


def _key(labels: dict[str, str]) -> LabelSet:
    return tuple(sorted(labels.items()))


def payload(msg: Message, now: float, resolve_timeout_s: float, told: dict[str, LabelSet]
            ) -> tuple[list[dict[str, Any]], dict[str, LabelSet | None]]:
    """The POST body, and the changes to `told` (fingerprint -> the label set Alertmanager
    has firing; None: none any more) once it is accepted. A label set `told` holds for a
    fingerprint that this message shows with other labels is resolved now."""
    body: list[dict[str, Any]] = []
    changes: dict[str, LabelSet | None] = {}
    # A fingerprint that ended and fires again as a new episode comes as both: Alertmanager
    # holds one alert per label set, which the new episode continues.
    again = {a.fingerprint for a in msg.alerts if a.status == "firing"}
    for a in msg.alerts:
        if a.status != "firing" and a.fingerprint in again:
            continue
        entry = am_alert(a, now, resolve_timeout_s)
        body.append(entry)
        old = told.get(a.fingerprint)
        new = _key(entry["labels"])
        if old is not None and old != new:
            body.append({**entry, "labels": dict(old), "endsAt": rfc3339(max(now, a.starts_at))})
        changes[a.fingerprint] = new if a.status == "firing" else None
    return body, changes


def statuses(receiver: str, url: str, alerts: Iterable[Any], told: dict[str, LabelSet],
             now: float) -> dict[str, UpstreamStatus]:
    """Our fingerprint -> what Alertmanager says, from its GET /api/v2/alerts answer. Where it
    holds two label sets of one fingerprint (a level change not yet resolved), the one we
    last told it wins."""
    out: dict[str, UpstreamStatus] = {}
    for item in alerts:
        if not isinstance(item, dict):
            continue
        labels = item.get("labels")
        status = item.get("status")
        if not isinstance(labels, dict) or not isinstance(status, dict):
            continue
        fp = labels.get("fingerprint")
        if not isinstance(fp, str):
            continue
        if fp in out and _key(labels) != told.get(fp):
            continue
        out[fp] = UpstreamStatus(
            receiver, url, str(status.get("state", "")),
            tuple(str(s) for s in status.get("silencedBy") or ()),
            tuple(str(s) for s in status.get("inhibitedBy") or ()), now)
    return out


def _statuses(receiver: str, url: str, data: bytes, told: dict[str, LabelSet],
              now: float) -> dict[str, UpstreamStatus] | str:
    """The read-back answer parsed, or why it could not be."""
    try:
        found = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"not JSON: {type(exc).__name__}"
    if not isinstance(found, list):
        return "alerts that are not a list"
    return statuses(receiver, url, found, told, now)


class AlertmanagerReceiver:
    """A Notifier (and, for the dispatcher, a Refreshes and a ReadsBack). Call aclose() when
    done with it. `clock` gives endsAt: Alertmanager compares it with its wall clock."""

    def __init__(self, name: str, config: AlertmanagerConfig, *,
                 clock: Clock = time.time) -> None:
        self.name = name
        self.config = config
        self.refresh_interval_s = config.refresh_interval_s
        self.urls = [base_url(u) for u in config.urls]
        self._clock = clock
        self._http = HttpClient(config.timeout_s,
                                [v.get_secret_value() for v in config.headers.values()])
        self._told: dict[str, LabelSet] = {}  # fingerprint -> labels Alertmanager has firing
        self._ended: dict[str, float] = {}  # fingerprint -> msg.at of its latest resolve
        self._upstream: dict[str, dict[str, UpstreamStatus]] = {}  # url -> fingerprint -> it
        self.read_errors: dict[str, tuple[str, float]] = {}  # url -> (why, when): last failure

    def _headers(self) -> dict[str, str]:
        h = {k: v.get_secret_value() for k, v in self.config.headers.items()}
        h["content-type"] = "application/json"
        return h

    async def notify(self, msg: Message) -> Delivery:
        now = self._clock()
        for a in msg.resolved:
            self._ended[a.fingerprint] = max(msg.at, self._ended.get(a.fingerprint, msg.at))
        if msg.reason == "refresh":
            msg = self._current(msg)
        body, changes = payload(msg, now, self.config.resolve_timeout_s, self._told)
        data, headers = json_body(body), self._headers()
        got = await asyncio.gather(*(self._post(u, data, headers) for u in self.urls
                                     if body))
        failed = [(u, d) for u, d in zip(self.urls, got, strict=False) if not d.ok]
        if failed:
            detail = "; ".join(f"{u}: {d.detail}" for u, d in failed)
            retry_after = max((d.retry_after_s or 0.0 for _, d in failed), default=0.0)
            return Delivery(ok=False, retry=any(d.retry for _, d in failed),
                            detail=detail[:MAX_DETAIL], retry_after_s=retry_after or None)
        # Only this message's fingerprints: messages of other groups are sent concurrently.
        for fp, labels in changes.items():
            if labels is None:
                self._told.pop(fp, None)
            else:
                self._told[fp] = labels
        if msg.reason == "refresh":
            # A refresh holds everything that fires: what it lacks (muted here, or resolved
            # without a resolve sent) expires in Alertmanager, so it is forgotten here too.
            self._told = {fp: v for fp, v in self._told.items() if fp in changes}
            if self.config.read_back:
                clusters = sorted({a.labels["cluster"] for a in msg.alerts
                                   if "cluster" in a.labels})
                await asyncio.gather(*(self._read_back(u, clusters, now) for u in self.urls))
        return Delivery(ok=True, detail=f"{len(body)} alert(s) to {len(self.urls)} "
                                        f"Alertmanager(s)"[:MAX_DETAIL])

    def _current(self, msg: Message) -> Message:
        """The refresh without alerts a newer message resolved: a refresh slowed by retries
        must not fire again what a resolve sent meanwhile ended."""
        keep = tuple(a for a in msg.alerts if self._ended.get(a.fingerprint, -math.inf) < msg.at)
        # Older refreshes are over (each one's retries end within its interval).
        horizon = msg.at - 2 * self.refresh_interval_s
        self._ended = {fp: at for fp, at in self._ended.items() if at >= horizon}
        return replace(msg, alerts=keep)

    async def _post(self, url: str, data: bytes, headers: dict[str, str]) -> Delivery:
        got = await self._http.post(url + ALERTS_PATH, content=data, headers=headers)
        if isinstance(got, Delivery):
            return got
        if not got.is_success:
            return failure(got, self._http.secrets)
        return Delivery(ok=True, detail=f"HTTP {got.status_code}")

    async def _read_back(self, url: str, clusters: list[str], now: float) -> None:
        """Best effort: a failed read keeps the last answer (its checked_at says how old) and
        is logged and kept in `read_errors`, never a failed delivery."""
        matchers = ['fingerprint=~".+"']
        if len(clusters) == 1:
            matchers.append(f"cluster={json.dumps(clusters[0])}")  # quoted and escaped
        got = await self._http.request("GET", url + ALERTS_PATH,
                                       limit=self.config.read_back_max_bytes,
                                       params={"filter": matchers}, headers=self._headers())
        if isinstance(got, Delivery):
            why = got.detail
        elif not got.is_success:
            why = failure(got, self._http.secrets).detail
        else:
            # Megabytes of JSON: parsed off the event loop that sends every other message.
            found = await asyncio.to_thread(_statuses, self.name, url, got.content,
                                            dict(self._told), now)
            why = found if isinstance(found, str) else ""
            if not isinstance(found, str):
                self._upstream[url] = found
                self.read_errors.pop(url, None)
                return
        log.warning("alertmanager %s: reading alerts back from %s failed: %s", self.name, url,
                    why)
        self.read_errors[url] = (why[:MAX_DETAIL], now)

    def upstream(self, fingerprint: str) -> list[UpstreamStatus]:
        """What each Alertmanager said of the alert at the last read-back (none if absent)."""
        return [s for m in list(self._upstream.values()) if (s := m.get(fingerprint))]

    async def aclose(self) -> None:
        await self._http.aclose()
