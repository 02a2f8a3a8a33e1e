"""The hourly run's inputs, extended hour by hour, equal a full recomputation of the window at
every hour, through entity churn and forgetting (models/predictor/hour_cache.py)."""

from __future__ import annotations

import numpy as np

from collectors.catalog import Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from models.predictor.features import HOURLY, hours_of
from models.predictor.hour_cache import HourCache
from service.stages.ingest import EventLog, Ingestor
from service.stages.scoring import StoreView
from service.stages.windows import WindowStore, window_config_for
from tests.pipeline.builders import T0, Rounds

HOUR = 3600.0
N = 6  # a short window, so the test runs through whole-window turnovers


def _feed(ing: Ingestor, r: Rounds, k: int) -> None:
    rng = np.random.default_rng(k)
    for v in r.values.values():
        v += rng.random(v.shape) * (k % 3)  # values that move, counters that grow
    ing.ingest(r.batch(T0 + k * HOUR), T0 + k * HOUR)


def test_extended_windows_equal_full_recomputation() -> None:
    store = WindowStore(window_config_for(HOUR))
    ing = Ingestor(store, EventLog())
    view = StoreView(store, ing.events)
    cache = HourCache()
    r = Rounds(nodes=3, gpus=2, links=2, ports=2)
    computed = []
    for k in range(20):
        if k == 9:  # a GPU's links grow mid-run: the GPU features' inputs changed shape
            t = EntityTable(Scope.NVLINK, [Entity.nvlink("n9", 0, 0)])
            b = Batch()
            b.add(Frame(t, np.zeros(1, np.int32), np.full(1, T0 + k * HOUR - 60),
                        np.zeros((1, r.values[Scope.NVLINK].shape[1]))))
            ing.ingest(b, T0 + k * HOUR - 60)
        _feed(ing, r, k)
        if k == 14:  # a forgetting renumbers slots: what was held is dropped
            cache.drop(Scope.NVLINK)
        for scope, features in HOURLY.items():
            last = hours_of(view.scope(scope)).last
            if last < 0:
                continue
            before = cache.hours_computed
            got = cache.window(view, scope, last, N, features)
            want = features(view, N)
            np.testing.assert_array_equal(got, want)
            computed.append((k, scope, cache.hours_computed - before))
    gpu = {k: c for k, s, c in computed if s is Scope.GPU}
    # One hour of every GPU per run (6, then 7 with the new link's GPU), except where the
    # links changed and after the drop: the whole window again.
    assert gpu[5] == 6 and gpu[12] == 7
    assert gpu[9] == 7 * N and gpu[14] == 7 * N
