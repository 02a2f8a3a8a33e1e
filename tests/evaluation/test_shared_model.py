"""The lstm and fused sets share one model computation per hour (models/evaluation/shared.py):
the same results as two models, the model run once per hour, and each forgetting applied once."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.findings import Finding
from models.detectors.view import FleetView
from models.evaluation.rounds import feed_rounds
from models.evaluation.shared import SharedModel
from models.evaluation.sources import simulator_source
from service.commands.evaluate import Evaluator, evaluate_source
from tests.evaluation.test_driver import tiny


class Recorder:
    """A stand-in model detector that records what it is told."""

    name = "lstm"

    def __init__(self) -> None:
        self.latest: dict[Scope, tuple[Any, list[str]]] = {}
        self.forgot: list[list[int]] = []
        self.detects = 0

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        self.detects += 1
        return []

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        self.forgot.append(keep.tolist())


def test_each_forgetting_reaches_the_shared_model_once() -> None:
    inner = Recorder()
    shared = SharedModel(inner)
    a, b = shared.handle(), shared.handle()
    first, second = np.array([0, 2, 3]), np.array([1, 2])
    a.forget(Scope.GPU, first)
    b.forget(Scope.GPU, first)  # the other pipeline follows the same forgetting: a no-op
    b.forget(Scope.GPU, second)  # b first to follow the next one this time
    a.forget(Scope.GPU, second)
    a.forget(Scope.IB_PORT, first)  # per scope
    b.forget(Scope.IB_PORT, first)
    assert inner.forgot == [[0, 2, 3], [1, 2], [0, 2, 3]]
    assert a.name == b.name == "lstm" and a.latest is inner.latest


def _run(share: bool) -> dict[str, Any]:
    return evaluate_source(simulator_source(tiny(days=2.0, seed=1)), ["lstm", "fused"], 1,
                           share=share)


def test_sharing_changes_no_result_and_halves_the_model_runs() -> None:
    shared, apart = _run(True), _run(False)
    for name in ("lstm", "fused"):
        assert shared["scores"][name] == apart["scores"][name]
        assert shared["alerts"][name] == apart["alerts"][name]
    assert shared["reliability"]["lstm"] == apart["reliability"]["lstm"]
    runs = shared["timing"]["model_runs"]
    assert set(runs) == {"lstm"} and runs["lstm"] > 0
    assert apart["timing"]["model_runs"] == {"lstm": runs["lstm"], "fused": runs["lstm"]}


def test_alerts_identical_round_by_round() -> None:
    src = simulator_source(tiny(days=2.0, seed=0))
    rounds = list(feed_rounds(src.chunks, src.step_s))
    evs = [Evaluator(src.step_s, src.start or 0.0, ["lstm", "fused"], 0, share=s)
           for s in (True, False)]
    for r in rounds:
        for ev in evs:
            ev.feed(r)
    for name in ("lstm", "fused"):
        assert evs[0].data[name].alerts == evs[1].data[name].alerts
        assert evs[0].data[name].alerts  # something to compare
