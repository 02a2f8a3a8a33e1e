"""The soak's Alertmanager side: a real Alertmanager (Debian's `prometheus-alertmanager`, the
tests' loopback wrapper) that the service's `alertmanager` receiver posts to, and a probe that
reads, every `PERIOD_S`, the service's firing alerts, then Alertmanager's `/api/v2/alerts`,
then the service's again, so that an alert is compared only where the service said the same
of it on both sides of Alertmanager's answer (a tick between the reads never counts).

Alertmanager's API leaves out the alerts it has resolved (endsAt passed): an alert absent from
it is resolved there, or never arrived."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from service.api.timefmt import parse_instant

log = logging.getLogger(__name__)
PERIOD_S = 10.0  # issue 28: Alertmanager checked through its API every 10 s


@dataclass(frozen=True, slots=True)
class Firing:
    """One alert the service had firing at the same level on both sides of the read."""

    id: int
    fingerprint: str
    alertname: str
    entity: str
    level: int
    started_at: float


@dataclass(frozen=True, slots=True)
class AmAlert:
    state: str  # active, suppressed or unprocessed
    level: int  # its `level` label (0: none)
    ends_at: float
    silenced_by: tuple[str, ...] = ()
    inhibited_by: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AmSample:
    at: float  # when Alertmanager answered
    pid: int | None  # the service's process at the time
    firing: tuple[Firing, ...]
    am: dict[str, list[AmAlert]] = field(default_factory=dict)  # by our fingerprint

    def present(self, fingerprint: str, level: int | None = None) -> bool:
        """Alertmanager holds it unresolved (at `level`, where given)."""
        return any(a.ends_at > self.at and (level is None or a.level == level)
                   for a in self.am.get(fingerprint, []))


def _firing(client: httpx.Client, url: str) -> dict[str, tuple[Any, ...]] | None:
    out: dict[str, tuple[Any, ...]] = {}
    cursor: str | None = None
    while True:
        try:
            r = client.get(f"{url}/v1/alerts", params={
                "state": "firing", "limit": 1000, **({"cursor": cursor} if cursor else {})})
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        body = r.json()
        for a in body["alerts"]:
            out[a["fingerprint"]] = (int(a["id"]), a["alertname"], a["entity"], int(a["level"]),
                                     parse_instant(a["started_at"]))
        cursor = body.get("next_cursor")
        if cursor is None:
            return out


def am_alerts(client: httpx.Client, url: str) -> dict[str, list[AmAlert]] | None:
    try:
        r = client.get(f"{url}/api/v2/alerts")
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    out: dict[str, list[AmAlert]] = {}
    for a in r.json():
        labels = a.get("labels", {})
        fp = labels.get("fingerprint")
        if not fp:
            continue
        st = a.get("status", {})
        level = labels.get("level", "0")
        out.setdefault(fp, []).append(AmAlert(
            str(st.get("state", "")), int(level) if level.isdigit() else 0,
            parse_instant(a["endsAt"]), tuple(st.get("silencedBy") or ()),
            tuple(st.get("inhibitedBy") or ())))
    return out


def _once(client: httpx.Client, service_url: str, am_url: str,
          pid: Callable[[], int | None]) -> AmSample | None:
    """One comparison; None where a side did not answer (or the service restarted)."""
    life = pid()
    before = _firing(client, service_url)
    am = am_alerts(client, am_url)
    at = time.time()
    after = _firing(client, service_url)
    if before is None or am is None or after is None or pid() != life:
        return None
    steady = tuple(Firing(v[0], fp, v[1], v[2], v[3], v[4]) for fp, v in before.items()
                   if after.get(fp) == v)
    return AmSample(at, life, steady, am)


def read_once(service_url: str, am_url: str, pid: Callable[[], int | None]) -> AmSample | None:
    with httpx.Client(timeout=15.0) as client:
        return _once(client, service_url, am_url, pid)


class AmProbe:
    def __init__(self, service_url: str, am_url: str, pid: Callable[[], int | None]) -> None:
        self.service_url, self.am_url, self.pid = service_url, am_url, pid
        self.client = httpx.Client(timeout=5.0)
        self.samples: list[AmSample] = []
        self.missed = 0  # rounds where one side did not answer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="am-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        self.client.close()

    def once(self) -> AmSample | None:
        return _once(self.client, self.service_url, self.am_url, self.pid)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                got = self.once()
            except (ValueError, KeyError) as exc:  # a malformed answer: counted, never fatal
                log.warning("am probe: %s", exc)
                got = None
            if got is None:
                self.missed += 1
            else:
                self.samples.append(got)
            self._stop.wait(max(0.0, PERIOD_S - (time.monotonic() - t)))

