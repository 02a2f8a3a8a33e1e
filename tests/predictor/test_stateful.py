"""The LSTM's chunk states carried hour by hour (models/predictor/stateful.py) give what the
windowed forward gives from scratch at every hour, across chunk restarts, gaps, entity joins
and a dropped state; and the training windows begin where the running state does
(models/predictor/chunks.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import Scope
from models.predictor.chunks import older_restart, restart_of, restarts_at, window_start
from models.predictor.features import HOURLY, hours_of
from models.predictor.package import Predictor
from models.predictor.stateful import ChunkStates
from service.stages.ingest import EventLog, Ingestor
from service.stages.scoring import StoreView
from service.stages.windows import WindowStore, window_config_for
from tests.pipeline.builders import T0, Rounds

HOUR = 3600.0


def test_chunk_arithmetic() -> None:
    p = 24
    hours = np.arange(1000, 1200, dtype=np.int64)
    old = older_restart(hours, p)
    age = hours - old
    assert age.min() == p and age.max() == 2 * p - 1  # reads P + 1 to 2P hours
    for h in hours.tolist():
        a, b = restart_of(h, p, 0), restart_of(h, p, 1)
        assert min(a, b) == older_restart(h, p) and abs(a - b) == p
        assert (restarts_at(h, p) is not None) == (h in (a, b))
    # Within a window of 2P hours ending at the hour, the memory begins at its restart.
    start = window_start(hours, 2 * p, p)
    assert np.array_equal(hours - 2 * p + 1 + start, old)


def _feed(ing: Ingestor, r: Rounds, k: int) -> None:
    rng = np.random.default_rng(k)
    for v in r.values.values():
        v += rng.random(v.shape) * (k % 3)
    ing.ingest(r.batch(T0 + k * HOUR), T0 + k * HOUR)


@pytest.mark.slow
@pytest.mark.parametrize("skip", [(), (30, 31, 32)])
def test_carried_states_equal_the_windowed_forward(tiny_model: Path,
                                                   skip: tuple[int, ...]) -> None:
    pred = Predictor.load(tiny_model)
    period = pred.window_h
    store = WindowStore(window_config_for(HOUR))
    ing = Ingestor(store, EventLog())
    view = StoreView(store, ing.events)
    states = ChunkStates()
    r = Rounds(nodes=2, gpus=2, links=2, ports=2)
    steps_before = 0
    for k in range(70):
        if k == 40:
            r = Rounds(nodes=3, gpus=2, links=2, ports=2)  # a node joins: states recomputed
        if k in skip:
            continue
        _feed(ing, r, k)
        for scope, rt in pred.scopes.items():
            v = view.scope(scope)
            last = hours_of(v).last
            x = HOURLY[scope](view, 2 * period)
            shape = (len(v), len(view.scope(Scope.NVLINK)) if scope is Scope.GPU else 0)
            steps_before = states.steps
            got = states.raw(rt, scope, x, last, period, shape)
            start = int(window_start(np.array([last]), 2 * period, period)[0])
            want = rt.raw(x, start)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
            if k in (20, 55) and scope is Scope.IB_PORT:
                assert states.steps - steps_before == 2  # one step of each state
        if k == 60:
            states.drop(Scope.NVLINK)  # the GPUs' inputs read links: their states go too
