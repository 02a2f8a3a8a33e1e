"""On the real server (`gpuhealth serve` on loopback): a client hammering with a bad token is
locked out alone, while valid admins, agents and anonymous reads from the same address all
pass; and X-Forwarded-For picks the address charged only when its sender is a trusted proxy.
Before, 20 failures locked the whole address out, and uvicorn believed the header from
loopback by default."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.support.served import MAIN, Served

LINE = "gpu,host=auth01,gpu=0 gpu_temp=51.5"
AGENT = {"Authorization": "Token agent-token"}


def _admin_token(svc: Served) -> str:
    out = subprocess.run([sys.executable, "-c", MAIN, "token", "create", "--config",
                          str(svc.config), "--name", "ops", "--scope", "admin"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


class Hammer(threading.Thread):
    """One bad token, sent again and again until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.codes, self.halt = url, Counter[int](), threading.Event()

    def run(self) -> None:
        bad = {"Authorization": "Bearer ghk_000000000000_" + "x" * 43}
        with httpx.Client(timeout=10) as c:
            while not self.halt.is_set():
                self.codes[c.post(f"{self.url}/v1/breaker/reset", headers=bad).status_code] += 1
                self.halt.wait(0.05)


@pytest.mark.slow
def test_a_bad_token_client_locks_out_only_itself(tmp_path: Path) -> None:
    settings = {"api": {"auth_failures_burst": 5, "auth_failures_per_min": 10},
                "ingest": {"tokens": ["agent-token"]}}
    with Served(tmp_path, settings) as svc:
        admin = {"Authorization": f"Bearer {_admin_token(svc)}"}
        hammer = Hammer(svc.url)
        hammer.start()
        try:
            deadline = time.monotonic() + 30
            while hammer.codes[429] == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert hammer.codes[429] > 0, hammer.codes
            codes: Counter[str] = Counter()
            with httpx.Client(base_url=svc.url, timeout=10) as c:
                for i in range(28):
                    if i % 3 == 0:
                        r = c.post("/v1/breaker/reset", headers=admin)
                    else:
                        r = c.get("/v1/alerts", headers=admin)
                    codes[f"admin {r.status_code}"] += 1
                    codes[f"anonymous {c.get('/v1/alerts').status_code}"] += 1
                    r = c.post("/write", content=f"{LINE} {time.time_ns()}", headers=AGENT)
                    codes[f"agent {r.status_code}"] += 1
        finally:
            hammer.halt.set()
            hammer.join()
        assert codes == {"admin 200": 28, "anonymous 200": 28, "agent 204": 28}, codes
        assert set(hammer.codes) == {401, 429} and hammer.codes[401] <= 6, hammer.codes


def _guesses(url: str, forwarded_for: list[str]) -> list[int]:
    """New wrong write tokens, one per X-Forwarded-For given."""
    with httpx.Client(timeout=10) as c:
        return [c.post(f"{url}/write", content=f"{LINE} {time.time_ns()}",
                       headers={"Authorization": f"Token guess-{i}",
                                "X-Forwarded-For": xff}).status_code
                for i, xff in enumerate(forwarded_for)]


@pytest.mark.slow
def test_forwarded_headers_count_only_from_trusted_proxies(tmp_path: Path) -> None:
    settings = {"api": {"auth_failures_burst": 3}, "ingest": {"tokens": ["agent-token"]}}
    a, b = "203.0.113.1", "203.0.113.2"
    with Served(tmp_path / "direct", settings) as svc:  # anyone can write the header
        assert _guesses(svc.url, [a, a, a, b]) == [401, 401, 401, 429]
    trusting = {**settings, "service": {"trusted_proxies": ["127.0.0.1/32"]}}
    with Served(tmp_path / "proxied", trusting) as svc:  # we are the proxy here
        assert _guesses(svc.url, [a, a, a, b, a]) == [401, 401, 401, 401, 429]
