"""A Redfish client for one BMC: JSON resources by `@odata.id`, with HTTP Basic or a Redfish
session (DSP0266 "Authentication": POST /redfish/v1/SessionService/Sessions with UserName and
Password; the service answers an `X-Auth-Token` header and the session's `Location`, deleted
on close). A session expired under us (401) is opened again once.

Paths come from the BMC's own answers, so each is checked before use: under /redfish/v1/, no
dot segments, no other host (a supply's `Links.Outlet` may name a PDU elsewhere), nothing a
request line could be split on. The credentials never reach a message: errors name the BMC's
address, the path and the status.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import ssl
from typing import Any, Literal

from collectors.redfish.http import Connection, HttpError, Response
from collectors.redfish.secret import Credentials, Secret
from collectors.redfish.targets import Bmc

SESSIONS = "/redfish/v1/SessionService/Sessions"
_PATH = re.compile(r"/redfish/v1(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]*)*")
Auth = Literal["basic", "session"]


class RedfishError(Exception):
    """The BMC refused or failed a request; `status` is the HTTP status when it answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def safe_path(link: Any) -> str | None:
    """The path an @odata.id names, without its fragment, or None when it is not a path of
    this service that is safe to request."""
    if not isinstance(link, str) or len(link) > 1000:
        return None
    path = link.split("#", 1)[0].rstrip("/") or "/redfish/v1"
    if _PATH.fullmatch(path) is None or "/../" in f"{path}/" or "/./" in f"{path}/":
        return None
    return path


def tls_context(verify: bool | str) -> ssl.SSLContext:
    """verify: True (the system's CAs), a CA bundle file, or False (BMCs often serve a
    self-signed certificate; then the link is encrypted but the BMC is not authenticated)."""
    if verify is False:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)


class RedfishClient:
    def __init__(self, bmc: Bmc, credentials: Credentials | None, *, auth: Auth = "session",
                 tls: ssl.SSLContext | None = None, max_bytes: int = 4_000_000) -> None:
        self.bmc = bmc
        self.auth = auth
        self._credentials = credentials
        self._token: Secret | None = None
        self._session_path: str | None = None
        self._conn = Connection(bmc.host, bmc.port, tls if bmc.scheme == "https" else None,
                                bmc.authority, max_bytes=max_bytes)
        self.requests = 0  # sent, for the benchmark

    def __repr__(self) -> str:
        return f"RedfishClient({self.bmc.url}, auth={self.auth})"

    async def get(self, path: str, etag: str | None = None) -> tuple[Any, str | None]:
        """(the JSON resource, its ETag); (None, etag) when `etag` still matches (304)."""
        headers = [("If-None-Match", etag)] if etag else []
        r = await self._authed("GET", path, headers)
        if r.status == 304:
            return None, etag
        if r.status != 200:
            raise RedfishError(f"{self.bmc.authority} GET {path}: HTTP {r.status}", r.status)
        try:
            return json.loads(r.body), r.headers.get("etag")
        except (ValueError, UnicodeDecodeError):
            raise RedfishError(f"{self.bmc.authority} GET {path}: not JSON", r.status) from None

    async def close(self) -> None:
        """Log the session out (best effort: the BMC expires it anyway) and close."""
        if self._session_path and self._token is not None:
            with contextlib.suppress(HttpError, OSError, TimeoutError):
                await self._request("DELETE", self._session_path, self._auth_headers())
        self._token = self._session_path = None
        await self._conn.close()

    def drop(self) -> None:
        """Close the connection now, keeping the session (after a timeout)."""
        self._conn.drop()

    async def _authed(self, method: str, path: str, headers: list[tuple[str, str]]) -> Response:
        if self.auth == "session" and self._token is None and self._credentials is not None:
            await self._login()
        r = await self._request(method, path, headers + self._auth_headers())
        if r.status == 401 and self.auth == "session" and self._credentials is not None:
            self._token = None  # expired or revoked: one new session, then give up
            await self._login()
            r = await self._request(method, path, headers + self._auth_headers())
        if r.status in (401, 403):
            raise RedfishError(f"{self.bmc.authority} {method} {path}: HTTP {r.status} "
                               "(credentials refused)", r.status)
        return r

    async def _login(self) -> None:
        assert self._credentials is not None
        body = json.dumps({"UserName": self._credentials.username,
                           "Password": self._credentials.password.reveal()}).encode()
        r = await self._request("POST", SESSIONS, [("Content-Type", "application/json")], body)
        token = r.headers.get("x-auth-token")
        if r.status not in (200, 201) or not token:
            why = "no X-Auth-Token" if r.status in (200, 201) else f"HTTP {r.status}"
            raise RedfishError(f"{self.bmc.authority}: session login refused ({why})", r.status)
        self._token = Secret(token)
        location = r.headers.get("location", "")
        if "://" in location:  # an absolute URL: its path
            location = "/" + location.split("://", 1)[1].partition("/")[2]
        self._session_path = safe_path(location)

    def _auth_headers(self) -> list[tuple[str, str]]:
        if self._token is not None:
            return [("X-Auth-Token", self._token.reveal())]
        if self._credentials is not None and self.auth == "basic":
            pair = f"{self._credentials.username}:{self._credentials.password.reveal()}"
            return [("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())]
        return []

    async def _request(self, method: str, path: str, headers: list[tuple[str, str]],
                       body: bytes = b"") -> Response:
        self.requests += 1
        return await self._conn.request(method, path, [("Accept", "application/json"),
                                                       *headers], body)
