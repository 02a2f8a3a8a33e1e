"""The hour tier against a real influxd: the pipeline's InfluxDB sink stores every finished hour
of every GPU and IB port once (a second service replaying the same hours overwrites, never
doubles), features built from it equal a replay's, `train --from-influx` uses it when it is
there and says so, and a stored point naming no valid entity is refused while the rest is
read."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from bench.influx_history import write_simulated
from bench.model_tier import check
from collectors.catalog import Scope
from models.evaluation.rounds import feed_rounds
from models.evaluation.sources import simulator_source
from models.predictor.features import INPUTS, link_hours
from models.simulator.config import SimConfig
from models.simulator.scenarios import scenario_tree
from service.assembly import Wiring
from service.commands.cli import main
from service.history.influx.client import InfluxClient
from service.history.influx.hour_tier import read_tables
from service.history.influx.settings import InfluxSettings
from service.history.influx.sink import InfluxSink
from service.pipeline import build_pipeline
from service.settings import Settings
from service.stages.windows import window_config_for
from tests.influx.server import InfluxServer

_db = itertools.count()
HOUR = 3600.0
TINY = ["--epochs", "1", "--hidden", "4", "--window", "12", "--threads", "1", "--no-progress",
        "--json"]


def _scenario(days: float, seed: int = 5) -> SimConfig:
    tree = scenario_tree("ci", seed=seed)
    tree["fleet"]["nodes"] = 1
    tree["time"]["days"] = days
    tree["failures"]["rate_multiplier"] = 1500.0
    tree["seed"] = seed
    return SimConfig.model_validate(tree)


def _influx(srv: InfluxServer, tmp: Path) -> dict[str, Any]:
    # The simulated fleet lives in 2025: kept forever, or InfluxDB drops it as too old.
    return {"url": srv.url, "database": f"hr{next(_db)}", "cluster": "c1",
            "raw_retention": "INF", "rollup_retention": "INF", "spool_dir": str(tmp / "spool")}


def _run(cfg: SimConfig, influx: dict[str, Any], tmp: Path) -> int:
    """The scenario through a pipeline with the sink; returns the GPU hours the store holds
    anything for (a failed GPU reports nothing: no point)."""
    s = Settings(window=window_config_for(cfg.time.step_s),
                 storage={"data_dir": str(tmp), "influxdb": influx})  # type: ignore[arg-type]
    p = build_pipeline(s, Wiring.offline(alert_db=str(tmp / "a.db"), autolabel=True))
    try:
        src = simulator_source(cfg)
        for r in feed_rounds(src.chunks, src.step_s):
            p.process(r.batch, r.now)
        (sink,) = [x for x in p.sinks if isinstance(x, InfluxSink)]
        assert sink.flush(60)
        assert sink.hour_spooler is not None and sink.hour_spooler.stats.segments_partial == 0
        fleet = p.scorer.view
        v = fleet.scope(Scope.GPU)
        n = int(cfg.time.days * 24)
        own = np.stack([v.window(m, n, tier="1h", stat=st) for m, st in INPUTS[Scope.GPU]])
        links = link_hours(fleet, len(v), n)[-1] == 0
        return int(((~np.isnan(own)).any(axis=0) | links).sum())
    finally:
        p.close()


def _count(influx: dict[str, Any], measurement: str, field: str) -> int:
    c = InfluxClient(InfluxSettings(**{k: v for k, v in influx.items() if k != "spool_dir"}))
    try:
        (series,) = c.query(f'SELECT count("{field}") FROM "rollup_1h"."{measurement}"')
    finally:
        c.close()
    return int(series[0].values[0][1]) if series else 0


@pytest.fixture(scope="module")
def stored(influx_server: InfluxServer, tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[dict[str, Any], SimConfig, Path, int]:
    tmp = tmp_path_factory.mktemp("hourtier")
    cfg = _scenario(1.0)
    influx = _influx(influx_server, tmp)
    held = _run(cfg, influx, tmp)
    config = tmp / "gpuhealth.yaml"
    config.write_text(yaml.safe_dump({"storage": {"data_dir": str(tmp), "influxdb": influx}}))
    return influx, cfg, config, held


Stored = tuple[dict[str, Any], SimConfig, Path, int]


def test_the_sink_stores_every_finished_hour_once(stored: Stored, tmp_path: Path) -> None:
    influx, cfg, _, held = stored
    # 24 hours of data, each finished by the end; a GPU hour is stored where the GPU reported
    # anything (the empty hour before the first sample, which the store also finishes, and a
    # failed GPU's hours are not).
    assert cfg.fleet.gpus * 20 < held < cfg.fleet.gpus * 24
    assert _count(influx, "gpu_1h", "missing_nvlink") == held
    assert _count(influx, "ib_port_1h", "ib_state") > 0
    # Another service (a restarted one, a standby taking over) storing the same hours again
    # overwrites the points: none doubles.
    _run(cfg, {**influx, "spool_dir": str(tmp_path / "spool2")}, tmp_path)
    assert _count(influx, "gpu_1h", "missing_nvlink") == held


def test_read_back_whole_hours_per_entity(stored: Stored) -> None:
    influx, cfg, _, held_hours = stored
    c = InfluxClient(InfluxSettings(**{k: v for k, v in influx.items() if k != "spool_dir"}))
    try:
        got = read_tables(c, "c1", cfg.time.start_s, cfg.time.end_s)
    finally:
        c.close()
    gpu = got.tables[Scope.GPU]
    assert [e.key for e in gpu.entities] == sorted(e.key for e in gpu.entities)
    assert len(gpu.entities) == cfg.fleet.gpus and got.refused == 0
    held = ~np.isnan(gpu.column("missing_nvlink"))
    # The table spans the hours that hold data, not the range asked for.
    assert int(held.sum()) == held_hours and held.shape[1] <= 24 and held.any(axis=0).all()
    temp = gpu.column("gpu_temp")
    assert 0.8 * temp.size < (~np.isnan(temp)).sum() < temp.size  # a failed GPU: none
    # The stored link columns: the links reported in most GPU hours.
    assert float(np.nanmean(gpu.column("missing_nvlink"))) < 0.2


def test_features_from_the_stored_tier_equal_a_replays() -> None:
    r = check(16, 7)
    for scope in ("gpu", "ib_port"):
        c = r[scope]
        assert c["hours"] >= 160 and c["entities"] == 16
        assert c["worst_unequal_share"] == 0.0, {k: v for k, v in c["features"].items()
                                                 if v["equal_share"] < 1}
        assert c["t_pred_max_diff_s"] == 0.0
        # Long memory is in the comparison (a week holds more days than its span).
        assert "days_since_ecc" in c["features"] or "days_since_ib_errors" in c["features"]


@pytest.mark.slow
def test_train_uses_the_hour_tier_and_says_so(
        stored: Stored, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, cfg, config, _ = stored
    span = ["--since", "2025-01-01T00:00:00Z", "--until", "2025-01-20T00:00:00Z"]
    rc = main(["train", "--from-influx", *span, "--config", str(config),
               "--out", str(tmp_path / "m"), *TINY])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    h = json.loads(cap.out[cap.out.index("{"):])["learned_from"]
    assert h["source"] == "hour tier" and h["from"] == cfg.time.start_s and h["days"] == 1
    assert not (tmp_path / "m" / "history-work").exists()  # nothing replayed
    rc = main(["train", "--from-influx", *span, "--config", str(config),
               "--out", str(tmp_path / "r"), "--source", "raw", *TINY])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert json.loads(cap.out[cap.out.index("{"):])["learned_from"]["source"] == "raw replay"


def test_no_hour_tier_falls_back_to_the_raw_samples_or_is_refused(
        influx_server: InfluxServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    influx = _influx(influx_server, tmp_path)
    write_simulated(_scenario(1.0, 9), InfluxSettings(**influx))  # raw samples only
    config = tmp_path / "gpuhealth.yaml"
    config.write_text(yaml.safe_dump({"storage": {"data_dir": str(tmp_path),
                                                  "influxdb": influx}}))
    span = ["--since", "2025-01-01T00:00:00Z", "--until", "2025-01-03T00:00:00Z"]
    rc = main(["train", "--from-influx", *span, "--config", str(config), "--out",
               str(tmp_path / "m"), "--source", "hours", *TINY])
    err = capsys.readouterr().err
    assert rc != 0 and "no hour tier of cluster 'c1'" in err and "--source raw" in err
    # auto: the raw replay (it goes as far as the labels; one day may hold too few to train)
    main(["train", "--from-influx", *span, "--config", str(config), "--out",
          str(tmp_path / "a"), *TINY])
    assert (tmp_path / "a" / "history-work" / "manifest.json").exists()


def test_a_stored_point_naming_no_valid_entity_is_refused_the_rest_read(
        influx_server: InfluxServer, tmp_path: Path) -> None:
    influx = _influx(influx_server, tmp_path)
    s = InfluxSettings(**influx)
    c = InfluxClient(s)
    try:
        c.query(f'CREATE DATABASE "{s.database}"', write=True, database=False)
        c.query(f'CREATE RETENTION POLICY "rollup_1h" ON "{s.database}" DURATION INF '
                "REPLICATION 1", write=True, database=False)
        hc = InfluxClient(s.model_copy(update={"retention_policy": "rollup_1h"}))
        t = int(1_735_689_600 * 1e9)  # 2025-01-01 00:00 UTC
        body = "\n".join([
            f"gpu_1h,cluster=c1,host=n1,gpu=0 gpu_temp=50,gpu_temp_max=55 {t}",
            f"gpu_1h,cluster=c1,host=n1,gpu=0 gpu_temp=51 {t + int(3600e9)}",
            f"gpu_1h,cluster=c1,host=-rf,gpu=0 gpu_temp=99 {t}",  # an option, not a host
            f"gpu_1h,cluster=c1,host=n1,gpu=x gpu_temp=99 {t}",  # not a GPU index
            f"gpu_1h,cluster=c2,host=n9,gpu=0 gpu_temp=70 {t}",  # another cluster
        ]).encode()
        assert hc.write(gzip.compress(body)).status == 204
        hc.close()
        got = read_tables(c, "c1", 1_735_689_600.0, 1_735_689_600.0 + 2 * HOUR)
    finally:
        c.close()
    gpu = got.tables[Scope.GPU]
    assert [e.key for e in gpu.entities] == ["n1:gpu0"]
    assert got.refused == 2 and got.rows == 4
    assert gpu.column("gpu_temp")[0].tolist() == [50.0, 51.0]
    assert gpu.column("gpu_temp_max")[0, 0] == 55.0 and np.isnan(gpu.column("mem_temp")[0, 0])


def test_without_our_policies_the_hour_tier_is_read_from_the_default_one(
        influx_server: InfluxServer, tmp_path: Path) -> None:
    """A schema not managed here (2.x, 3.x, an operator's own): the sink wrote the hour tier
    to the default policy, and the reader finds it there."""
    s = InfluxSettings(**_influx(influx_server, tmp_path))
    c = InfluxClient(s)
    try:
        c.query(f'CREATE DATABASE "{s.database}"', write=True, database=False)
        t = int(1_735_689_600 * 1e9)
        assert c.write(gzip.compress(
            f"ib_port_1h,cluster=c1,host=n1,device=mlx5_0,port=1 ib_state=4 {t}".encode())
        ).status == 204
        got = read_tables(c, "c1", 1_735_689_600.0, 1_735_689_600.0 + HOUR)
    finally:
        c.close()
    assert Scope.GPU not in got.tables
    port = got.tables[Scope.IB_PORT]
    assert [e.key for e in port.entities] == ["n1:mlx5_0:1"]
    assert port.column("ib_state").tolist() == [[4.0]]


def test_a_new_writer_stores_no_hour_the_store_finished_before_it() -> None:
    """A restarted service (its store empty, or warm-started) must not overwrite the hours the
    previous instance stored: its writer starts with the next hour that finishes."""
    from service.history.influx.hour_tier import HourWriter

    cfg = _scenario(0.25)
    s = Settings(window=window_config_for(cfg.time.step_s))
    p = build_pipeline(s, Wiring.offline())
    try:
        src = simulator_source(cfg)
        rounds = list(feed_rounds(src.chunks, src.step_s))
        writer = HourWriter("c1")
        at = [r.now for r in rounds]
        for r in rounds[: len(rounds) // 2]:
            p.ingest(r.batch, r.now)
        assert writer.lines(p.scorer.view) == []  # hours 0-2 finished: someone else's
        got: list[str] = []
        for r in rounds[len(rounds) // 2:]:
            p.ingest(r.batch, r.now)
            got += writer.lines(p.scorer.view)
        stamps = sorted({int(line.rsplit(" ", 1)[1]) // 10**9 for line in got})
        first_hour = int(at[len(rounds) // 2 - 1] // HOUR)
        assert stamps and stamps[0] == first_hour * HOUR  # the hour open at the start
        assert len(stamps) == int(at[-1] // HOUR) - first_hour
    finally:
        p.close()
