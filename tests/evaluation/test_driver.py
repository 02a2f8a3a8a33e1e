"""End to end: a tiny simulated scenario through the real pipeline, every detector set, the
scoring, the report and the CLI entry points (seconds, not minutes)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from collectors.trace import TraceWriter
from models.evaluation.sources import EvaluationInput, simulator_source
from models.evaluation.summary import summarize, write_outputs
from models.simulator.config import SimConfig
from models.simulator.scenarios import load_scenario
from models.simulator.simulator import Simulator
from service.commands.evaluate import (
    DETECTOR_SETS,
    configure_parser,
    evaluate_source,
    run,
    summarize_demo,
)


def tiny(days: float = 2.0, seed: int = 0) -> SimConfig:
    cfg = load_scenario("ci")
    return cfg.model_copy(update={
        "seed": seed,
        "fleet": cfg.fleet.model_copy(update={"nodes": 4}),
        "time": cfg.time.model_copy(update={"days": days}),
        "failures": cfg.failures.model_copy(update={"rate_multiplier": 300.0}),
    })


# Every set but the trees baseline, which re-simulates the model's three 28-day training fleets
# to fit itself (minutes; `gpuhealth evaluate` pays that once per process).
SETS = [name for name in DETECTOR_SETS if name != "trees"]


@pytest.mark.slow
def test_tiny_scenario_through_the_real_pipeline(tmp_path: Path) -> None:
    runs = [evaluate_source(simulator_source(tiny(days=1.0, seed=s)), SETS, s) for s in (0, 1)]
    first = runs[0]
    assert first["timing"]["rounds"] == 288
    assert first["exposure"]["node_days"] == 4.0
    assert first["truth"]["failures"] > 0
    for name in SETS:
        views = first["scores"][name]["views"]
        assert set(views) == {"watch", "warning", "critical", "any"}
        assert views["watch"]["failures"] == first["truth"]["failures"]
    # Our hard rules see every terminal event that leaves a trace in the metrics.
    assert first["scores"]["ours"]["delay"]["1"]["share"] in (None, 1.0)
    result = summarize("tiny", [0, 1], runs)
    assert result["results"]["ours"]["views"]["watch"]["recall_all"]["n"] >= 1
    files = write_outputs(result, tmp_path, "tiny")
    # One reliability diagram per scope of the model, which lstm and fused share.
    assert set(files) == {"PR curve", "Lead time", "False alarms", "Reliability lstm gpu",
                          "Reliability lstm ib_port"}
    assert all((tmp_path / f).stat().st_size > 1000 for f in files.values())
    report = (tmp_path / "report.md").read_text()
    assert "### Event-level scores" in report and "| watch | ours |" in report
    assert "### Reliability of the model's probabilities (lstm" in report
    assert "net share (seed's claim 0.67)" in report
    assert json.loads((tmp_path / "results.json").read_text())["seeds"] == [0, 1]


@pytest.mark.slow
def test_trace_with_labels_through_the_cli(tmp_path: Path, capsys: object) -> None:
    sim = Simulator(tiny(days=0.5))
    with TraceWriter(tmp_path / "trace") as w:
        for batch in sim.run():
            w.write(batch)
    with open(tmp_path / "trace" / "labels.jsonl", "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in sim.labels)
    p = argparse.ArgumentParser()
    configure_parser(p)
    args = p.parse_args(["--trace", str(tmp_path / "trace"), "--detectors", "ours", "random",
                         "--out", str(tmp_path / "out"), "--json"])
    assert run(args) == 0
    out = json.loads(capsys.readouterr().out)  # type: ignore[attr-defined]
    assert out["detectors"] == ["ours", "random"]
    assert out["exposure"]["step_s"]["mean"] == 300.0
    assert out["runs"][0]["timing"]["rounds"] == 144


@pytest.mark.slow
def test_demo_summary_rows() -> None:
    sim = Simulator(tiny(days=1.0))
    src = EvaluationInput("tiny", 300.0, sim.labels, sim.run(), sim.config.time.start_s,
                 sim.config.time.end_s)
    from models.evaluation.rounds import feed_rounds
    from service.commands.evaluate import Evaluator

    ev = Evaluator(300.0, src.start or 0.0, ["ours"])
    transitions = []
    for r in feed_rounds(src.chunks, src.step_s):
        ev.feed(r)
        transitions += ev.data["ours"].alerts
        ev.data["ours"].alerts = []
    rows = summarize_demo(sim.labels, transitions, src.start or 0.0, src.end or 0.0)
    failures = [r for r in rows if r["kind"] == "failure"]
    assert len(failures) == sum(1 for x in sim.labels if x["kind"] == "failure"
                                and x["time"] <= (src.end or 0.0))
    assert all(r["lead_s"] is None or r["lead_s"] >= 0 for r in failures)
    assert rows == sorted(rows, key=lambda r: r["time"])


def test_skipped_sets_are_not_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    from service.commands import evaluate
    from service.commands.usage import UsageError

    def no_model(*_: object) -> object:
        raise AssertionError("a skipped model set loaded its model")

    monkeypatch.setattr(evaluate, "_load_predictor", no_model)
    p = argparse.ArgumentParser()
    configure_parser(p)
    args = p.parse_args(["--scenario", "ci", "--days", "0.05", "--detectors", "ours", "lstm",
                         "fused", "--skip", "lstm", "fused", "--out", str(tmp_path), "--json"])
    assert run(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["detectors"] == ["ours"] and out["reliability"] == {}
    args = p.parse_args(["--detectors", "ours", "--skip", "ours", "--out", str(tmp_path)])
    with pytest.raises(UsageError, match="no detector set"):
        run(args)


def test_cached_seeds_are_reused_and_keyed(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`--cache`: a seed's scores are kept and reused by a later run with the same inputs
    (seeds in parallel processes, then `--docs` summarises them); other inputs miss."""
    from service.commands import evaluate

    cache = tmp_path / "cache"
    first = evaluate.evaluate_scenario("ci", [3], ["ours"], days=0.05, cache=cache)
    kept = sorted(cache.glob("ci-3-*.pkl"))
    assert len(kept) == 1

    def no_simulation(*_: object, **__: object) -> object:
        raise AssertionError("a cached seed was simulated again")

    monkeypatch.setattr(evaluate, "evaluate_source", no_simulation)
    again = evaluate.evaluate_scenario("ci", [3], ["ours"], days=0.05, cache=cache)
    assert again["results"] == first["results"]
    with pytest.raises(AssertionError, match="simulated again"):  # other days: another key
        evaluate.evaluate_scenario("ci", [3], ["ours"], days=0.06, cache=cache)
