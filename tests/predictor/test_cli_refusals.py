"""`gpuhealth train` and `gpuhealth evaluate` refuse what they cannot use with one clear line and
exit code 2, before any simulation or training starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.commands.cli import main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(argv)
    return rc, capsys.readouterr().err


def test_train_refuses_a_missing_trace_or_scenario(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _run(["train", "--trace", str(tmp_path / "nope"), "--out", str(tmp_path / "m")],
                   capsys)
    assert rc == 2 and "gpuhealth train: no trace at" in err
    rc, err = _run(["train", "--scenario", "nosuch", "--out", str(tmp_path / "m")], capsys)
    assert rc == 2 and "no scenario 'nosuch'" in err
    assert not (tmp_path / "m").exists()  # nothing written


def test_evaluate_refuses_an_unusable_model(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _run(["evaluate", "--model", str(tmp_path / "nope"), "--detectors", "lstm",
                    "--days", "1", "--out", str(tmp_path / "e")], capsys)
    assert rc == 2 and "no model directory" in err and "gpuhealth train" in err
    rc, err = _run(["evaluate", "--model", "none", "--detectors", "ours", "fused",
                    "--days", "1", "--out", str(tmp_path / "e")], capsys)
    assert rc == 2 and "the fused set(s) need a model" in err
    assert not (tmp_path / "e").exists()
