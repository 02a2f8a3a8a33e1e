"""Fine-tuning (`gpuhealth train --init`): training starts from the init model's weights and
scaler, scores them as epoch 0 and keeps them when no epoch beats them, recalibrates on the new
data (a head with no validation positive keeps its calibrator); `--scenario --init` writes an
artifact whose card names the init model; an init model of another shape, features, heads or
architecture is refused before anything is simulated or written."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from collectors.catalog import Scope
from models.predictor.finetune import FINE_TUNE_LR, InitMismatch, load_init
from models.predictor.package import ARCHITECTURE, Predictor
from models.predictor.train import train_scope
from service.commands.cli import main
from tests.predictor.conftest import TINY, Recorded

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "artifacts" / "default"


@pytest.mark.slow
def test_training_starts_from_the_init_model(recorded: Recorded, tiny_model: Path) -> None:
    init = load_init(tiny_model, ARCHITECTURE)
    scope = Scope.GPU
    si = init.scopes[scope]
    # No epoch: the init model's weights come back as they were, recalibrated.
    res = train_scope(scope, recorded.runs[scope], recorded.targets(scope),
                      replace(TINY, epochs=0), init=si)
    assert [r["epoch"] for r in res.history] == [0.0] and res.metrics["best_epoch"] == 0
    got = res.model.state_dict()
    assert all(torch.equal(got[k], v) for k, v in si.state_dict.items())
    assert np.array_equal(res.scaler.mean, si.scaler.mean)
    assert np.array_equal(res.scaler.scale, si.scaler.scale)
    kept = res.metrics["init_calibrators_kept"]
    assert kept and len(kept) < len(res.heads)  # some heads saw positives, some did not
    for j, h in enumerate(res.heads):
        if h in kept:
            assert res.calibrators[j] is si.calibrators[j]
        else:
            assert res.calibrators[j] is not si.calibrators[j]
    # One epoch at fine-tuning's rate moves the weights, from the init model's, not afresh.
    tuned = train_scope(scope, recorded.runs[scope], recorded.targets(scope),
                        replace(TINY, epochs=1, lr=FINE_TUNE_LR, patience=1), init=si)
    assert [r["epoch"] for r in tuned.history] == [0.0, 1.0]
    assert np.array_equal(tuned.scaler.mean, si.scaler.mean)
    scratch = train_scope(scope, recorded.runs[scope], recorded.targets(scope),
                          replace(TINY, epochs=1, lr=FINE_TUNE_LR, patience=1))
    w = "lstm.weight_ih_l0"
    moved = float((tuned.model.state_dict()[w] - si.state_dict[w]).abs().max())
    assert moved < float((scratch.model.state_dict()[w] - si.state_dict[w]).abs().max())


@pytest.mark.slow
def test_scenario_training_fine_tunes_and_the_card_names_the_init(
        tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m"
    rc = main(["train", "--scenario", "ci", "--seeds", "11", "--days", "2", "--init",
               str(tiny_model), "--epochs", "1", "--threads", "1", "--no-progress", "--json",
               "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    card = json.loads(cap.out[cap.out.index("{"):])
    ft = card["fine_tuned_from"]
    assert ft["version"] == "lstm-tiny" and ft["path"] == str(tiny_model)
    assert (ft["lr"], ft["epochs"], ft["patience"]) == (FINE_TUNE_LR, 1, 3)
    assert card["train_config"]["hidden"] == 8 and card["train_config"]["window_h"] == 12
    assert f"--init {tiny_model}" in card["command"]
    text = (out / "MODEL_CARD.md").read_text()
    assert "Fine-tuned from **lstm-tiny**" in text and "learning rate 0.0002" in text
    p = Predictor.load(out)
    assert set(p.scopes) == {Scope.GPU, Scope.IB_PORT} and p.version != "lstm-tiny"


def _edited(src: Path, tmp: Path, edit: str) -> Path:
    dst = tmp / "init"
    shutil.copytree(src, dst)
    meta = json.loads((dst / "model.json").read_text())
    if edit == "feature":
        meta["scopes"]["gpu"]["features"][0] = "not_a_feature"
    elif edit == "head":
        meta["scopes"]["gpu"]["heads"][0] = "M9_other@1h"
    else:
        meta["config"]["architecture"] = "FailureLSTM/1"
    (dst / "model.json").write_text(json.dumps(meta))
    return dst


@pytest.mark.parametrize(("flags", "edit", "said"), [
    (["--hidden", "4"], None, "has hidden size 24, the training asks for 4"),
    (["--window", "12"], None, "has window 24 h, the training asks for 12"),
    ([], "feature", "trained on other features than this gpuhealth computes"),
    ([], "head", "scope 'gpu' has heads ['M9_other@1h'"),
    ([], "architecture", "architecture 'FailureLSTM/1', this gpuhealth trains"),
])
def test_a_mismatched_init_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      flags: list[str], edit: str | None, said: str) -> None:
    init = "default" if edit is None else str(_edited(SHIPPED, tmp_path, edit))
    out = tmp_path / "m"
    assert main(["train", "--scenario", "ci", "--init", init, *flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cannot fine-tune: --init" in err and said in err, err
    assert not out.exists()  # refused before any simulation or training


def test_a_missing_init_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InitMismatch, match="no model directory"):
        load_init(tmp_path / "nope", ARCHITECTURE)
