"""The fuzz benchmark's short form (docs/fuzz.md): the real service on loopback fed 3,000
hostile and valid inputs, `/write` line protocol and every other surface's class beside it,
every goal holding; and its control, one valid hard failure added, whose drain the benchmark
must see (so a run with 0 drains means none was requested, not that the drain file is never
written)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench.fuzz_run_surfaces import CLASSES
from tests.support.bench_run import run_bench

REPO = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 600  # a hung service fails the test instead of blocking the suite


def _fuzz(tmp_path: Path, *extra: str) -> tuple[int, dict[str, object]]:
    proc = run_bench(
        [sys.executable, "-m", "bench.fuzz", "--inputs", "3000", "--json",
         "--dir", str(tmp_path / "fuzz"), *extra],
        REPO, HANG_GUARD_S)
    assert proc.returncode in (0, 1), f"the service did not run:\n{proc.stderr[-4000:]}"
    report: dict[str, object] = json.loads(proc.stdout)
    return proc.returncode, report


@pytest.mark.slow  # two service starts (and the shards class's two), about a minute
def test_fuzz_holds_every_goal(tmp_path: Path) -> None:
    rc, rep = _fuzz(tmp_path)
    assert rep["inputs"] >= 3000  # type: ignore[operator]
    assert rep["status_5xx"] == 0 and rep["transport_errors"] == 0, rep["by_status"]
    assert rep["crashes"] == 0
    assert rep["canaries_sent"] > 0  # type: ignore[operator]
    assert rep["canaries_lost"] == 0 and rep["canaries_wrong"] == 0
    assert rep["drains"] == 0
    classes = rep["by_class"]
    assert isinstance(classes, dict)
    for name in ("valid", "junk", "not_lp", "long_number", "hostile_name", "out_of_range",
                 "bad_time", "skewed", "unknown", "telegraf", "new_name", "canary",
                 "body:plain"):
        assert classes.get(name, 0) > 0, f"no {name} input was sent"
    assert 0 < rep["gpus_held"] <= 2000  # type: ignore[operator]
    assert rep["pages"] == 0 and rep["level2_phantom"] == 0, rep["phantom_nodes"]
    assert rep["rss_peak_mib"] <= rep["rss_bound_mib"]  # type: ignore[operator]
    others = rep["classes"]
    assert isinstance(others, dict) and set(others) == set(CLASSES)
    for name, c in others.items():
        assert c["inputs"] > 0, f"the {name} class sent nothing"
        assert c["status_5xx"] == 0 and c["transport_errors"] == 0, (name, c["by_status"])
    # The /healthz stall goal (< 250 ms) is judged by the benchmark's own run, not here: on a
    # shared CI machine a timing bound would fail for reasons other than the service.
    missed = rep["missed"]
    assert isinstance(missed, list)
    assert not [m for m in missed if not m.startswith("/healthz stalled")], missed
    assert rc == (1 if missed else 0)


@pytest.mark.slow
def test_fuzz_sees_a_real_drain(tmp_path: Path) -> None:
    rc, rep = _fuzz(tmp_path, "--control", "--classes", "")
    assert rep["drains"] == 1
    assert rc == 1
    assert any("drains requested" in m for m in rep["missed"])  # type: ignore[attr-defined]
    assert rep["pages"] == 1  # its page reached the webhook receiver
