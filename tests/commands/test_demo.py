"""The demo end to end: simulator -> pipeline -> alerts, with the API up, as `make demo` runs it
(at full speed)."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import httpx
import pytest

from service.commands.cli import main
from service.commands.demo import run_demo


def _args(tmp_path: Path, **kw: object) -> argparse.Namespace:
    base = {"speed": 0.0, "seed": 0, "port": 0, "data_dir": tmp_path / "demo", "serve": False,
            "json": False}
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.mark.slow
def test_demo_catches_every_failure_that_has_a_precursor(tmp_path: Path) -> None:
    out = io.StringIO()
    summary = run_demo(_args(tmp_path), out=out)
    fails = [r for r in summary["rows"] if r["kind"] == "failure"]
    assert {r["mode"] for r in fails} >= {"M1_hbm", "M3_nvlink", "M4_ib_link", "M5_thermal"}
    with_precursor = [r for r in fails if r["precursor"]]
    assert with_precursor and all(r["alerted"] for r in with_precursor)
    # Prediction, not just detection: each was alerted a while before it happened.
    assert all(r["lead_s"] >= 600 for r in with_precursor if r["mode"] != "M6_sram")
    unobservable = [r for r in fails if r["mode"] == "M7_unobservable"]
    assert all(not r["alerted"] for r in unobservable)
    text = out.getvalue()
    assert "Injected failures:" in text and "False alarms:" in text
    assert (tmp_path / "demo" / "gpuhealth.db").exists()


@pytest.mark.slow
def test_demo_serves_the_api_while_it_runs(tmp_path: Path) -> None:
    seen: list[int] = []

    def probe(url: str) -> None:
        seen.append(httpx.get(f"{url}/healthz", timeout=5).status_code)

    run_demo(_args(tmp_path, port=18080), out=io.StringIO(), on_api=probe)
    assert seen == [200]


@pytest.mark.slow
def test_demo_json_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["demo", "--speed", "0", "--port", "0", "--json", "--data-dir",
               str(tmp_path / "d")])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["samples"] > 1_000_000 and summary["rows"]


@pytest.mark.slow
def test_the_demo_keeps_history_on_the_traces_clock_and_says_where_the_console_is(
        tmp_path: Path) -> None:
    """The console's charts ask for "the last hour" of the service's clock: the demo's API runs
    on the trace's, so the samples and risk it keeps are there; and its node and fleet pages
    read one risk per node."""
    seen: dict[str, object] = {}

    def look(url: str) -> None:
        fleet = httpx.get(f"{url}/v1/fleet", timeout=10).json()
        seen["at"] = fleet["at"]
        seen["fleet"] = {n["node"]: (n["risk"], n["level"]) for n in fleet["nodes"]}
        seen["nodes"] = {}
        for node in seen["fleet"]:  # type: ignore[attr-defined]
            d = httpx.get(f"{url}/v1/nodes/{node}", timeout=10).json()
            seen["nodes"][node] = (d["risk"], d["level"])  # type: ignore[index]
        gpu = httpx.get(f"{url}/v1/gpus/n0002:gpu1/metrics?metric=gpu_temp", timeout=10)
        risk = httpx.get(f"{url}/v1/nodes/n0002/risk", timeout=10)
        seen["gpu"], seen["risk"] = gpu.json(), risk.json()
        assert gpu.status_code == risk.status_code == 200, (gpu.text, risk.text)
        seen["page"] = httpx.get(f"{url}/", timeout=10).status_code

    out = io.StringIO()
    summary = run_demo(_args(tmp_path, port=18090), out=out, on_done=look)
    assert "console at http://127.0.0.1:" in out.getvalue()
    assert seen["page"] == 200
    assert seen["nodes"] == seen["fleet"]  # one risk and level per node on both pages
    end = summary["end"]
    for answer in (seen["gpu"], seen["risk"]):
        assert isinstance(answer, dict)
        series = answer["series"]
        points = [t for s in series for t in s["times"]]
        assert points, answer  # charts with data ...
        # ... in the trace's last hour (to a step: its last round is at end - step), not in
        # the wall clock's, a year or more after the trace
        assert end - 3600 - 60 <= min(points) and max(points) <= end
