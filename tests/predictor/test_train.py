"""Training: seeded and reproducible, an artifact that scores exactly as the trained model did,
refusals of artifacts this gpuhealth cannot run, calibration that holds on held-out data, and a
fused risk that a hard rule can only raise."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from collectors.catalog import Scope
from models.detectors.findings import Finding
from models.detectors.fusion import fuse
from models.evaluation.events import Failure
from models.predictor.artifact import ArtifactError
from models.predictor.dataset import RunFeatures, targets
from models.predictor.features import FEATURES, n_hourly
from models.predictor.package import Predictor, ScopeRuntime
from models.predictor.train import ScopeResult, TrainConfig, train_scope
from tests.predictor.conftest import Recorded, train_all

HOUR = 3600.0


@pytest.mark.slow
def test_training_is_deterministic(recorded: Recorded, tiny: list[ScopeResult]) -> None:
    again = train_all(recorded)
    for a, b in zip(tiny, again, strict=True):
        sa, sb = a.model.state_dict(), b.model.state_dict()
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
        assert a.history == b.history


@pytest.mark.slow
def test_saved_model_scores_exactly_as_trained(recorded: Recorded, tiny: list[ScopeResult],
                                               tiny_model: Path) -> None:
    loaded = Predictor.load(tiny_model)
    assert loaded.version == "lstm-tiny" and loaded.window_h == 12
    for r in tiny:
        run = recorded.runs[r.scope][0]
        ents = np.arange(run.x.shape[1], dtype=np.int64)
        x = run.windows(np.full(len(ents), run.hours - 1, np.int64), ents, 12)
        want = ScopeRuntime(r.scope, r.model, r.scaler, r.calibrators, r.heads).probabilities(x)
        got = loaded.scopes[r.scope].probabilities(x)
        np.testing.assert_array_equal(got, want)
        assert got.shape == (len(ents), len(r.heads)) and np.all((got >= 0) & (got <= 1))


@pytest.mark.slow
def test_artifacts_this_gpuhealth_cannot_run_are_refused(tiny_model: Path,
                                                         tmp_path: Path) -> None:
    bad = tmp_path / "arch"
    shutil.copytree(tiny_model, bad)
    meta = json.loads((bad / "model.json").read_text())
    meta["config"]["architecture"] = "FailureTransformer/9"
    (bad / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match=r"FailureTransformer/9.*retrain"):
        Predictor.load(bad)
    corrupt = tmp_path / "corrupt"
    shutil.copytree(tiny_model, corrupt)
    raw = bytearray((corrupt / "weights.pt").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (corrupt / "weights.pt").write_bytes(bytes(raw))
    with pytest.raises(ArtifactError, match=r"sha256|checksum"):
        Predictor.load(corrupt)
    renamed = tmp_path / "features"
    shutil.copytree(tiny_model, renamed)
    meta = json.loads((renamed / "model.json").read_text())
    meta["scopes"]["gpu"]["features"][0] = "gpu_temp_celsius"
    (renamed / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="gpu_temp_celsius"):
        Predictor.load(renamed)


def _synthetic(seed: int, hours: int = 480, ports: int = 64) -> tuple[RunFeatures, list[Failure]]:
    """IB ports whose symbol errors climb over the day before a failure (a clean precursor)."""
    rng = np.random.default_rng(seed)
    f = n_hourly(Scope.IB_PORT)
    x = rng.normal(0, 0.3, (hours, ports, f)).astype(np.float32)
    x[:, :, : f - 1] = np.abs(x[:, :, : f - 1]) * (rng.random((hours, ports, f - 1)) < 0.05)
    x[:, :, [f.name for f in FEATURES[Scope.IB_PORT]].index("missing_ib")] = 0.0
    keys = [f"n{p // 8}:mlx5_{p % 8}:1" for p in range(ports)]
    nodes = [k.split(":")[0] for k in keys]
    t = 1.7e9 + HOUR * np.arange(1, hours + 1)
    fails = []
    for p in range(ports):
        for h in rng.choice(np.arange(30, hours - 2), size=2, replace=False).tolist():
            fails.append(Failure(float(t[h] + 0.5 * HOUR), keys[p], Scope.IB_PORT, nodes[p],
                                 "M4_ib_link", onset=float(t[h] - 24 * HOUR)))
            for k in range(24):
                if rng.random() < 0.7:  # a noisy precursor: 70 % of its hours show errors
                    x[h - k, p, 0] = 2.0 + rng.normal(0, 0.3)
    return RunFeatures(Scope.IB_PORT, x, t, keys, nodes,
                       (t // HOUR).astype(np.int64) - 1), fails


def test_calibration_holds_on_held_out_data() -> None:
    runs, fails = zip(*(_synthetic(s) for s in (1, 2, 3)), strict=True)
    cfg = TrainConfig(window_h=12, hidden=8, epochs=4, threads=1, seed=1, horizons=(24,))
    tg = [targets(r, f, cfg.horizons) for r, f in zip(runs, fails, strict=True)]
    res = train_scope(Scope.IB_PORT, list(runs), tg, cfg)
    test = res.metrics["test"]["M4_ib_link@24h"]
    assert test["positives"] > 100
    assert test["average_precision"] > 0.5  # it learned the precursor
    assert test["ece"] < 0.03
    for b in test["reliability"]:
        if b["n"] >= 200:  # well-populated bins agree with what happened
            assert abs(b["predicted"] - b["observed"]) < 0.12, b


def test_a_hard_rule_never_lowers_the_fused_risk() -> None:
    rng = np.random.default_rng(0)
    n = 500
    for _ in range(50):
        soft = [Finding(f"r{i}", Scope.GPU, rng.random(n).astype(np.float32) *
                        (rng.random(n) < 0.3), np.zeros(n), 1.0, "s")
                for i in range(int(rng.integers(0, 4)))]
        model = Finding("lstm_M1_hbm", Scope.GPU, rng.random(n).astype(np.float32),
                        np.zeros(n), float("nan"), "model", source="model")
        before = fuse([*soft, model], {Scope.GPU: n})[Scope.GPU].risk
        hard = Finding("dbe", Scope.GPU, (rng.random(n) < 0.1).astype(np.float32),
                       np.zeros(n), 1.0, "h", hard=True)
        after = fuse([*soft, model, hard], {Scope.GPU: n})[Scope.GPU]
        assert np.all(after.risk >= before - 1e-7)
        assert np.all(after.risk[hard.risk == 1] == 1.0) and after.hard[hard.risk == 1].all()
        without_model = fuse(soft, {Scope.GPU: n})[Scope.GPU].risk
        assert np.all(before >= without_model - 1e-7)  # the model only adds risk
        # Agreement lifts risk, but a page needs one source sure on its own.
        alone = np.maximum(np.maximum(without_model, model.risk), 0.85)
        assert np.all(before <= alone + 1e-6)


def test_feature_lists_are_unique() -> None:
    for feats in FEATURES.values():
        names = [f.name for f in feats]
        assert len(names) == len(set(names))
