"""The trees baseline on synthetic InfiniBand port features: noise everywhere, and a symbol-error
count that climbs through the day before each link failure. The baseline must learn that from
the same samples and splits as the LSTM, give probabilities of the detector's shape, and give
the same ones for the same seed."""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier

from collectors.catalog import Scope
from models.evaluation.events import Failure
from models.predictor.dataset import HOUR, RunFeatures, targets
from models.predictor.features import FEATURES, n_hourly
from models.predictor.trees import (
    Bins,
    TreeConfig,
    TreePredictor,
    fit_tree_predictor,
    fit_trees,
    summarize,
    summary_names,
)

F32 = npt.NDArray[np.float32]
SCOPE = Scope.IB_PORT
HOURS, NODES, PORTS = 300, 5, 8
# Failure hours per run: eight in training (the first 60 %), three in validation, four in test.
FAIL_H = (30, 50, 70, 90, 110, 130, 150, 170, 195, 215, 235, 250, 265, 280, 295)
CFG = TreeConfig()


def synthetic_run(seed: int) -> tuple[RunFeatures, list[Failure]]:
    rng = np.random.default_rng(seed)
    keys = [f"n{n}:mlx5_{p}:1" for n in range(NODES) for p in range(PORTS)]
    nodes = [k.split(":")[0] for k in keys]
    x = rng.normal(0.0, 1.0, (HOURS, len(keys), n_hourly(SCOPE))).astype(np.float32)
    counters = [j for j, f in enumerate(FEATURES[SCOPE][: n_hourly(SCOPE)]) if f.activity]
    # Counters: mostly zero, now and then a small burst on any port (benign noise).
    burst = rng.random((HOURS, len(keys), len(counters))) < 0.08
    x[:, :, counters] = np.where(burst, rng.uniform(0.0, 2.0, burst.shape), 0.0)
    x[rng.random(x.shape) < 0.02] = np.nan  # scattered missing readings
    t_pred = (np.arange(HOURS) + 1.0) * HOUR + 60.0  # an hour is seen just after it ends
    victims = rng.choice(len(keys), size=len(FAIL_H), replace=False)
    fails = []
    for h, e in zip(FAIL_H, victims.tolist(), strict=True):
        t_fail = h * HOUR + 1800.0
        ramp = np.flatnonzero((t_pred < t_fail) & (t_pred >= t_fail - 24 * HOUR))
        x[ramp, e, 0] = np.linspace(1.0, 6.0, len(ramp)) + rng.normal(0, 0.3, len(ramp))
        x[ramp[-1] + 1:, e, 0] = 0.0  # the port is replaced: quiet afterwards
        fails.append(Failure(t_fail, keys[e], SCOPE, nodes[e], "M4_ib_link", onset=t_fail -
                             24 * HOUR))
    return RunFeatures(SCOPE, x, t_pred, keys, nodes, np.arange(HOURS, dtype=np.int64)), fails


@pytest.fixture(scope="module")
def data() -> tuple[list[RunFeatures], list[list[Failure]]]:
    pairs = [synthetic_run(s) for s in (1, 2)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


@pytest.fixture(scope="module")
def fitted(data: tuple[list[RunFeatures], list[list[Failure]]]) -> TreePredictor:
    runs, fails = data
    return fit_tree_predictor({SCOPE: runs}, fails, CFG)


def test_learns_the_precursor_well_above_prevalence(fitted: TreePredictor) -> None:
    test = fitted.scopes[SCOPE].metrics["test"]["M4_ib_link@24h"]
    assert test["positives"] > 20
    assert test["prevalence"] < 0.05
    assert test["average_precision"] > 0.7 > 10 * test["prevalence"]
    assert fitted.card["metrics"][SCOPE.value]["heads"]["M4_ib_link@24h"]["trees"] > 0
    assert fitted.version.startswith("trees-")
    assert fitted.window_h == 48 and fitted.horizons_h == [1, 24, 168]


def test_probabilities_shape_range_and_determinism(
        data: tuple[list[RunFeatures], list[list[Failure]]], fitted: TreePredictor) -> None:
    runs, fails = data
    rt = fitted.scopes[SCOPE]
    # What the detector passes: the last window_h hours of every entity.
    x = np.ascontiguousarray(runs[0].x[-fitted.window_h:].transpose(1, 0, 2))
    p = rt.probabilities(x)
    assert p.shape == (len(runs[0].keys), len(rt.heads)) and p.dtype == np.float32
    assert np.isfinite(p).all() and p.min() >= 0.0 and p.max() <= 1.0
    again = fit_tree_predictor({SCOPE: runs}, fails, CFG)
    assert again.version == fitted.version
    assert np.array_equal(again.scopes[SCOPE].probabilities(x), p)


def test_summary_columns_and_values() -> None:
    names = summary_names(SCOPE)
    f = len(FEATURES[SCOPE])
    n_act = sum(ft.activity for ft in FEATURES[SCOPE])
    assert len(names) == 3 * f + n_act == len(set(names))
    x = np.zeros((2, 30, f), np.float32)
    x[0, :, 0] = np.arange(30)  # ib_symbol_error 0..29
    x[1, :, 1] = np.nan  # never reported
    s = summarize(x, SCOPE)
    assert s.shape == (2, len(names))
    col = {n: s[:, j] for j, n in enumerate(names)}
    assert col["last:ib_symbol_error"][0] == 29
    assert col["max:ib_symbol_error"][0] == 29
    assert col["mean24h:ib_symbol_error"][0] == pytest.approx(np.arange(6, 30).mean())
    assert col["active_h:ib_symbol_error"][0] == 29  # hour 0 reads 0: not active
    assert np.isnan(col["max:ib_link_error_recovery"][1])
    assert np.isnan(col["mean24h:ib_link_error_recovery"][1])
    assert col["active_h:ib_link_error_recovery"][1] == 0
    assert summarize(x[:, -6:], SCOPE).shape == s.shape  # shorter history, same width
    with pytest.raises(ValueError, match="expected"):
        summarize(x[:, :, :-1], SCOPE)


def test_head_without_positives_predicts_a_constant_rate(
        data: tuple[list[RunFeatures], list[list[Failure]]]) -> None:
    runs, _ = data
    tg = [targets(r, []) for r in runs]
    t0 = time.perf_counter()
    rt = fit_trees(SCOPE, runs, tg, CFG)
    assert time.perf_counter() - t0 < 10
    assert rt.models == [None] * len(rt.heads)
    assert all(h["trees"] == 0 for h in rt.metrics["heads"].values())
    x = runs[1].x[-48:].transpose(1, 0, 2).copy()
    p = rt.probabilities(x)
    n_val = rt.metrics["samples"]["val"]
    assert np.allclose(p, 1.0 / (n_val + 2))  # Laplace: no failure seen in n_val samples


def test_bins_follow_hgb_thresholds_and_keep_nan() -> None:
    x = np.array([[0.0, 1.0], [1.0, np.nan], [2.0, 3.0], [2.0, 5.0]], np.float32)
    bins = Bins.fit(x)
    assert bins.thresholds[0].tolist() == [0.5, 1.5]  # few distinct values: midpoints
    b = bins.apply(np.array([[0.5, 2.0], [0.6, np.nan], [9.0, -1.0]], np.float32))
    assert b[0].tolist() == [0.0, 0.0]  # x <= threshold stays below it, as in HGB
    assert b[1, 0] == 1.0 and np.isnan(b[1, 1])
    assert b[2].tolist() == [2.0, 0.0]
    wide = Bins.fit(np.random.default_rng(0).normal(size=(5000, 1)).astype(np.float32))
    assert len(wide.thresholds[0]) == 254  # quantiles: at most 255 bins


def test_a_column_missing_throughout_training_is_a_constant() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3)).astype(np.float32)
    x[:, 1] = np.nan  # e.g. page retirement on a GPU that remaps rows instead
    bins = Bins.fit(x)
    b = bins.apply(x)
    assert np.all(b[:, 1] == 0) and not np.isnan(b).any()
    y = (x[:, 0] > 0.5).astype(np.int64)
    HistGradientBoostingClassifier(max_iter=5).fit(b, y)  # fits; no binning error
