"""Receivers and the remediation hook validate their own settings at load, all problems at
once, and no value (a password, a routing key) is ever echoed."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.commands.cli import main
from service.settings import SettingsError, load

BAD = """
notify:
  receivers:
    - {name: mail, type: email, config: {to: [], host: smtp.example.com,
       username: ops, password: hunter2-very-secret, bogus: 1}}
    - {name: pd, type: pagerdutyy, config: {routing_key: rk-very-secret}}
remediation: {mode: auto, hook: command, hook_config: {drain: []}}
"""


def test_every_plugin_problem_is_reported_without_values(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(BAD)
    with pytest.raises(SettingsError) as err:
        load(cfg)
    text = str(err.value)
    for part in ("receiver 'mail' (email)", "to:", "from_addr", "bogus",
                 "unknown type 'pagerdutyy'", "remediation hook 'command'", "release"):
        assert part in text, part
    assert "hunter2" not in text and "rk-very-secret" not in text


def test_a_hook_is_not_checked_when_remediation_is_off(tmp_path: Path) -> None:
    cfg = tmp_path / "off.yaml"
    cfg.write_text("remediation: {mode: 'off', hook: nosuch}\n")
    assert load(cfg).remediation.hook == "nosuch"


def test_the_cli_refuses_bad_settings_with_exit_code_2(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(BAD)
    assert main(["serve", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuhealth serve: invalid settings") and "hunter2" not in err
