"""Slow and idle clients cannot hold the real server (`gpuhealth serve`, uvicorn on loopback):
at a low open-file limit, more connections trickling their headers than it has descriptors for
leave /healthz and writes answering, and each such connection is closed, by the header or body
deadline or to make room. Before, a trickling connection was kept for ever and, past the file
limit, nothing new was accepted."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from bench.fuzz_clients import SlowClients, hostile_clients
from tests.support.served import Served

LIMITS = {"header_timeout_s": 2.0, "body_timeout_s": 2.0, "body_min_bytes_per_s": 500.0}
LINE = "gpu,host=slow01,gpu=0 gpu_temp=55.5"


def _probe_and_write(url: str) -> list[int]:
    codes = []
    with httpx.Client(timeout=10.0) as c:
        for _ in range(5):
            codes.append(c.get(f"{url}/healthz").status_code)
        codes.append(c.post(f"{url}/write", content=f"{LINE} {time.time_ns()}").status_code)
    return codes


@pytest.mark.slow
def test_more_slow_header_clients_than_descriptors_starve_nothing(tmp_path: Path) -> None:
    with Served(tmp_path, {"service": LIMITS}, nofile=256) as svc, \
            SlowClients("127.0.0.1", svc.port, n=300, mode="headers", every_s=0.5) as slow:
        codes = _probe_and_write(svc.url)
        assert codes == [200] * 5 + [204], codes
        # Each is closed: to make room for a newer one, or at its header deadline.
        assert slow.wait_closed(timeout_s=30), f"{slow.open_now} of {slow.opened} still open"
        assert slow.opened + slow.refused == 300
        assert _probe_and_write(svc.url) == [200] * 5 + [204]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["headers", "idle", "body"])
def test_a_request_that_never_finishes_is_closed_at_its_deadline(tmp_path: Path,
                                                                 mode: str) -> None:
    # Fewer than the connection cap: only the deadlines can close these.
    with Served(tmp_path, {"service": LIMITS}) as svc, \
            SlowClients("127.0.0.1", svc.port, n=20, mode=mode, every_s=0.5) as slow:  # type: ignore[arg-type]
        assert slow.opened == 20
        assert slow.wait_closed(timeout_s=30), f"{slow.open_now} of 20 still open"
        assert _probe_and_write(svc.url) == [200] * 5 + [204]
        if mode != "idle":  # idle ones are closed by uvicorn's own keep-alive timer
            why = "header_timeout" if mode == "headers" else "body_timeout"
            assert _closed(svc.url)[why] >= 20


def _closed(url: str) -> dict[str, float]:
    """gpuhealth_http_connections_closed by reason, read from /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        if line.startswith("gpuhealth_http_connections_closed_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.mark.slow
def test_oversized_headers_are_refused(tmp_path: Path) -> None:
    with Served(tmp_path) as svc:
        r = httpx.get(f"{svc.url}/healthz", headers={"X-Big": "a" * 100_000}, timeout=10)
        assert r.status_code == 400
        assert httpx.get(f"{svc.url}/healthz", timeout=10).status_code == 200
        assert _closed(svc.url)["headers_too_large"] == 1


@pytest.mark.slow
def test_the_fuzz_benchmarks_hostile_clients_leave_the_service_answering(tmp_path: Path) -> None:
    settings = {"service": LIMITS, "ingest": {"tokens": ["agent-token"]},
                "api": {"auth_failures_burst": 5}}
    with Served(tmp_path, settings) as svc:
        got = hostile_clients(svc.url, n_slow=60, n_auth=60, close_within_s=30)
        assert got["slow_all_closed"] and got["slow_opened"] == 60, got
        assert set(got["healthz"]) == {200} and got["auth_5xx"] == 0, got
        assert set(got["auth"]) <= {401, 429} and got["auth"].get(429), got
