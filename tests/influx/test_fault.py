"""InfluxDB goes away mid-replay while the service keeps running, then comes back: every point
is stored exactly once. And a spool that fills while InfluxDB is away drops its oldest
segments, counted, never the newest."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import pytest

from collectors.agent.spool import Spool
from service.assembly import Wiring
from service.history.influx.client import InfluxClient
from service.history.influx.settings import InfluxSettings
from service.history.influx.sink import InfluxSink
from service.pipeline import build_pipeline
from service.settings import Settings
from tests.influx.server import InfluxServer
from tests.pipeline.builders import T0, Rounds

_db = itertools.count()


def sink_for(srv: InfluxServer, tmp: Path, max_bytes: int = 64 << 20,
             batch_lines: int = 50_000) -> InfluxSink:
    cfg = InfluxSettings(url=srv.url, database=f"f{next(_db)}", raw_retention="INF",
                         timeout_s=10.0)  # a loaded machine answers slowly
    return InfluxSink(InfluxClient(cfg), Spool(tmp / "spool", max_bytes), manage_schema=True,
                      retention=("INF", "400d"), backoff_s=(0.02, 0.2), batch_lines=batch_lines)


def test_influxdb_down_mid_replay_loses_and_doubles_nothing(own_influx: InfluxServer,
                                                            tmp_path: Path) -> None:
    sink = sink_for(own_influx, tmp_path)
    db = sink.client.cfg.database
    p = build_pipeline(Settings(), Wiring.offline(observers=[sink], sinks=[sink], influxdb=False,
                                                  notifiers=None))
    r = Rounds(nodes=2, gpus=4, links=2, ports=1)
    rounds = 60
    try:
        for k in range(rounds):
            if k == 20:
                assert sink.flush(30)
                own_influx.stop()
            if k == 40:
                # 20 rounds arrived while InfluxDB was away: all on disk, none delivered.
                assert sink.spooler.pending() >= 20
                assert not sink.spooler.stats.up
                own_influx.start()
            r.add("n0:gpu1", "ecc_sbe_volatile", 1.0)
            p.process(r.batch(T0 + 5 * k), T0 + 5 * k)
        assert sink.flush(60)
    finally:
        p.close()
    assert sink.spooler.stats.retries > 0
    q = own_influx
    assert q.count("gpu", "gpu_temp", db) == rounds * 8
    # Quiet links are written when they move and every 55 s (docs/influxdb.md): 6 points each
    # over these 300 s, outage or not; every round's GPU point says its links reported.
    assert q.count("nvlink", "nvlink_state", db) == 6 * 16
    assert q.count("gpu", "nvlink_mask", db) == rounds * 8
    assert q.count("ib_port", "ib_state", db) == rounds * 2
    assert q.count("risk", "risk", db, "\"scope\"='gpu'") == rounds * 8
    assert q.count("gpu_rate", "ecc_sbe_volatile", db) == (rounds - 1) * 8
    # In order, with no gap: the counter's cumulative values are 1..60 at the right times.
    s = q.query('SELECT "ecc_sbe_volatile" FROM "gpu" WHERE "host"=\'n0\' AND "gpu"=\'1\'', db)
    vals = s[0]["values"]
    assert isinstance(vals, list)
    assert [v[1] for v in vals] == list(range(1, rounds + 1))


def test_spool_full_drops_the_oldest_segments_and_says_so(
        own_influx: InfluxServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    own_influx.stop()  # away from the start
    sink = sink_for(own_influx, tmp_path, max_bytes=6_000, batch_lines=1_000)
    db = sink.client.cfg.database
    p = build_pipeline(Settings(), Wiring.offline(sinks=[sink], influxdb=False, notifiers=None))
    r = Rounds(nodes=2, gpus=4, links=2, ports=1)
    rounds = 40
    try:
        with caplog.at_level(logging.ERROR, logger="service.history.influx.spooler"):
            for k in range(rounds):
                p.process(r.batch(T0 + 5 * k), T0 + 5 * k)
        dropped = sink.spooler.stats.segments_dropped
        assert dropped > 0
        assert "dropped the 1 oldest segment" in caplog.text
        own_influx.start()
        assert sink.flush(60)
    finally:
        p.close()
    # What survived is the newest rounds, contiguous up to the last one.
    s = own_influx.query('SELECT "gpu_temp" FROM "gpu" WHERE "host"=\'n0\' AND "gpu"=\'0\'', db,
                         epoch="s")
    times = [v[0] for v in s[0]["values"]]  # type: ignore[union-attr]
    kept = len(times)
    assert 0 < kept < rounds
    assert times == [T0 + 5 * k for k in range(rounds - kept, rounds)]
    assert own_influx.count("gpu", "gpu_temp", db) == kept * 8
