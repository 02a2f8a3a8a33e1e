"""`gpuhealth route-test` shows which receivers an alert would reach."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.commands.cli import main

CONFIG = """
notify:
  receivers:
    - {name: ops-email, type: email, config: {to: [ops@example.com],
       from_addr: gpuhealth@example.com, host: smtp.example.com}}
    - {name: oncall, type: pagerduty, config: {routing_key: abc}}
  route:
    receiver: record
    group_by: [node]
    routes:
      - {matchers: ["level>=2"], receiver: ops-email, continue: true}
      - {matchers: ["level>=3", "scope=~gpu|node"], receiver: oncall, repeat_interval_s: 3600}
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    p = tmp_path / "gpuhealth.yaml"
    p.write_text(CONFIG)
    return p


def _routes(config: Path, capsys: pytest.CaptureFixture[str], *labels: str) -> list[str]:
    assert main(["route-test", "--config", str(config), "--json", *labels]) == 0
    return [r["receiver"] for r in json.loads(capsys.readouterr().out)["routes"]]


def test_route_test_follows_the_tree(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _routes(config, capsys, "level=3", "scope=gpu", "node=n1") == ["ops-email", "oncall"]
    assert _routes(config, capsys, "level=3", "scope=ib_port", "node=n1") == ["ops-email"]
    assert _routes(config, capsys, "level=1", "node=n1") == ["record"]
    assert _routes(config, capsys, "level=\u00b2", "node=n1") == ["record"]  # not a number


def test_route_test_refuses_bad_input(config: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["route-test", "--config", str(config), "level"]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("notify:\n  route: {receiver: nobody}\n")
    assert main(["route-test", "--config", str(bad), "level=3"]) == 2
    assert "unknown receivers" in capsys.readouterr().err
    bad.write_text("notify:\n  route: {receiver: record, routes: [{matchers: "
                   "['alertname=~(?=Gpu).*']}]}\n")  # lookahead: RE2 cannot run it
    assert main(["route-test", "--config", str(bad), "level=3"]) == 2
    assert "alertname=~(?=Gpu).*" in capsys.readouterr().err
