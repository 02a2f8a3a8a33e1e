"""bench.memory runs: a tiny fleet through the real assembly with the shipped model, past an
hour boundary (no figures asserted: the bench reports them, docs/design.md records them)."""

from __future__ import annotations

import json

import pytest

from bench.memory import main


@pytest.mark.slow
def test_the_memory_bench_runs_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--gpus", "16", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["gpus"] == 16 and r["links"] == 16 * 18 and r["ports"] == 16
    assert r["store_nbytes_mb"] > 0 and 0 < r["rss_mb"] <= r["peak_mb"]
    assert r["service_mb"] == pytest.approx(r["rss_mb"] - r["generator_mb"])
    assert r["service_peak_mb"] == pytest.approx(r["peak_mb"] - r["generator_mb"])
    assert r["peak_within_budget"] is (r["service_peak_mb"] <= 2048)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--gpus", "4"])
    assert exc.value.code == 2


@pytest.mark.slow
def test_the_layout_before_runs_and_leaves_the_module_as_it_was(
        capsys: pytest.CaptureFixture[str]) -> None:
    import service.stages.windows as windows

    chunk = windows.ROLLUP_CHUNK
    assert main(["--gpus", "16", "--json", "--before"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["layout"] == "before" and chunk == windows.ROLLUP_CHUNK
    assert main(["--gpus", "16", "--json"]) == 0
    now = json.loads(capsys.readouterr().out)
    # Every gauge's range in every tier, against three of them: the arrays are larger.
    assert now["layout"] == "now" and now["store_nbytes_mb"] < r["store_nbytes_mb"]


def test_before_and_compare_do_not_go_together() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--before", "--compare"])
    assert exc.value.code == 2
