"""A trained predictor on disk: a directory holding `model.json` and `weights.pt`.

`weights.pt` holds tensors only ({scope: {name: tensor}}) and is always read with
`torch.load(weights_only=True)`, so a file that smuggles pickled objects is refused rather than
run. Everything else — architecture and training settings, per-scope feature names, scaler,
calibrators, the model card — is plain JSON in `model.json`, which also records the sha256 of
`weights.pt` and every tensor's shape. The checksum binds the pair: a corrupt, swapped or
half-replaced weights file does not load.

Saving writes each file to a temporary name and renames it into place, weights first and
`model.json` last. A crash in between leaves the old `model.json` next to new weights, and the
checksum refuses that pair; it never reads as a valid model.

Loading refuses anything it cannot vouch for with an ArtifactError that names the file and says
to retrain, including a model trained on other features than the running code computes.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from models.predictor.calibration import Calibrator, calibrator_from_json

FORMAT_VERSION = 1
MODEL_FILE = "model.json"
WEIGHTS_FILE = "weights.pt"
RETRAIN = "retrain with `gpuhealth train`"


class ArtifactError(ValueError):
    pass


@dataclass
class ScopeModel:
    features: list[str]
    heads: list[str]  # e.g. "M1_hbm@24h": a failure mode and a horizon
    scaler_mean: list[float]
    scaler_scale: list[float]
    calibrators: list[Calibrator]  # one per head, same order
    state_dict: dict[str, torch.Tensor]


@dataclass
class ModelArtifact:
    config: dict[str, Any]  # architecture and training settings, JSON-safe
    scopes: dict[str, ScopeModel]  # keyed by scope name: "gpu", "ib_port"
    card: dict[str, Any]  # free-form JSON-safe metadata: data, metrics
    version: str
    created: str | None = None  # UTC ISO time of the save; set by load, stamped by save


def checksum(path: Path) -> str:
    """sha256 hex of a file's bytes."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_scope(where: str, name: str, s: ScopeModel) -> None:
    """Lengths that must agree, or ArtifactError naming the scope."""
    nf, nh = len(s.features), len(s.heads)
    if len(set(s.features)) != nf or len(set(s.heads)) != nh:
        raise ArtifactError(f"{where}: scope {name!r} repeats a feature or head name; {RETRAIN}")
    if len(s.scaler_mean) != nf or len(s.scaler_scale) != nf:
        raise ArtifactError(
            f"{where}: scope {name!r} has {nf} features but a scaler of {len(s.scaler_mean)} "
            f"means and {len(s.scaler_scale)} scales; {RETRAIN}")
    if len(s.calibrators) != nh:
        raise ArtifactError(f"{where}: scope {name!r} has {nh} heads but "
                            f"{len(s.calibrators)} calibrators; {RETRAIN}")
    if not all(math.isfinite(m) for m in s.scaler_mean) or not all(
            math.isfinite(v) and v > 0.0 for v in s.scaler_scale):
        raise ArtifactError(f"{where}: scope {name!r} scaler needs finite means and positive "
                            f"finite scales; {RETRAIN}")
    if not all(isinstance(v, torch.Tensor) for v in s.state_dict.values()):
        raise ArtifactError(f"{where}: scope {name!r} state_dict must hold tensors only")


def _write_atomic(path: Path, data: bytes) -> None:
    """Temp file in the same directory, flushed to disk, then renamed over `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _sync_dir(directory: Path) -> None:
    # The renames themselves reach the disk only when the directory is synced (POSIX).
    if hasattr(os, "O_DIRECTORY"):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def save(artifact: ModelArtifact, directory: Path) -> str:
    """Write the artifact into `directory` (created if needed); returns the weights' sha256."""
    for name, s in artifact.scopes.items():
        _check_scope(str(directory), name, s)
    # A compact CPU copy of each tensor: a view would otherwise save its whole base storage.
    tensors = {name: {k: v.detach().to("cpu").clone(memory_format=torch.contiguous_format)
                      for k, v in s.state_dict.items()}
               for name, s in artifact.scopes.items()}
    buf = io.BytesIO()
    torch.save(tensors, buf)
    weights = buf.getvalue()
    digest = hashlib.sha256(weights).hexdigest()
    meta = {
        "format_version": FORMAT_VERSION,
        "version": artifact.version,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": artifact.config,
        "card": artifact.card,
        "scopes": {
            name: {
                "features": list(s.features),
                "heads": list(s.heads),
                "scaler": {"mean": [float(v) for v in s.scaler_mean],
                           "scale": [float(v) for v in s.scaler_scale]},
                "calibrators": [c.to_json() for c in s.calibrators],
                "tensors": {k: list(v.shape) for k, v in tensors[name].items()},
            }
            for name, s in artifact.scopes.items()
        },
        "weights_sha256": digest,
    }
    # Serialise before touching the disk: a config that is not JSON fails with nothing written.
    try:
        text = json.dumps(meta, indent=2) + "\n"
    except (TypeError, ValueError) as e:
        raise ArtifactError(f"{directory}: config or card is not JSON-safe ({e})") from e
    directory.mkdir(parents=True, exist_ok=True)
    _write_atomic(directory / WEIGHTS_FILE, weights)
    _write_atomic(directory / MODEL_FILE, text.encode("utf-8"))
    _sync_dir(directory)
    return digest


def _get(where: str, d: Mapping[str, Any], key: str, kind: type) -> Any:
    if key not in d:
        raise ArtifactError(f"{where}: missing key {key!r}; {RETRAIN}")
    v = d[key]
    if not isinstance(v, kind) or isinstance(v, bool):
        raise ArtifactError(f"{where}: {key!r} must be a {kind.__name__}, "
                            f"got {type(v).__name__}; {RETRAIN}")
    return v


def _strings(where: str, v: list[Any], what: str) -> list[str]:
    if not all(isinstance(x, str) for x in v):
        raise ArtifactError(f"{where}: {what} must be strings; {RETRAIN}")
    return list(v)


def _floats(where: str, v: list[Any], what: str) -> list[float]:
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in v):
        raise ArtifactError(f"{where}: {what} must be numbers; {RETRAIN}")
    return [float(x) for x in v]


def _read_meta(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ArtifactError(f"{path}: missing; {RETRAIN}")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{path}: not valid JSON ({e}); {RETRAIN}") from e
    if not isinstance(meta, dict):
        raise ArtifactError(f"{path}: not a JSON object; {RETRAIN}")
    found = meta.get("format_version")
    if found != FORMAT_VERSION:
        raise ArtifactError(f"{path}: format version {found!r}, but this gpuhealth reads "
                            f"format version {FORMAT_VERSION}; {RETRAIN}")
    return meta


def _scope_from_json(where: str, name: str, d: dict[str, Any]) -> ScopeModel:
    where = f"{where}: scope {name!r}"
    scaler = _get(where, d, "scaler", dict)
    calibrators: list[Calibrator] = []
    for i, c in enumerate(_get(where, d, "calibrators", list)):
        try:
            calibrators.append(calibrator_from_json(c))
        except ValueError as e:
            raise ArtifactError(f"{where}: calibrator {i}: {e}; {RETRAIN}") from e
    return ScopeModel(
        features=_strings(where, _get(where, d, "features", list), "features"),
        heads=_strings(where, _get(where, d, "heads", list), "heads"),
        scaler_mean=_floats(where, _get(where, scaler, "mean", list), "scaler means"),
        scaler_scale=_floats(where, _get(where, scaler, "scale", list), "scaler scales"),
        calibrators=calibrators,
        state_dict={},
    )


def _reason(e: Exception) -> str:
    """The line of torch's error that says what was found, without its advice to load the
    file unsafely."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    for ln in lines:
        if "WeightsUnpickler error:" in ln:
            return ln.split("WeightsUnpickler error:", 1)[1].split(". ")[0].strip()
    return lines[0] if lines else type(e).__name__


def _read_weights(path: Path, expected_sha: str,
                  shapes: Mapping[str, Mapping[str, list[int]]]) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        raise ArtifactError(f"{path}: missing; {RETRAIN}")
    found_sha = checksum(path)
    if found_sha != expected_sha:
        raise ArtifactError(
            f"{path}: checksum mismatch: sha256 {found_sha}, but {MODEL_FILE} records "
            f"{expected_sha}; the file is corrupt, swapped or from an interrupted save; {RETRAIN}")
    try:
        # weights_only: plain tensors and containers; a pickled object is refused, never run.
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ArtifactError(f"{path}: cannot be read as plain tensors ({_reason(e)}); "
                            f"gpuhealth never loads pickled objects; {RETRAIN}") from e
    if not isinstance(loaded, dict) or set(loaded) != set(shapes):
        got = sorted(loaded) if isinstance(loaded, dict) else type(loaded).__name__
        raise ArtifactError(f"{path}: holds scopes {got}, {MODEL_FILE} records "
                            f"{sorted(shapes)}; {RETRAIN}")
    for scope, recorded in shapes.items():
        sd = loaded[scope]
        if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
            raise ArtifactError(f"{path}: scope {scope!r} is not a dict of tensors; {RETRAIN}")
        actual = {k: list(v.shape) for k, v in sd.items()}
        if actual != dict(recorded):
            diff = sorted(k for k in set(actual) | set(recorded)
                          if actual.get(k) != recorded.get(k))
            raise ArtifactError(f"{path}: scope {scope!r} tensors differ from those recorded "
                                f"in {MODEL_FILE}: {diff}; {RETRAIN}")
    return loaded


def _check_features(where: str, scopes: Mapping[str, ScopeModel],
                    expect: Mapping[str, Sequence[str]]) -> None:
    for name, s in scopes.items():
        if name not in expect:
            raise ArtifactError(f"{where}: scope {name!r} is not one this gpuhealth predicts "
                                f"({sorted(expect)}); {RETRAIN}")
        want = list(expect[name])
        if s.features == want:
            continue
        added = [f for f in want if f not in s.features]
        removed = [f for f in s.features if f not in want]
        what = (f"added {added}, removed {removed}" if added or removed
                else "the same names in another order")
        raise ArtifactError(f"{where}: scope {name!r} was trained on other features than this "
                            f"gpuhealth computes ({what}); {RETRAIN}")


def load(directory: Path,
         expect_features: Mapping[str, Sequence[str]] | None = None) -> ModelArtifact:
    """The artifact in `directory`, checked end to end; ArtifactError if anything is off.

    `expect_features` maps scope name -> the feature names the running code computes, in order;
    every scope in the artifact must appear there with exactly those features.
    """
    if not directory.is_dir():
        raise ArtifactError(f"{directory}: no model directory; {RETRAIN}")
    model_path = directory / MODEL_FILE
    meta = _read_meta(model_path)
    where = str(model_path)
    version = _get(where, meta, "version", str)
    created = _get(where, meta, "created", str)
    config = _get(where, meta, "config", dict)
    card = _get(where, meta, "card", dict)
    sha = _get(where, meta, "weights_sha256", str)
    scopes_json = _get(where, meta, "scopes", dict)
    scopes: dict[str, ScopeModel] = {}
    shapes: dict[str, dict[str, list[int]]] = {}
    for name, d in scopes_json.items():
        if not isinstance(d, dict):
            raise ArtifactError(f"{where}: scope {name!r} is not a JSON object; {RETRAIN}")
        scopes[name] = _scope_from_json(where, name, d)
        _check_scope(where, name, scopes[name])
        recorded = _get(f"{where}: scope {name!r}", d, "tensors", dict)
        if not all(isinstance(v, list) and all(isinstance(n, int) for n in v)
                   for v in recorded.values()):
            raise ArtifactError(f"{where}: scope {name!r} tensor shapes must be lists of "
                                f"integers; {RETRAIN}")
        shapes[name] = recorded
    if expect_features is not None:
        _check_features(where, scopes, expect_features)
    weights = _read_weights(directory / WEIGHTS_FILE, sha, shapes)
    for name, s in scopes.items():
        s.state_dict = weights[name]
    return ModelArtifact(config=config, scopes=scopes, card=card, version=version,
                         created=created)
