"""`gpuhealth export` against a real influxd: what the pipeline wrote comes back out as a trace
that TraceReader reads into the same samples (values, entities, timestamps), with counters and
states as integers, Xid events, the labels beside it, and only the cluster asked for."""

from __future__ import annotations

import gzip
import itertools
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from collectors.catalog import CATALOG, Kind, Scope
from collectors.frames import Batch, Entity, EntityTable
from collectors.labels import load_labels
from collectors.lineprotocol import parse
from collectors.trace import TraceReader
from service.assembly import Wiring
from service.commands.cli import main
from service.history.influx.sink import InfluxSink
from service.pipeline import build_pipeline
from service.settings import Settings
from tests.influx.server import InfluxServer
from tests.pipeline.builders import T0, Rounds

_db = itertools.count()
ROUNDS = 40
Cell = tuple[str, str, int, str]  # scope, entity, ns, metric


def _ns(ts: float) -> int:
    return round(ts * 1e6) * 1000


def cells(batch: Batch, into: dict[Cell, float], events: list[tuple[str, int, str, float]]) -> None:
    for scope, f in batch.frames.items():
        names = [m.name for m in CATALOG.columns(scope)]
        for slot, ts, row in zip(f.rows.tolist(), f.ts.tolist(), f.values.tolist(), strict=True):
            key = f.entities[slot].key
            for name, v in zip(names, row, strict=True):
                if v == v:
                    into[(scope.value, key, _ns(ts), name)] = v
    ev = batch.events
    events += zip(ev.keys, [_ns(t) for t in ev.ts], ev.metrics, ev.values, strict=True)


def feed(s: Settings, nodes: int, prefix: str) -> tuple[dict[Cell, float],
                                                        list[tuple[str, int, str, float]]]:
    """Rounds through the real pipeline into InfluxDB; returns what ingest accepted."""
    r = Rounds(nodes=nodes, gpus=2, links=2, ports=1)
    r.tables = {sc: EntityTable(sc, [Entity(sc, prefix + e.node, e.unit, e.sub)
                                     for e in t.entities]) for sc, t in r.tables.items()}
    expected: dict[Cell, float] = {}
    events: list[tuple[str, int, str, float]] = []
    p = build_pipeline(s, Wiring.offline(notifiers=None))
    try:
        for k in range(ROUNDS):
            ts = T0 + 5 * k + 0.25  # off the second: sub-second timestamps survive
            r.set(f"{prefix}n0:gpu1", "power_draw", 500 + 0.1 * k)
            r.set(f"{prefix}n0:gpu1", "gpu_temp", 55.25 + k / 3)
            r.add(f"{prefix}n0:gpu1", "ecc_sbe_volatile", 3.0)
            r.set(f"{prefix}n0:gpu1", "remapped_rows_pending", float(k % 2))
            r.add(f"{prefix}n0:gpu0:nvlink1", "nvlink_crc_flit", 7.0)
            r.add(f"{prefix}n0:mlx5_0:1", "ib_port_xmit_data", 2.0**40 + k)
            b = r.batch(ts)
            if k == 17:
                b.events.add(f"{prefix}n0:gpu1", ts + 1.5, "xid", 79.0)
            res = p.ingest(b, ts)
            assert not res.rejections
            cells(res.clean, expected, events)
            p.tick(ts)
        (sink,) = [x for x in p.sinks if isinstance(x, InfluxSink)]
        assert sink.flush(30)
    finally:
        p.close()
    return expected, events


@pytest.fixture(scope="module")
def stored(influx_server: InfluxServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[
        Path, dict[Cell, float], list[tuple[str, int, str, float]]]:
    tmp = tmp_path_factory.mktemp("export")
    cfg = {"url": influx_server.url, "database": f"e{next(_db)}", "cluster": "c1",
           "raw_retention": "INF", "spool_dir": str(tmp / "spool1")}
    s = Settings(storage={"data_dir": tmp, "influxdb": cfg})  # type: ignore[arg-type]
    expected, events = feed(s, 2, "")
    # Another cluster in the same database: the export must leave it out.
    other = Settings(storage={"data_dir": tmp, "influxdb": {  # type: ignore[arg-type]
        **cfg, "cluster": "c2", "spool_dir": str(tmp / "spool2")}})
    feed(other, 1, "other-")
    config = tmp / "gpuhealth.yaml"
    config.write_text(yaml.safe_dump({"storage": {"data_dir": str(tmp), "influxdb": cfg}}))
    return config, expected, events


def _read(out: Path) -> tuple[dict[Cell, float], list[tuple[str, int, str, float]]]:
    got: dict[Cell, float] = {}
    events: list[tuple[str, int, str, float]] = []
    for rnd in TraceReader(out, step_s=5).rounds():
        assert not rnd.batch.rejected, rnd.batch.rejected[:3]
        cells(rnd.batch, got, events)
    return got, events


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_export_round_trips_through_the_trace_format(
        stored: tuple[Path, dict[Cell, float], list[tuple[str, int, str, float]]],
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, expected, events = stored
    labels = tmp_path / "in-labels.jsonl"
    labels.write_text(json.dumps({"kind": "failure", "time": T0 + 100, "node": "n0",
                                  "entity": "n0:gpu1", "scope": "gpu", "mode": "M1_hbm",
                                  "precursor_onset": T0, "ticket": "OPS-1"}) + "\n")
    out = tmp_path / "trace"
    # A chunk that is no multiple of the 5-s rounds: edges fall between points, and no point
    # may be lost or doubled at one.
    rc = main(["export", "--from", _iso(T0), "--to", str(T0 + 5 * ROUNDS), "--out", str(out),
               "--labels", str(labels), "--config", str(config), "--chunk", "37"])
    assert rc == 0, capsys.readouterr().err
    assert "from cluster 'c1' in 6 chunks" in capsys.readouterr().out
    got, got_events = _read(out)
    per_round = sum(n * len(CATALOG.columns(sc))  # every cell of every round
                    for sc, n in ((Scope.GPU, 4), (Scope.NVLINK, 8), (Scope.IB_PORT, 2)))
    assert len(expected) == ROUNDS * per_round
    assert got == expected
    assert got_events == events and len(events) == 1
    assert TraceReader(out).labels() == load_labels(labels)
    assert (out / "labels.jsonl").read_text() == labels.read_text()
    # Field types as the trace format has them: counters and states integers, gauges floats.
    kinds = {m.name: m.kind for m in CATALOG}
    seen: set[tuple[str, type]] = set()
    for f in sorted(out.glob("*.lp.gz")):
        points, rejected = parse(gzip.decompress(f.read_bytes()))
        assert not rejected
        for pt in points:
            for name, v in pt.fields.items():
                seen.add(("event" if pt.measurement == "xid" else kinds[name].value, type(v)))
    assert seen == {("gauge", float), ("counter", int), ("state", int), ("event", int)}
    assert kinds["ecc_sbe_volatile"] is Kind.COUNTER


def test_export_a_scope_and_a_time_slice(
        stored: tuple[Path, dict[Cell, float], list[tuple[str, int, str, float]]],
        tmp_path: Path) -> None:
    config, expected, _ = stored
    out = tmp_path / "links"
    start, end = T0 + 50, T0 + 100
    rc = main(["export", "--from", str(start), "--to", str(end), "--out", str(out),
               "--scope", "nvlink", "--config", str(config), "--no-gzip"])
    assert rc == 0
    got, events = _read(out)
    want = {c: v for c, v in expected.items()
            if c[0] == "nvlink" and _ns(start) <= c[2] < _ns(end)}
    assert got == want and len(want) == 10 * 8 * 5 and not events
    assert all(f.suffix == ".lp" for f in out.iterdir())


def test_replay_reads_the_export(
        stored: tuple[Path, dict[Cell, float], list[tuple[str, int, str, float]]],
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, _, _ = stored
    out = tmp_path / "trace"
    assert main(["export", "--from", str(T0), "--to", str(T0 + 5 * ROUNDS), "--out", str(out),
                 "--config", str(config)]) == 0
    capsys.readouterr()
    assert main(["replay", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rounds"] == ROUNDS and summary["rejected"] == 0
    assert summary["peak_level"]["n0:gpu1"] == 3  # the Xid came back with its code


def test_export_refusals(stored: tuple[Path, dict[Cell, float], list[tuple[str, int, str, float]]],
                         tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, _, _ = stored
    base = ["export", "--from", str(T0), "--to", str(T0 + 60), "--config", str(config)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "failure", "time": 1, "node": "n0", "entity": "n0:gpu1", '
                   '"scope": "gpu", "mode": "M9", "precursor_onset": null}\n')
    assert main([*base, "--out", str(tmp_path / "a"), "--labels", str(bad)]) == 2
    assert "line 1: mode 'M9'" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()  # refused before anything is written
    assert main([*base, "--out", str(tmp_path / "b"), "--scope", "gpu,node"]) == 2
    assert "--scope 'gpu,node'" in capsys.readouterr().err
    assert main(["export", "--from", "2023-11-14T22:13:20Z", "--to", "1600000000", "--out",
                 str(tmp_path / "c"), "--config", str(config)]) == 2
    assert "must be before" in capsys.readouterr().err
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "trace-000000.lp").write_text("")
    assert main([*base, "--out", str(tmp_path / "d")]) == 2
    assert "already holds a trace" in capsys.readouterr().err
    empty = tmp_path / "empty"
    assert main(["export", "--from", "1000", "--to", "2000", "--out", str(empty),
                 "--config", str(config)]) == 1
    assert "no samples in that range" in capsys.readouterr().err
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({"storage": {"data_dir": str(tmp_path)}}))
    assert main(["export", "--from", "1000", "--to", "2000", "--out", str(tmp_path / "e"),
                 "--config", str(plain)]) == 2
    assert "set storage.influxdb.url" in capsys.readouterr().err


def test_rfc3339_bounds_cover_the_same_range(
        stored: tuple[Path, dict[Cell, float], list[tuple[str, int, str, float]]],
        tmp_path: Path) -> None:
    config, expected, _ = stored
    out = tmp_path / "t"
    assert main(["export", "--from", _iso(T0), "--to", _iso(T0 + 5 * ROUNDS), "--out", str(out),
                 "--scope", "ib_port", "--config", str(config)]) == 0
    got, _ = _read(out)
    assert got == {c: v for c, v in expected.items() if c[0] == Scope.IB_PORT.value}
