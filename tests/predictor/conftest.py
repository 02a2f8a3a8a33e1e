"""A tiny model trained on a few simulated days, shared by the predictor tests: recording and
training take seconds, which keeps `make test` fast (the shipped model is trained by the
command its model card names)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from collectors.catalog import Scope
from models.evaluation.events import Failure
from models.evaluation.sources import scenario_config, simulator_source
from models.predictor.artifact import save
from models.predictor.dataset import RunFeatures, Targets, targets
from models.predictor.package import to_artifact
from models.predictor.train import ScopeResult, TrainConfig, train_scope
from service.commands.train import record_source

TINY = TrainConfig(window_h=12, hidden=8, epochs=2, batch=128, threads=1, seed=5)


@dataclass
class Recorded:
    runs: dict[Scope, list[RunFeatures]]
    failures: list[list[Failure]]

    def targets(self, scope: Scope) -> list[Targets]:
        pairs = zip(self.runs[scope], self.failures, strict=True)
        return [targets(r, f, TINY.horizons, TINY.window_h) for r, f in pairs]


@pytest.fixture(scope="session")
def recorded() -> Recorded:
    runs: dict[Scope, list[RunFeatures]] = {}
    failures = []
    for seed in (11, 12):
        per_scope, fails = record_source(simulator_source(scenario_config("ci", seed, days=3)))
        for scope, rf in per_scope.items():
            runs.setdefault(scope, []).append(rf)
        failures.append(fails)
    return Recorded(runs, failures)


def train_all(rec: Recorded, cfg: TrainConfig = TINY) -> list[ScopeResult]:
    return [train_scope(s, rec.runs[s], rec.targets(s), cfg) for s in (Scope.GPU, Scope.IB_PORT)]


@pytest.fixture(scope="session")
def tiny(recorded: Recorded) -> list[ScopeResult]:
    return train_all(recorded)


@pytest.fixture(scope="session")
def tiny_model(tiny: list[ScopeResult], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model")
    meta: dict[str, Any] = {"command": "tests/predictor/conftest.py", "data": []}
    save(to_artifact(tiny, TINY, meta, version="lstm-tiny"), out)
    return out
