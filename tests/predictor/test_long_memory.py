"""Long memory (models/predictor/long_memory.py) from a real window store: a chronic benign
carrier reads as its usual, a new burst as news; a swapped-in GPU has no days behind it; and
what the dataset builder records an hour at a time over several days equals the detector's
48-hour window (train/serve parity across day boundaries, at a 5-min and a 1-h step)."""

from __future__ import annotations

import numpy as np
import pytest

from collectors.catalog import Scope
from models.predictor.dataset import HourlyRecorder
from models.predictor.features import FEATURES, HOURLY
from models.predictor.long_memory import USUAL_DAYS
from tests.models.test_peer_baseline import Fleet
from tests.pipeline.builders import T0, Rounds

HOUR = 3600.0


def col(scope: Scope, name: str) -> int:
    return [f.name for f in FEATURES[scope]].index(name)


def _run(step: float, days: float) -> tuple[Fleet, HourlyRecorder]:
    fleet = Fleet(Rounds(nodes=2, gpus=4, links=2, ports=2), step=step, seed=5)
    rec = HourlyRecorder()
    per_step = step / HOUR
    end = int(days * 24 * HOUR / step)
    for k in range(end):
        t = T0 + k * step
        fleet._noise(t)
        fleet.r.add("n0:gpu1", "ecc_sbe_volatile", 100.0 * per_step)  # chronic, every hour
        if k >= end - int(6 * HOUR / step):  # new: the last 6 hours only
            fleet.r.add("n1:gpu2", "ecc_sbe_volatile", 100.0 * per_step)
        if k == int(5.5 * 24 * HOUR / step):
            fleet.r.add("n1:gpu3", "remapped_rows_correctable", 1.0)
        fleet.ingest.ingest(fleet.r.batch(t), now=t)
        rec.observe(fleet.view, t)
    return fleet, rec


@pytest.mark.slow
@pytest.mark.parametrize("step", [300.0, 3600.0])
def test_recorded_days_equal_the_live_window(step: float) -> None:
    fleet, rec = _run(step, 8.5)
    runs = rec.runs()
    for scope in (Scope.GPU, Scope.IB_PORT):
        live = HOURLY[scope](fleet.view, 48)
        np.testing.assert_array_equal(live.transpose(1, 0, 2), runs[scope].x[-48:])


def test_chronic_carrier_is_its_usual_and_a_burst_is_news() -> None:
    _, rec = _run(3600.0, 8.5)
    run = rec.runs()[Scope.GPU]
    last = run.x[-1]
    chronic, burst = run.keys.index("n0:gpu1"), run.keys.index("n1:gpu2")
    quiet = run.keys.index("n0:gpu0")
    vs = col(Scope.GPU, "ecc_sbe_vs_usual")
    usual = col(Scope.GPU, "ecc_sbe_usual")
    # The same 100 errors in the newest hour: nothing new for one, everything for the other.
    assert last[chronic, usual] == pytest.approx(np.log1p(100), rel=1e-3)
    assert abs(last[chronic, vs]) < 0.01
    # (the fleet's noise gives every GPU a stray correctable error now and then)
    assert last[burst, usual] < 0.1 and last[burst, vs] > np.log1p(100) - 0.1
    assert abs(last[quiet, vs]) < 0.1
    since = col(Scope.GPU, "days_since_ecc")
    assert last[chronic, since] == pytest.approx(1 / (USUAL_DAYS + 1))  # active yesterday
    assert last[burst, since] > last[chronic, since]  # today's burst is in the hours
    # One remap 3 days ago: within the span, counted; older than yesterday.
    remap = run.keys.index("n1:gpu3")
    assert last[remap, col(Scope.GPU, "remaps_recent")] == pytest.approx(np.log1p(1))
    assert 1 / (USUAL_DAYS + 1) < last[remap, col(Scope.GPU, "days_since_hbm_remap")] < 1.0
    assert last[quiet, col(Scope.GPU, "days_known")] == 1.0


def test_no_finished_day_no_memory() -> None:
    _, rec = _run(3600.0, 0.9)
    run = rec.runs()[Scope.GPU]
    first_day = run.hour_index // 24 == run.hour_index[0] // 24
    assert np.isnan(run.x[first_day][:, :, col(Scope.GPU, "ecc_sbe_usual")]).all()
    assert (np.nan_to_num(run.x[first_day][:, :, col(Scope.GPU, "days_known")]) == 0).all()
