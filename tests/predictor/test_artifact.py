"""A tiny model saved and loaded back, and every way a damaged artifact must be refused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from models.predictor.artifact import (
    FORMAT_VERSION,
    MODEL_FILE,
    WEIGHTS_FILE,
    ArtifactError,
    ModelArtifact,
    ScopeModel,
    checksum,
    load,
    save,
)
from models.predictor.calibration import (
    ConstantCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
)

GPU_FEATURES = ["gpu_temp", "ecc_sbe_volatile", "pcie_replay", "missing_gpu"]
IB_FEATURES = ["ib_symbol_error", "ib_ber_log10"]
EXPECT = {"gpu": GPU_FEATURES, "ib_port": IB_FEATURES}
GRID = np.linspace(0.0, 1.0, 101, dtype=np.float32)


class Tiny(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(n_in, 3, batch_first=True)
        self.head = nn.Linear(3, n_out)


class Smuggled:
    """Not a tensor: torch.save pickles it, and weights_only loading must refuse it."""

    def __init__(self) -> None:
        self.payload = "anything"


def artifact() -> ModelArtifact:
    torch.manual_seed(0)
    gpu = ScopeModel(
        features=list(GPU_FEATURES), heads=["M1_hbm@24h", "M2_gpu_hard@24h"],
        scaler_mean=[60.0, 0.1, 0.0, 0.02], scaler_scale=[8.0, 0.5, 1.0, 0.1],
        calibrators=[IsotonicCalibrator([0.1, 0.5, 0.9], [0.0, 0.2, 0.7]),
                     PlattCalibrator(1.3, -2.0)],
        state_dict=Tiny(4, 2).state_dict())
    ib = ScopeModel(
        features=list(IB_FEATURES), heads=["M5_ib@24h"],
        scaler_mean=[0.0, -12.0], scaler_scale=[1.0, 2.0],
        calibrators=[ConstantCalibrator(0.001)],
        state_dict=nn.Linear(2, 1).state_dict())
    return ModelArtifact(config={"hidden": 3, "window_h": 24, "horizons_h": [24]},
                         scopes={"gpu": gpu, "ib_port": ib},
                         card={"data": "synthetic", "metrics": {"auprc": 0.5}},
                         version="test-1")


def saved(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    save(artifact(), d)
    return d


def edit_json(d: Path, change: Any) -> None:
    meta = json.loads((d / MODEL_FILE).read_text())
    change(meta)
    (d / MODEL_FILE).write_text(json.dumps(meta))


def test_round_trip_keeps_tensors_calibrators_and_metadata(tmp_path: Path) -> None:
    original = artifact()
    d = tmp_path / "model"
    digest = save(original, d)
    assert digest == checksum(d / WEIGHTS_FILE)
    assert sorted(p.name for p in d.iterdir()) == [MODEL_FILE, WEIGHTS_FILE]  # no temp files
    back = load(d, expect_features=EXPECT)
    assert back.version == "test-1" and back.config == original.config
    assert back.card == original.card and back.created is not None
    for name, want in original.scopes.items():
        got = back.scopes[name]
        assert got.features == want.features and got.heads == want.heads
        assert got.scaler_mean == want.scaler_mean and got.scaler_scale == want.scaler_scale
        assert got.state_dict.keys() == want.state_dict.keys()
        assert all(torch.equal(got.state_dict[k], v) for k, v in want.state_dict.items())
        for c_got, c_want in zip(got.calibrators, want.calibrators, strict=True):
            np.testing.assert_array_equal(c_got.apply(GRID), c_want.apply(GRID))
    meta = json.loads((d / MODEL_FILE).read_text())
    assert meta["format_version"] == FORMAT_VERSION
    assert meta["scopes"]["gpu"]["tensors"]["head.weight"] == [2, 3]
    # The loaded weights drive a model of the same shape.
    Tiny(4, 2).load_state_dict(back.scopes["gpu"].state_dict)


def test_saving_again_replaces_the_pair(tmp_path: Path) -> None:
    d = saved(tmp_path)
    a = artifact()
    a.version = "test-2"
    a.scopes["gpu"].state_dict = Tiny(4, 2).state_dict()
    save(a, d)
    back = load(d)
    assert back.version == "test-2"
    assert torch.equal(back.scopes["gpu"].state_dict["head.weight"],
                       a.scopes["gpu"].state_dict["head.weight"])


def test_one_flipped_byte_fails_the_checksum(tmp_path: Path) -> None:
    d = saved(tmp_path)
    data = bytearray((d / WEIGHTS_FILE).read_bytes())
    data[len(data) // 2] ^= 0x01
    (d / WEIGHTS_FILE).write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=r"weights\.pt: checksum mismatch.*retrain"):
        load(d)


def test_weights_from_another_save_are_refused(tmp_path: Path) -> None:
    d = saved(tmp_path)
    other = artifact()
    other.scopes["gpu"].state_dict = Tiny(4, 2).state_dict()
    save(other, tmp_path / "other")
    (d / WEIGHTS_FILE).write_bytes((tmp_path / "other" / WEIGHTS_FILE).read_bytes())
    with pytest.raises(ArtifactError, match="checksum mismatch"):
        load(d)


def test_other_format_version_names_both(tmp_path: Path) -> None:
    d = saved(tmp_path)
    edit_json(d, lambda m: m.update(format_version=999))
    with pytest.raises(ArtifactError, match=rf"model\.json: format version 999, but this "
                                            rf"gpuhealth reads format version {FORMAT_VERSION}"):
        load(d)


def test_truncated_model_json(tmp_path: Path) -> None:
    d = saved(tmp_path)
    text = (d / MODEL_FILE).read_text()
    (d / MODEL_FILE).write_text(text[: len(text) // 2])
    with pytest.raises(ArtifactError, match=r"model\.json: not valid JSON.*gpuhealth train"):
        load(d)


def test_missing_key_in_model_json(tmp_path: Path) -> None:
    d = saved(tmp_path)
    edit_json(d, lambda m: m.pop("weights_sha256"))
    with pytest.raises(ArtifactError, match="missing key 'weights_sha256'"):
        load(d)


def test_missing_files_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="no model directory"):
        load(tmp_path / "nowhere")
    d = saved(tmp_path)
    (d / WEIGHTS_FILE).unlink()
    with pytest.raises(ArtifactError, match=r"weights\.pt: missing; retrain with `gpuhealth"):
        load(d)
    (d / MODEL_FILE).unlink()
    with pytest.raises(ArtifactError, match=r"model\.json: missing"):
        load(d)


def test_pickled_object_is_refused_even_with_a_matching_checksum(tmp_path: Path) -> None:
    d = saved(tmp_path)
    torch.save({"gpu": {"head.weight": Smuggled()}}, d / WEIGHTS_FILE)
    digest = hashlib.sha256((d / WEIGHTS_FILE).read_bytes()).hexdigest()
    edit_json(d, lambda m: m.update(weights_sha256=digest))
    with pytest.raises(ArtifactError, match=r"cannot be read as plain tensors.*Smuggled"):
        load(d)


def test_tensor_shapes_must_match_the_record(tmp_path: Path) -> None:
    d = saved(tmp_path)
    edit_json(d, lambda m: m["scopes"]["gpu"]["tensors"].update({"head.weight": [2, 4]}))
    with pytest.raises(ArtifactError, match=r"'gpu' tensors differ.*\['head\.weight'\]"):
        load(d)


def test_expected_features_differ(tmp_path: Path) -> None:
    d = saved(tmp_path)
    now = {"gpu": [*GPU_FEATURES[:2], "nvlink_down_links", *GPU_FEATURES[3:]],
           "ib_port": IB_FEATURES}
    with pytest.raises(ArtifactError, match=r"added \['nvlink_down_links'\], "
                                            r"removed \['pcie_replay'\]"):
        load(d, expect_features=now)
    with pytest.raises(ArtifactError, match="another order"):
        load(d, expect_features={"gpu": GPU_FEATURES[::-1], "ib_port": IB_FEATURES})
    with pytest.raises(ArtifactError, match="scope 'ib_port' is not one this gpuhealth"):
        load(d, expect_features={"gpu": GPU_FEATURES})
    # A scope the code knows but the artifact lacks is fine.
    load(d, expect_features={**EXPECT, "nvlink": ["x"]})


def test_scaler_and_calibrator_lengths(tmp_path: Path) -> None:
    d = saved(tmp_path)
    edit_json(d, lambda m: m["scopes"]["gpu"]["scaler"]["mean"].pop())
    with pytest.raises(ArtifactError, match="4 features but a scaler of 3 means and 4 scales"):
        load(d)
    d = saved(tmp_path / "again")
    edit_json(d, lambda m: m["scopes"]["gpu"]["calibrators"].pop())
    with pytest.raises(ArtifactError, match="2 heads but 1 calibrators"):
        load(d)
    d = saved(tmp_path / "bad_kind")
    edit_json(d, lambda m: m["scopes"]["gpu"]["calibrators"][0].update(kind="beta"))
    with pytest.raises(ArtifactError, match="calibrator 0: unknown calibrator kind 'beta'"):
        load(d)


def test_save_refuses_inconsistent_scopes_and_writes_nothing(tmp_path: Path) -> None:
    a = artifact()
    a.scopes["gpu"].scaler_scale.pop()
    with pytest.raises(ArtifactError, match="4 features but a scaler of 4 means and 3 scales"):
        save(a, tmp_path / "model")
    a = artifact()
    a.config["bad"] = object()
    with pytest.raises(ArtifactError, match="not JSON-safe"):
        save(a, tmp_path / "model")
    assert not (tmp_path / "model").exists()
