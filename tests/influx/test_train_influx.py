"""`gpuhealth train --from-influx` against a real influxd: a simulated fleet run through the
pipeline with the InfluxDB sink and the auto-labeller trains a model whose card names the span
and the auto labels per mode; a run interrupted after some days and resumed records the same
features bit for bit as an uninterrupted one (and would not without its warm-up); no data, a
bad --since and InfluxDB down are refused with a clear message; fine-tuning the shipped model
(`--init default`) writes a loadable artifact whose card names it."""

from __future__ import annotations

import itertools
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from bench.influx_history import write_simulated
from collectors.catalog import Scope
from models.evaluation.events import truth_from_labels
from models.evaluation.rounds import feed_rounds
from models.evaluation.sources import simulator_source
from models.predictor.dataset import targets
from models.predictor.package import Predictor
from models.simulator.config import SimConfig
from models.simulator.scenarios import scenario_tree
from service.assembly import Wiring
from service.commands.cli import main
from service.commands.train_days import DayBook, day_edges, record_days
from service.history.influx.client import InfluxClient
from service.history.influx.history_source import InfluxSource
from service.history.influx.settings import InfluxSettings
from service.history.influx.sink import InfluxSink
from service.pipeline import build_pipeline
from service.settings import SHIPPED_MODEL, Settings
from service.stages.windows import window_config_for
from tests.influx.server import InfluxServer, free_port

_db = itertools.count()
DAY = 86400.0
TINY = ["--epochs", "1", "--hidden", "4", "--window", "12", "--threads", "1", "--no-progress"]


def _scenario(days: float, seed: int) -> SimConfig:
    tree = scenario_tree("ci", seed=seed)
    tree["fleet"]["nodes"] = 1
    tree["time"]["days"] = days
    tree["failures"]["rate_multiplier"] = 1500.0  # a few failures of a few modes in days
    tree["seed"] = seed
    return SimConfig.model_validate(tree)


def _config(tmp: Path, influx: dict[str, Any]) -> Path:
    path = tmp / "gpuhealth.yaml"
    path.write_text(yaml.safe_dump({"storage": {"data_dir": str(tmp), "influxdb": influx}}))
    return path


def _train(config: Path, out: Path, *extra: str, since: str = "2025-01-01T00:00:00Z",
           until: str = "2025-01-20T00:00:00Z") -> int:
    return main(["train", "--from-influx", "--since", since, "--until", until,
                 "--config", str(config), "--out", str(out), *TINY, *extra])


@pytest.fixture(scope="module")
def pipeline_fleet(influx_server: InfluxServer, tmp_path_factory: pytest.TempPathFactory
                   ) -> tuple[Path, Counter[str], SimConfig]:
    """Two days of one node through the real pipeline: samples by the sink, auto labels by
    the labeller (at the tick they fired), both into InfluxDB."""
    tmp = tmp_path_factory.mktemp("trainflux")
    cfg = _scenario(2, 7)
    influx = {"url": influx_server.url, "database": f"tr{next(_db)}", "cluster": "c1",
              "raw_retention": "INF", "spool_dir": str(tmp / "spool")}
    s = Settings(window=window_config_for(cfg.time.step_s),
                 storage={"data_dir": str(tmp), "influxdb": influx})  # type: ignore[arg-type]
    p = build_pipeline(s, Wiring.offline(alert_db=str(tmp / "a.db"), autolabel=True))
    try:
        src = simulator_source(cfg)
        for r in feed_rounds(src.chunks, src.step_s):
            p.process(r.batch, r.now)
        (sink,) = [x for x in p.sinks if isinstance(x, InfluxSink)]
        assert sink.flush(60)
        auto = Counter(str(lb.mode) for lb in p.labels.find(kind="failure", overruled=False,
                                                             limit=100_000))
    finally:
        p.close()
    assert sum(auto.values()) >= 2, auto  # the scenario must give the labeller work
    return _config(tmp, influx), auto, cfg


@pytest.mark.slow
def test_trains_from_the_pipelines_history_and_auto_labels(
        pipeline_fleet: tuple[Path, Counter[str], SimConfig], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    config, auto, cfg = pipeline_fleet
    out = tmp_path / "model"
    rc = _train(config, out, "--json")
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    card = json.loads(cap.out[cap.out.index("{"):])
    h = card["learned_from"]
    assert h["from"] == cfg.time.start_s and h["days"] == 2 and h["to"] == h["from"] + 2 * DAY
    assert h["label_counts"] == {m: {"auto": n} for m, n in sorted(auto.items())}
    split = h["split_times"]
    assert h["from"] <= split["train_from"] < split["val_from"] < split["test_from"]
    assert split["test_to"] <= h["to"]
    text = (out / "MODEL_CARD.md").read_text()
    assert "data span **2025-01-01 00:00 UTC to 2025-01-03 00:00 UTC**" in text
    for mode, n in auto.items():
        assert f"| {mode} | {n} | {n} |" in text
    # Modes the fleet never showed are named, not scored.
    assert "M6_sram: no failure labelled in the span" in text + cap.out
    assert (out / "model.json").exists() and (out / "history-work" / "day-0001.npz").exists()


@pytest.mark.slow
def test_fine_tunes_the_shipped_model_on_the_fleets_history(
        pipeline_fleet: tuple[Path, Counter[str], SimConfig], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    config, auto, _ = pipeline_fleet
    out = tmp_path / "tuned"
    rc = main(["train", "--from-influx", "--since", "2025-01-01T00:00:00Z", "--until",
               "2025-01-20T00:00:00Z", "--config", str(config), "--out", str(out), "--init",
               "default", "--epochs", "1", "--threads", "1", "--no-progress", "--json"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    card = json.loads(cap.out[cap.out.index("{"):])
    shipped = json.loads((SHIPPED_MODEL / "model.json").read_text())
    ft = card["fine_tuned_from"]
    assert ft["version"] == shipped["version"] and ft["path"] == str(SHIPPED_MODEL)
    assert (ft["epochs"], ft["lr"], ft["patience"]) == (1, 2e-4, 3)
    assert card["learned_from"]["label_counts"] == {m: {"auto": n}
                                                     for m, n in sorted(auto.items())}
    assert "--init default" in card["command"]
    assert f"Fine-tuned from **{shipped['version']}**" in (out / "MODEL_CARD.md").read_text()
    p = Predictor.load(out)  # loadable, and every scope of the shipped model is there
    assert p.version != shipped["version"] and set(p.scopes) == {Scope.GPU, Scope.IB_PORT}
    mine = json.loads((out / "model.json").read_text())
    for scope in ("gpu", "ib_port"):  # the input scaler is the shipped model's
        assert mine["scopes"][scope]["scaler"] == shipped["scopes"][scope]["scaler"]
    trained = [s for s, m in card["metrics"].items() if not m.get("kept_from_init")]
    assert trained and all(card["history"][s][0]["epoch"] == 0 for s in trained)


@pytest.fixture(scope="module")
def long_fleet(influx_server: InfluxServer, tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[Path, InfluxSettings]:
    """Nine days (more than the warm-up) written by the sink's LineWriter, labels beside."""
    tmp = tmp_path_factory.mktemp("trainlong")
    influx = {"url": influx_server.url, "database": f"tr{next(_db)}", "cluster": "c1",
              "raw_retention": "INF"}
    ic = InfluxSettings(**influx)  # type: ignore[arg-type]
    counts = write_simulated(_scenario(9, 11), ic)
    assert counts["failures"] >= 3
    return _config(tmp, influx), ic


def _days(work: Path) -> list[Path]:
    return sorted(work.glob("day-*.npz"))


def _same(a: Path, b: Path) -> bool:
    with np.load(a) as x, np.load(b) as y:
        return set(x.files) == set(y.files) and all(
            np.array_equal(x[k], y[k], equal_nan=x[k].dtype.kind == "f") for k in x.files)


@pytest.mark.slow
def test_an_interrupted_run_resumes_bit_for_bit(long_fleet: tuple[Path, InfluxSettings],
                                                tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    config, ic = long_fleet
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert _train(config, whole) == 0, capsys.readouterr().err
    assert _train(config, parts, "--stop-after-days", "8") == 3
    assert "stopped after 8 of 9 days" in capsys.readouterr().out
    assert len(_days(parts / "history-work")) == 8
    assert _train(config, parts) == 0
    assert "8 day(s) from an earlier run" in capsys.readouterr().out
    a, b = _days(whole / "history-work"), _days(parts / "history-work")
    assert [p.name for p in a] == [p.name for p in b] and len(a) == 9
    assert all(_same(x, y) for x, y in zip(a, b, strict=True))
    # Features and targets as training sees them, and the model trained on them.
    days = list(range(9))
    wa = json.loads((whole / "model.json").read_text())
    wb = json.loads((parts / "model.json").read_text())
    assert wa["weights_sha256"] == wb["weights_sha256"]
    key = json.loads((whole / "history-work" / "manifest.json").read_text())
    ra = DayBook(whole / "history-work", key).load(days)
    rb = DayBook(parts / "history-work", key).load(days)
    fails = list(truth_from_labels(InfluxSource(InfluxClient(ic), "c1", key["start"],
                                                key["end"]).read_labels()).failures)
    for scope in (Scope.GPU, Scope.IB_PORT):
        assert np.array_equal(ra[scope].x, rb[scope].x, equal_nan=True)
        assert ra[scope].keys == rb[scope].keys
        ta, tb = targets(ra[scope], fails), targets(rb[scope], fails)
        assert np.array_equal(ta.y, tb.y) and np.array_equal(ta.valid, tb.valid)
    assert any(ta.y.any() for ta in [targets(ra[Scope.GPU], fails)])

    # Without the warm-up the resumed day differs: the test above can fail.
    cold = tmp_path / "cold"
    cold.mkdir()
    for p in b[:8]:
        shutil.copy(p, cold / p.name)
    shutil.copy(parts / "history-work" / "manifest.json", cold / "manifest.json")
    src = InfluxSource(InfluxClient(ic), "c1", key["start"], key["end"], key["chunk_s"])
    try:
        record_days(src.batches, DayBook(cold, key), day_edges(key["first"], key["end"]),
                    key["step_s"], warmup_days=0)
    finally:
        src.close()
    assert not _same(cold / "day-0008.npz", a[8])


@pytest.mark.slow
def test_a_work_directory_of_another_span_is_refused(long_fleet: tuple[Path, InfluxSettings],
                                                     tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = long_fleet
    work = tmp_path / "w"
    assert _train(config, tmp_path / "a", "--work", str(work), "--stop-after-days", "1") == 3
    rc = _train(config, tmp_path / "b", "--work", str(work), until="2025-01-05T00:00:00Z")
    assert rc == 2
    assert "holds the days of another run (it differs in args, end)" in capsys.readouterr().err


def test_no_data_in_the_range_is_a_clear_error(long_fleet: tuple[Path, InfluxSettings],
                                               tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = long_fleet
    rc = _train(config, tmp_path / "m", since="2024-01-01T00:00:00Z",
                until="2024-02-01T00:00:00Z")
    assert rc == 2
    err = capsys.readouterr().err
    assert "no samples of cluster 'c1' between 2024-01-01T00:00:00Z and 2024-02-01" in err
    assert not (tmp_path / "m").exists()  # nothing written for a range without data
    rc = _train(config, tmp_path / "m", "--cluster", "nope")
    assert rc == 2 and "no samples of cluster 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(("since", "until", "said"), [
    ("yesterday", None, "--since 'yesterday': neither a duration"),
    ("2025-01-05T00:00:00Z", "2025-01-02T00:00:00Z", "must be before --until"),
    ("0d", None, "--since '0d': give a finite duration"),
])
def test_a_bad_since_is_refused(long_fleet: tuple[Path, InfluxSettings], tmp_path: Path,
                                capsys: pytest.CaptureFixture[str], since: str,
                                until: str | None, said: str) -> None:
    config, _ = long_fleet
    args = ["train", "--from-influx", "--since", since, "--config", str(config),
            "--out", str(tmp_path / "m"), *TINY]
    if until is not None:
        args += ["--until", until]
    assert main(args) == 2
    assert said in capsys.readouterr().err


def test_influxdb_down_is_a_clear_error(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path, {"url": f"http://127.0.0.1:{free_port()}", "database": "x",
                                "cluster": "c1"})
    assert _train(config, tmp_path / "m") == 2
    err = capsys.readouterr().err
    assert "InfluxDB:" in err and "unreachable" in err
