"""An hour table answers the window store's questions as the store does: its daily tier rolled
from the hours (counters summed, states' max, gauges' mean of the hours that reported; NaN for
a day nobody reported), windows ending at the newest hour, whole nodes per feature group; and
features built from the store's own hour buckets at once equal those a replay records an hour
at a time."""

from __future__ import annotations

import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity
from models.evaluation.rounds import feed_rounds
from models.evaluation.sources import simulator_source
from models.predictor.dataset import HourlyRecorder
from models.predictor.features import FEATURES, INPUTS, LINK_COLUMNS, link_hours
from models.predictor.hour_table import (
    HourTable,
    _node_groups,
    _View,
    column_name,
    columns,
    features,
)
from models.simulator.config import SimConfig
from models.simulator.scenarios import scenario_tree


def _table(hours: int, first_hour: int = 24 * 20_000 + 6) -> HourTable:
    ents = [Entity(Scope.GPU, "n1", str(i)) for i in range(2)]
    data = np.full((len(columns(Scope.GPU)), 2, hours), np.nan, np.float32)
    return HourTable(Scope.GPU, ents, first_hour, data)


def test_days_roll_from_hours_as_the_store_rolls_them() -> None:
    t = _table(24 * 3 - 7)  # 06:00 on day 0 to 23:00 on day 2: two days ended
    cols = t.cols
    t.data[cols.index("ecc_sbe_volatile"), 0] = 2.0  # a counter: the day's sum
    t.data[cols.index("gpu_temp"), 0] = np.arange(t.hours, dtype=np.float32)  # gauge: mean
    t.data[cols.index("throttle_thermal"), 0, 30] = 1.0  # a state: the day's max
    t.data[cols.index("throttle_thermal"), 0, 31] = 0.0
    v = _View(t, 0, 2)
    assert v.finished("1d") == t.first_hour // 24 + 1  # the third day has not ended
    sbe = v.window("ecc_sbe_volatile", 2, tier="1d")
    assert sbe[0].tolist() == [18 * 2.0, 24 * 2.0] and np.isnan(sbe[1]).all()
    temp = v.window("gpu_temp", 2, tier="1d")[0]
    assert temp.tolist() == [float(np.mean(np.arange(18))), float(np.mean(np.arange(18, 42)))]
    thr = v.window("throttle_thermal", 3, tier="1d")[0]
    assert np.isnan(thr[0]) and np.isnan(thr[1]) and thr[2] == 1.0  # padded before the span
    # Windows of hours end at the newest one; asking for more pads the start.
    w = v.window("gpu_temp", t.hours + 2)
    assert np.isnan(w[0, :2]).all() and w[0, -1] == t.hours - 1


def test_an_input_the_tier_does_not_keep_is_an_error_not_a_silent_mean() -> None:
    v = _View(_table(30), 0, 2)
    with pytest.raises(KeyError, match="power_draw_max"):
        v.window("power_draw", 3, stat="hi")
    assert column_name("gpu_temp", "hi") in columns(Scope.GPU)
    assert len(columns(Scope.GPU)) == len(set(columns(Scope.GPU)))


def test_feature_groups_hold_whole_nodes() -> None:
    ents = [Entity(Scope.GPU, f"n{n}", str(g)) for n in range(5) for g in range(3)]
    groups = _node_groups(ents, 2)
    assert groups == [(0, 6), (6, 12), (12, 15)]


def _scenario() -> SimConfig:
    tree = scenario_tree("ci", seed=3)
    tree["fleet"]["nodes"] = 2
    tree["time"]["days"] = 6.5
    tree["failures"]["rate_multiplier"] = 1500.0
    tree["seed"] = 3
    return SimConfig.model_validate(tree)


def test_features_at_once_equal_a_replay_hour_by_hour() -> None:
    from service.assembly import Wiring
    from service.pipeline import build_pipeline
    from service.settings import Settings
    from service.stages.windows import window_config_for

    cfg = _scenario()
    src = simulator_source(cfg)
    pipe = build_pipeline(Settings(window=window_config_for(src.step_s),
                                   detectors={"model": {"path": "none"}}),  # type: ignore[arg-type]
                          Wiring.offline())
    rec = HourlyRecorder()
    try:
        for r in feed_rounds(src.chunks, src.step_s):
            pipe.ingest(r.batch, r.now)
            rec.observe(pipe.scorer.view, r.now)
        fleet = pipe.scorer.view
        runs = rec.runs()
        n = int(cfg.time.days * 24)  # the whole span: the store's hour tier keeps a week
        for scope in (Scope.GPU, Scope.IB_PORT):
            v = fleet.scope(scope)
            cols = [v.window(m, n, tier="1h", stat=s) for m, s in INPUTS[scope]]
            if scope is Scope.GPU:
                cols += link_hours(fleet, len(v), n)
            order = np.argsort([e.key for e in v.entities])
            data = np.stack(cols)[:, order]
            last = v.finished("1h")
            table = HourTable(scope, [v.entities[i] for i in order], last - n + 1, data)
            got = features(table)
            want = runs[scope]
            at = {int(h): i for i, h in enumerate(want.hour_index)}
            rows = [at[int(h)] for h in got.hour_index]
            ents = [want.keys.index(k) for k in got.keys]
            w = want.x[np.ix_(rows, ents)]
            # Within 1e-4 (float32 sums of a day's hourly means, added in another order),
            # the tolerance bench.model --tier-check states.
            close = np.isclose(w, got.x, rtol=1e-4, atol=1e-4, equal_nan=True)
            if scope is Scope.GPU:  # the store keeps half as many hours of NVLink links
                names = [f.name for f in FEATURES[scope]]
                link = [names.index(c) for c in LINK_COLUMNS]
                kept = fleet.scope(Scope.NVLINK).tier_specs[1].length
                close[:, :, link] |= np.arange(n)[:, None, None] < n - kept
                assert close[n - kept:, :, link].all()
            assert close.all(), np.argwhere(~close)[:5]
            # Available at the hour's end; a replay sees it when the next round comes, later
            # where the sampling slipped (within a step).
            d = want.t_pred[rows] - got.t_pred
            assert (d >= 0).all() and (d < src.step_s).all() and (d == 0).mean() > 0.95
    finally:
        pipe.close()
