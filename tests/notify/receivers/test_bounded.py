"""Receivers against a broken or hostile far end on loopback: a 500 with a 50 MB answer, a
127 MB read-back of /api/v2/alerts. Every answer is read up to a bound and refused beyond it
with the error kept for that receiver; memory stays bounded (traced allocations, the server's
own filler block included), and a served app's /healthz answers meanwhile."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.notify.message import Delivery
from service.notify.receivers.alertmanager import AlertmanagerConfig, AlertmanagerReceiver
from service.notify.receivers.webhook import WebhookConfig, WebhookReceiver
from service.settings import Settings, StorageSettings
from tests.notify.receivers.samples import message, run
from tests.notify.receivers.servers import HttpRecorder, Reply
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock

MB = 1024 * 1024


def peak_mb(fn: Callable[[], object]) -> tuple[object, float]:
    tracemalloc.start()
    try:
        got = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return got, peak / MB


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_500_with_50_mb_is_refused_unread(chunked: bool) -> None:
    with HttpRecorder(default=Reply(500, size=50 * MB, chunked=chunked)) as srv:
        hook = WebhookReceiver("hook", WebhookConfig.model_validate({"url": srv.url}))

        async def go() -> Delivery:
            try:
                return await hook.notify(message())
            finally:
                await hook.aclose()

        got, peak = peak_mb(lambda: run(go()))
        flooded = srv.flooded
    assert got == Delivery(ok=False, retry=True, detail="HTTP 500: answer over 64 KiB, refused")
    assert peak < 8, f"{peak:.1f} MiB traced while a 50 MB answer came in"
    assert flooded < 50 * MB  # the client stopped reading, so the server stopped writing


def test_a_2xx_over_the_bound_still_counts_as_accepted() -> None:
    with HttpRecorder(default=Reply(200, size=MB)) as srv:
        hook = WebhookReceiver("hook", WebhookConfig.model_validate({"url": srv.url}))

        async def go() -> Delivery:
            try:
                return await hook.notify(message())
            finally:
                await hook.aclose()

        got = run(go())
    assert got == Delivery(ok=True, detail="HTTP 200: answer over 64 KiB, refused")


def test_a_127_mb_read_back_is_refused_and_kept_as_the_receivers_error() -> None:
    with HttpRecorder([Reply(200)], default=Reply(200, size=127 * MB, chunked=True)) as srv:
        am = AlertmanagerReceiver("am", AlertmanagerConfig.model_validate({"urls": [srv.url]}))

        async def go() -> Delivery:
            try:
                return await am.notify(message(reason="refresh"))
            finally:
                await am.aclose()

        got, peak = peak_mb(lambda: run(go()))
        methods = [r.method for r in srv.requests]
    assert isinstance(got, Delivery) and got.ok  # the post went through; the read did not
    assert methods == ["POST", "GET"]
    assert peak < 24, f"{peak:.1f} MiB traced while a 127 MB read-back came in"
    why, _ = am.read_errors[srv.url]
    assert why == "HTTP 200: answer over 8 MiB, refused"
    assert am.upstream("fp-node-7-gpu3") == []


def test_a_read_back_that_is_not_json_is_an_error_not_a_crash() -> None:
    with HttpRecorder([Reply(200), Reply(200, "<html>proxy error</html>")]) as srv:
        am = AlertmanagerReceiver("am", AlertmanagerConfig.model_validate({"urls": [srv.url]}))

        async def go() -> Delivery:
            try:
                return await am.notify(message(reason="refresh"))
            finally:
                await am.aclose()

        assert run(go()).ok
    assert am.read_errors[srv.url][0] == "not JSON: JSONDecodeError"


@pytest.mark.slow
def test_a_served_app_answers_healthz_while_its_alertmanager_floods(tmp_path: Path) -> None:
    with HttpRecorder(default=Reply(500, size=50 * MB, chunked=True)) as srv:
        settings = Settings(storage=StorageSettings(data_dir=tmp_path / "data"), notify={
            "receivers": [{"name": "am", "type": "alertmanager",
                           "config": {"urls": [srv.url], "refresh_interval_s": 30}}],
            # Retries end within the group's interval: one second here.
            "route": {"receiver": "am", "group_by": ["node"], "group_wait_s": 0,
                      "group_interval_s": 1},
            "retry_initial_s": 0.2})
        fleet, clock = Fleet({"n001": 2}), ManualClock(T0)
        app = create_app(settings, clock=clock, schedule=False,
                         collectors=[FleetCollector(fleet, clock)])
        with TestClient(app) as client:
            st = app.state.gpuhealth
            sender = st.pipeline.notification.sender
            fleet.set("n001:gpu1", "ecc_dbe_volatile", 1)  # a hard fault: level 3
            for _ in range(3):
                st.scheduler.collect_once("fleet")
                st.scheduler.score_once()
                clock.now += STEP
                assert client.get("/healthz").status_code == 200  # while sends are under way
            assert sender.wait(60.0)
            assert client.get("/healthz").status_code == 200
            sent = sender.drain()
    failed = [d for d in sent if not d.delivery.ok]
    assert failed and all("answer over 64 KiB, refused" in d.delivery.detail for d in failed)
    assert sender.failed_by[("am", "alertmanager")] == len(failed)
