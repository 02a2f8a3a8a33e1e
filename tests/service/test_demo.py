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


def test_demo_serves_the_api_while_it_runs(tmp_path: Path) -> None:
    seen: list[int] = []

    def probe(url: str) -> None:
        seen.append(httpx.get(f"{url}/healthz", timeout=5).status_code)

    run_demo(_args(tmp_path, port=18080), out=io.StringIO(), on_api=probe)
    assert seen == [200]


def test_demo_json_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["demo", "--speed", "0", "--port", "0", "--json", "--data-dir",
               str(tmp_path / "d")])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["samples"] > 1_000_000 and summary["rows"]
