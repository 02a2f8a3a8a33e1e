"""The InfluxDB sender thread outlives what goes wrong at its edges: InfluxDB unreachable as
the service starts (the schema step then records the error on a spooler that must already
exist) and an unexpected exception in a delivery. A dead sender would leave every later point
spooled on disk with nobody to send it."""

from __future__ import annotations

import threading
from pathlib import Path

from collectors.agent.push import Outcome, PushResult
from collectors.agent.spool import Spool
from service.history.influx.client import InfluxClient
from service.history.influx.settings import InfluxSettings
from service.history.influx.sink import InfluxSink
from service.history.influx.spooler import Spooler
from tests.influx.server import free_port


def _until(cond: object, timeout_s: float = 10.0) -> bool:
    done = threading.Event()
    for _ in range(int(timeout_s / 0.02)):
        if cond():  # type: ignore[operator]
            return True
        done.wait(0.02)
    return bool(cond())  # type: ignore[operator]


def test_influxdb_down_at_start_leaves_the_sender_alive(tmp_path: Path) -> None:
    cfg = InfluxSettings(url=f"http://127.0.0.1:{free_port()}", database="down",
                         timeout_s=1.0)
    sinks = [InfluxSink(InfluxClient(cfg), Spool(tmp_path / f"spool{i}", 1 << 20),
                        manage_schema=True, backoff_s=(0.02, 0.05)) for i in range(20)]
    try:
        for sink in sinks:  # the race is per construction: many of them
            assert _until(lambda s=sink: "unreachable" in s.spooler.stats.last_error), \
                sink.spooler.stats
            thread = sink.spooler._thread
            assert thread is not None and thread.is_alive()
    finally:
        for sink in sinks:
            sink.close()


def test_an_unexpected_error_in_a_delivery_is_logged_and_retried(tmp_path: Path) -> None:
    sent: list[bytes] = []
    failures = iter([RuntimeError("bug in a send")])

    def send(body: bytes) -> PushResult:
        for exc in failures:
            raise exc
        sent.append(body)
        return PushResult(Outcome.SENT, 204, "")

    spooler = Spooler(Spool(tmp_path / "spool", 1 << 20), send, backoff_s=(0.01, 0.02))
    try:
        spooler.put(["m v=1 1"])
        assert spooler.flush(10)
        assert len(sent) == 1
        assert "RuntimeError: bug in a send" in spooler.stats.last_error
        assert spooler._thread is not None and spooler._thread.is_alive()
    finally:
        spooler.close()
