"""Writing a trained model: the artifact and its model card, then what the command prints
(the card as JSON, or one line), the same for `gpuhealth train` from simulations, traces and
InfluxDB history."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_artifact(artifact: Any, out: Path, as_json: bool, said: Callable[[str], str]) -> None:
    """Save a trained artifact and its model card; print the card as JSON, or `said(digest)`."""
    from models.predictor.artifact import save
    from models.predictor.card import model_card

    out.mkdir(parents=True, exist_ok=True)
    digest = save(artifact, out)
    (out / "MODEL_CARD.md").write_text(model_card(artifact, digest), encoding="utf-8")
    if as_json:
        print(json.dumps({"artifact": str(out), "sha256": digest, **artifact.card}, indent=2,
                         default=str))
    else:
        print(said(digest))
