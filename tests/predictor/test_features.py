"""Hourly features from a real window store: what the dataset builder records an hour at a time
is what the live detector computes for the whole window at once (train/serve parity), at a 5-min
step (the 1-h tier) and a 1-h step (the raw ring); peer-relative values, NVLink aggregation and
missingness say what they mean."""

from __future__ import annotations

import numpy as np
import pytest

from collectors.catalog import Scope
from models.predictor.dataset import HourlyRecorder
from models.predictor.features import (
    FEATURES,
    HOURLY,
    HourlyUnavailable,
    hours_of,
    n_hourly,
)
from service.stages.ingest import EventLog, Ingestor
from service.stages.scoring import StoreView
from service.stages.windows import WindowStore, window_config_for
from tests.models.test_peer_baseline import Fleet
from tests.pipeline.builders import T0, Rounds

HOUR = 3600.0


def col(scope: Scope, name: str) -> int:
    return [f.name for f in FEATURES[scope]].index(name)


def _feed(step: float, hours: int, missing_from: float = np.inf) -> tuple[Fleet, HourlyRecorder]:
    fleet = Fleet(Rounds(nodes=3, gpus=4, links=2, ports=2), step=step, seed=3)
    rec = HourlyRecorder()
    hot, nv = "n1:gpu2", "n2:gpu1:nvlink1"
    for k in range(int(hours * HOUR / step)):
        t = T0 + k * step
        fleet._noise(t)
        fleet.r.set(hot, "gpu_temp", 70.0)
        fleet.r.add(nv, "nvlink_crc_flit", 5.0)
        fleet.r.add("n0:mlx5_1:1", "ib_symbol_error", 2.0)
        gone = ("n0:gpu0",) if t >= missing_from else ()
        fleet.ingest.ingest(fleet.r.batch(t, missing=gone), now=t)
        rec.observe(fleet.view, t)
    return fleet, rec


@pytest.mark.parametrize("step", [300.0, 3600.0])
def test_recorded_hours_equal_the_live_window(step: float) -> None:
    fleet, rec = _feed(step, 30)
    runs = rec.runs()
    for scope in (Scope.GPU, Scope.IB_PORT):
        run = runs[scope]
        assert run.x.shape[1:] == (len(fleet.view.scope(scope)), n_hourly(scope))
        live = HOURLY[scope](fleet.view, 12)  # [entity, 12, F0]
        np.testing.assert_array_equal(live.transpose(1, 0, 2), run.x[-12:])
        # The model's inputs: the same through RunFeatures.windows and the live path.
        ents = np.arange(run.x.shape[1], dtype=np.int64)
        hrs = np.full(len(ents), run.hours - 1, np.int64)
        np.testing.assert_array_equal(run.windows(hrs, ents, 12), live)
        # Rows carry their absolute hour: consecutive, ending at the store's newest hour.
        assert run.hour_index[-1] == hours_of(fleet.view.scope(scope)).last
        assert np.all(np.diff(run.hour_index) == 1)
    assert np.all(np.diff(runs[Scope.GPU].t_pred) > 0)


def test_peer_relative_nvlink_and_missing() -> None:
    _, rec = _feed(300.0, 7, missing_from=T0 + 4.5 * HOUR)
    run = rec.runs()[Scope.GPU]
    keys = run.keys
    last = run.x[-1]
    hot = keys.index("n1:gpu2")
    assert last[hot, col(Scope.GPU, "gpu_temp_vs_peers")] == pytest.approx(15, abs=3)
    others = [i for i, k in enumerate(keys) if k.startswith("n1:") and i != hot]
    assert np.all(np.abs(last[others, col(Scope.GPU, "gpu_temp_vs_peers")]) < 5)
    # 5 CRC errors per 5 min on one link of n2:gpu1: 60 an hour, as log1p, on its GPU only.
    crc = col(Scope.GPU, "nvlink_errors_worst")
    assert last[keys.index("n2:gpu1"), crc] == pytest.approx(np.log1p(60), rel=1e-5)
    assert last[keys.index("n2:gpu0"), crc] == 0
    # n0:gpu0 stopped reporting at 4.5 h: hour 5 (the newest finished) has nothing, hour 4
    # has its first half (the mean of what came), and missing stays NaN, never zero.
    gone = keys.index("n0:gpu0")
    miss = col(Scope.GPU, "missing_gpu")
    assert run.x[-1, gone, miss] == 1.0
    assert np.isnan(run.x[-1, gone, col(Scope.GPU, "gpu_temp")])
    assert run.x[-2, gone, miss] == 0.0 and not np.isnan(run.x[-2, gone, 0])
    # Shares of links, so 2 links and 18 read alike: one of n2:gpu1's two links has errors.
    share = col(Scope.GPU, "nvlink_error_share")
    assert last[keys.index("n2:gpu1"), share] == 0.5
    assert last[keys.index("n2:gpu0"), share] == 0.0
    assert last[keys.index("n2:gpu1"), col(Scope.GPU, "nvlink_down_share")] == 0.0


def test_no_hour_buckets_is_said() -> None:
    store = WindowStore(window_config_for(60.0))  # tiers 1h exist at 60 s; a 1-d step has none
    ingest = Ingestor(store, EventLog())
    r = Rounds(nodes=1, gpus=1, links=1, ports=1)
    ingest.ingest(r.batch(T0), now=T0)
    assert hours_of(store[Scope.GPU]).tier == "1h"
    day = WindowStore(window_config_for(86400.0))
    with pytest.raises(HourlyUnavailable, match="no hourly buckets"):
        hours_of(day[Scope.GPU])
    view = StoreView(day, EventLog())
    rec = HourlyRecorder()
    rec.observe(view, T0)  # no hourly buckets: nothing recorded, no error
    assert rec.runs()[Scope.GPU].hours == 0
