"""What the receivers share: a strict config base, secret redaction so a detail never carries
a key or token, and for the HTTP ones one lazily created client, bounded reads of what the far
end answers (a broken or hostile server's 50 MB answer is refused after `MAX_ANSWER` bytes,
never held in memory) and the retry mapping (retry only on 429, 5xx and network errors or
timeouts, honouring Retry-After)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Iterable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field

from service.notify.message import Delivery

MAX_DETAIL = 300
MAX_ANSWER = 64 * 1024  # what a post's answer may hold: a status, an id, an error message


class TooLarge(Exception):
    """The far end answered more than we read; nothing of it was kept."""

    def __init__(self, status: int, limit: int) -> None:
        super().__init__(f"HTTP {status}: answer over {_size(limit)}, refused")
        self.status = status


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n // 1024} KiB"


async def read_capped(resp: httpx.Response, limit: int) -> bytes:
    """The body of a streamed response, read in chunks; TooLarge past `limit` bytes (a
    declared length over it is refused before a byte is read)."""
    declared = resp.headers.get("content-length", "")
    if (declared.isascii() and declared.isdigit()) and int(declared) > limit:
        raise TooLarge(resp.status_code, limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.aiter_raw():
        size += len(chunk)
        if size > limit:
            raise TooLarge(resp.status_code, limit)
        chunks.append(chunk)
    return b"".join(chunks)


class ReceiverConfig(BaseModel):
    # A misspelt option must fail at load time, not silently fall back to a default.
    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(default=10.0, gt=0, le=120)


def base_url(url: AnyHttpUrl) -> str:
    """A configured service root without the trailing slash pydantic adds to a bare host."""
    return str(url).rstrip("/")


def json_safe(obj: Any) -> Any:
    """Non-finite floats become null: strict JSON parsers reject NaN and Infinity."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


def json_body(obj: Any) -> bytes:
    return json.dumps(json_safe(obj), separators=(",", ":"), allow_nan=False,
                      default=str).encode()


def redact(text: str, secrets: Iterable[str]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as delta-seconds or an HTTP-date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # `²` is a digit to isdigit, not to float
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def response_message(resp: httpx.Response) -> str:
    """What the far end said went wrong: its JSON `message` (+ `errors`), else the text."""
    try:
        body: Any = resp.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if isinstance(body, Mapping):
        parts = [str(body[k]) for k in ("message", "detail", "error") if body.get(k)]
        errors = body.get("errors")
        if isinstance(errors, list) and errors:
            parts.append("; ".join(str(e) for e in errors))
        if parts:
            return ": ".join(parts)
    return " ".join(resp.text.split())


def failure(resp: httpx.Response, secrets: Iterable[str]) -> Delivery:
    """A non-success answer: retry on 429 and 5xx, never on other 4xx (a bad request stays
    bad)."""
    retry = resp.status_code == 429 or resp.status_code >= 500
    said = redact(response_message(resp), secrets)
    detail = f"HTTP {resp.status_code}" + (f": {said}" if said else "")
    return Delivery(ok=False, retry=retry, detail=detail[:MAX_DETAIL],
                    retry_after_s=retry_after_s(resp.headers.get("retry-after")) if retry
                    else None)


def _too_large(resp: httpx.Response, big: TooLarge, secrets: Iterable[str]) -> Delivery:
    status = resp.status_code
    if 200 <= status < 300:  # accepted: sending it again would be a duplicate
        return Delivery(ok=True, detail=str(big)[:MAX_DETAIL])
    retry = status == 429 or status >= 500
    return Delivery(ok=False, retry=retry, detail=redact(str(big), secrets)[:MAX_DETAIL],
                    retry_after_s=retry_after_s(resp.headers.get("retry-after")) if retry
                    else None)


def network_failure(exc: BaseException, secrets: Iterable[str]) -> Delivery:
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        what = "timed out"
    else:
        what = f"network error: {type(exc).__name__}"
        if str(exc):
            what += f": {exc}"
    return Delivery(ok=False, retry=True, detail=redact(what, secrets)[:MAX_DETAIL])


class HttpClient:
    """One AsyncClient per receiver, created on first use (inside the running loop)."""

    def __init__(self, timeout_s: float, secrets: Iterable[str] = ()) -> None:
        self.timeout_s = timeout_s
        self.secrets = tuple(s for s in secrets if s)
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        # A client's connections belong to the loop that opened them.
        if self._client is None or self._client.is_closed or self._loop is not loop:
            self._loop = loop
            # No redirects: a 3xx to elsewhere must not carry our credentials along.
            # Identity encoding: an answer is bounded by what comes over the wire, and no
            # small compressed answer inflates past the bound.
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s),
                                             follow_redirects=False,
                                             headers={"accept-encoding": "identity"})
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            if self._loop is asyncio.get_running_loop():
                await client.aclose()

    async def post(self, url: str, *, limit: int = MAX_ANSWER,
                   **kwargs: Any) -> httpx.Response | Delivery:
        """The response (its body read, at most `limit` bytes), or a Delivery for a network
        error, a timeout or an answer over the limit: that one is refused unread, a failure
        retried as its status says, except that a 2xx still counts as accepted. The overall
        deadline bounds a server that trickles bytes under the per-read timeout."""
        return await self.request("POST", url, limit=limit, **kwargs)

    async def request(self, method: str, url: str, *, limit: int,
                      **kwargs: Any) -> httpx.Response | Delivery:
        try:
            async with asyncio.timeout(self.timeout_s * 2), \
                    self.client.stream(method, url, **kwargs) as resp:
                try:
                    body = await read_capped(resp, limit)
                except TooLarge as big:
                    return _too_large(resp, big, self.secrets)
        except (httpx.TransportError, TimeoutError, OSError) as exc:
            return network_failure(exc, self.secrets)
        # Decoded as a whole again: the stream was read raw, so any content-encoding stays.
        headers = [(k, v) for k, v in resp.headers.multi_items()
                   if k.lower() not in ("content-encoding", "transfer-encoding")]
        return httpx.Response(resp.status_code, headers=headers, content=body,
                              request=resp.request)
