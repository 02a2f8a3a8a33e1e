"""InfluxDB over its v1-compatible HTTP API: gzip line protocol to `/write`, InfluxQL to `/query`.
InfluxDB 1.x, 2.x (v1 compatibility with a DBRP mapping) and 3.x all serve these two endpoints
(https://docs.influxdata.com/influxdb/v1/tools/api/, and the v1 compatibility APIs of 2.x and 3.x),
so one client reaches all three; only authentication differs (`auth`: none, basic user/password, or
a token)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from collectors.agent.push import Outcome, PushResult, outcome_of
from service.history.influx.settings import InfluxSettings


class InfluxError(Exception):
    """A query InfluxDB refused or could not answer (the message is InfluxDB's own)."""


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    tags: dict[str, str]
    columns: list[str]
    values: list[list[Any]] = field(default_factory=list)


class InfluxClient:
    def __init__(self, cfg: InfluxSettings, client: httpx.Client | None = None) -> None:
        if not cfg.url:
            raise ValueError("storage.influxdb.url is not set")
        self.cfg = cfg
        self.base = cfg.url.rstrip("/")
        headers: dict[str, str] = {}
        auth: httpx.BasicAuth | None = None
        if cfg.auth == "token":
            headers["Authorization"] = f"Token {cfg.token.get_secret_value()}"
        elif cfg.auth == "basic":
            auth = httpx.BasicAuth(cfg.username, cfg.password.get_secret_value())
        self.http = client or httpx.Client(timeout=cfg.timeout_s)
        self._headers = headers
        self._auth = auth

    def _params(self, **extra: str) -> dict[str, str]:
        p = {"db": self.cfg.database, **extra}
        if self.cfg.retention_policy:
            p["rp"] = self.cfg.retention_policy
        return p

    def write(self, gzip_body: bytes) -> PushResult:
        """One gzip line-protocol body. A 400 is a partial write (InfluxDB kept the good
        points and named the bad), so it is done; network errors, 401/403/404 (a token or
        database being set up) and 5xx are retried; 413 never can succeed."""
        try:
            r = self.http.post(f"{self.base}/write", params=self._params(precision="ns"),
                               content=gzip_body, auth=self._auth or httpx.USE_CLIENT_DEFAULT,
                               headers={**self._headers, "Content-Encoding": "gzip",
                                        "Content-Type": "text/plain; charset=utf-8"})
        except httpx.HTTPError as exc:
            return PushResult(Outcome.RETRY, None, f"{type(exc).__name__}: {exc}")
        return outcome_of(r)

    def query(self, q: str, *, write: bool = False, epoch: str = "ms",
              database: bool = True) -> list[list[Series]]:
        """Run InfluxQL; one list of series per statement. Reads go by GET, statements that
        change the server by POST (InfluxDB 1.x refuses those over GET)."""
        params = self._params(q=q, epoch=epoch) if database else {"q": q, "epoch": epoch}
        kw: dict[str, Any] = {"headers": self._headers,
                              "auth": self._auth or httpx.USE_CLIENT_DEFAULT}
        try:
            if write:
                r = self.http.post(f"{self.base}/query", data=params, **kw)
            else:
                r = self.http.get(f"{self.base}/query", params=params, **kw)
        except httpx.HTTPError as exc:
            raise InfluxError(f"InfluxDB at {self.base} unreachable: {exc}") from exc
        try:
            body = r.json()
        except ValueError:
            raise InfluxError(f"InfluxDB answered {r.status_code}: {r.text[:300]}") from None
        if r.status_code >= 400 or "error" in body:
            raise InfluxError(str(body.get("error", f"status {r.status_code}")))
        out: list[list[Series]] = []
        for res in body.get("results", []):
            if "error" in res:
                raise InfluxError(f"{res['error']} (in: {q[:200]})")
            out.append([Series(s.get("name", ""), s.get("tags") or {}, s.get("columns", []),
                               s.get("values") or []) for s in res.get("series", [])])
        return out

    def query_csv(self, q: str, *, epoch: str = "s") -> bytes:
        """A read as CSV (InfluxDB 1.x, `Accept: application/csv`): parsed without a Python
        object per value. InfluxDB answers a failed statement with an empty body, so an empty
        answer is no rows only after `query` (JSON) has said so; the caller asks."""
        params = self._params(q=q, epoch=epoch)
        try:
            r = self.http.get(f"{self.base}/query", params=params,
                              headers={**self._headers, "Accept": "application/csv"},
                              auth=self._auth or httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as exc:
            raise InfluxError(f"InfluxDB at {self.base} unreachable: {exc}") from exc
        if r.status_code >= 400:
            raise InfluxError(f"InfluxDB answered {r.status_code}: {r.text[:300]}")
        return r.content

    def ping(self) -> bool:
        try:
            return self.http.get(f"{self.base}/ping", headers=self._headers).status_code == 204
        except httpx.HTTPError:
            return False

    def close(self) -> None:
        self.http.close()
