"""The lstm and fused sets share one model computation per hour (models/evaluation/shared.py):
the same results as two models, the model run once per hour, and each forgetting applied once."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

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


@pytest.mark.slow
def test_sharing_changes_no_result_and_halves_the_model_runs() -> None:
    shared, apart = _run(True), _run(False)
    for name in ("lstm", "fused"):
        assert shared["scores"][name] == apart["scores"][name]
        assert shared["alerts"][name] == apart["alerts"][name]
    assert shared["reliability"]["lstm"] == apart["reliability"]["lstm"]
    runs = shared["timing"]["model_runs"]
    assert set(runs) == {"lstm"} and runs["lstm"] > 0
    assert apart["timing"]["model_runs"] == {"lstm": runs["lstm"], "fused": runs["lstm"]}


@pytest.mark.slow
def test_alerts_identical_round_by_round(no_window_calibration: None) -> None:
    # Without a window calibration the model counts in full, so the lstm set alerts.
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


@pytest.mark.slow
def test_sharing_follows_the_stores_forgetting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node forgotten mid-run (as if silent past its windows; it reports again and comes back
    in new slots): the shared model follows each forgetting once, so its per-slot state (the
    persistence history, the newest probabilities) stays that of a model of its own."""
    from service.stages.windows import STORED, ScopeWindows

    real = ScopeWindows.silent
    src = simulator_source(tiny(days=3.0, seed=2))
    when = (src.start or 0.0) + 40 * 3600
    done: set[int] = set()

    def silent(self: ScopeWindows, now: float) -> npt.NDArray[np.bool_]:
        out = real(self, now)
        if now >= when and id(self) not in done:  # once per scope window of each store
            done.add(id(self))
            n = len(self.entities)
            # bool: a scope without entities (the simulator's fleet has no supplies) is empty
            out[:n] |= np.array([e.node == self.entities[0].node for e in self.entities[:n]],
                                bool)
        return out

    monkeypatch.setattr(ScopeWindows, "silent", silent)
    evs = [Evaluator(src.step_s, src.start or 0.0, ["lstm", "fused"], 2, share=s)
           for s in (True, False)]
    models = [evs[0].models["lstm"].inner, evs[1].models["lstm"].inner]
    compared = 0
    for r in feed_rounds(src.chunks, src.step_s):
        for ev in evs:
            ev.feed(r)
        if r.now > when:
            a, b = (m.post_rule.history for m in models)
            assert a.keys() == b.keys()
            for k in a:
                assert len(a[k]) == len(b[k])
                for x, y in zip(a[k], b[k], strict=True):
                    np.testing.assert_array_equal(x, y)
                compared += 1
            for sc, (p, _) in models[1].latest.items():
                np.testing.assert_array_equal(models[0].latest[sc][0], p)
    # Every scope of the two stores (GPU, NVLink, IB port and the empty chassis scopes)
    assert len(done) == 2 * len(STORED) and compared > 0  # ... it did forget
    for name in ("lstm", "fused"):
        assert evs[0].data[name].alerts == evs[1].data[name].alerts


def test_a_model_window_is_recorded_with_the_escalation_it_preceded() -> None:
    """The evaluator asks each set's model (a handle on the shared one) for the probabilities
    behind a model window: the offline pipeline has no service model slot to ask."""
    src = simulator_source(tiny(days=2.0, seed=0))
    ev = Evaluator(src.step_s, src.start or 0.0, ["ours", "fused"], 0)
    assert ev.model_of["ours"] is None and ev.model_of["fused"] is not None
    rounds = list(feed_rounds(src.chunks, src.step_s))
    for r in rounds:
        ev.feed(r)
    model = ev.model_of["fused"]
    slot = 0
    probs = model.probabilities(Scope.GPU, slot)
    assert probs is not None and all(k.count("@") == 1 for k in probs)
    # Make the newest hour say "HBM within a day" for GPU 0 and escalate it: the record
    # carries the model's raw window beside any rule's.
    p, heads = model.latest[Scope.GPU]
    p[slot, heads.index("M1_hbm@24h")] = 0.9
    from models.predictor.raw_windows import candidates

    raws = candidates(model.probabilities(Scope.GPU, slot), None, slot)
    assert [(r.source, r.mode, r.hi_h) for r in raws] == [("model", "M1_hbm", 24.0)]
