"""Pushing gzip line protocol to the service or to InfluxDB, and what to do with the answer."""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from enum import Enum

import httpx


class Outcome(Enum):
    SENT = "sent"  # stored (204), or stored in part with bad lines named (400): do not resend
    RETRY = "retry"  # target down, overloaded or refusing us for now: keep and back off
    DROP = "drop"  # the segment itself can never be stored (413): resending cannot help


@dataclass(frozen=True, slots=True)
class PushResult:
    outcome: Outcome
    status: int | None
    detail: str


def outcome_of(r: httpx.Response, body: bytes | None = None) -> PushResult:
    """What an InfluxDB-style write answer means for the segment sent. A 400 saying the body
    arrived cut short is a transport fault when the segment itself is whole gzip: send it again
    (what was kept merges, last write wins). A segment cut on our own disk stays sent."""
    if r.status_code in (200, 204):
        return PushResult(Outcome.SENT, r.status_code, "")
    if r.status_code == 400:
        if body is not None and _said_truncated(r) and _whole_gzip(body):
            return PushResult(Outcome.RETRY, 400, "body arrived cut short: " + r.text[:400])
        return PushResult(Outcome.SENT, 400, r.text[:500])
    if r.status_code == 413:
        return PushResult(Outcome.DROP, 413, r.text[:500])
    # 401/403 (a token being rotated), 404 (a proxy or database mid-deploy), 429 and 5xx: wait.
    return PushResult(Outcome.RETRY, r.status_code, r.text[:500])


def _said_truncated(r: httpx.Response) -> bool:
    try:
        said = r.json()
    except ValueError:
        return False
    return isinstance(said, dict) and said.get("truncated") is True


def _whole_gzip(body: bytes) -> bool:
    try:
        gzip.decompress(body)
    except (OSError, EOFError, zlib.error):
        return False
    return True


class Pusher:
    """POSTs one gzip segment. A 400 is a partial write, as InfluxDB answers it: the good lines
    were kept, so the segment is done (a segment resent after a lost reply merges there, last
    write wins, so nothing is doubled)."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 10.0,
                 client: httpx.Client | None = None) -> None:
        self.url = url
        self.headers = {"Content-Encoding": "gzip", "Content-Type": "text/plain; charset=utf-8"}
        if token:
            self.headers["Authorization"] = f"Token {token}"
        self.client = client or httpx.Client(timeout=timeout_s)

    def push(self, body: bytes) -> PushResult:
        try:
            r = self.client.post(self.url, content=body, headers=self.headers)
        except httpx.HTTPError as exc:
            return PushResult(Outcome.RETRY, None, f"{type(exc).__name__}: {exc}")
        return outcome_of(r, body)

    def close(self) -> None:
        self.client.close()
