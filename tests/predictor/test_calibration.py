"""Calibrators on scores that are miscalibrated in a known way (true rate = score²), on
degenerate validation data, and on bad input; their JSON round trip."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest

from models.predictor.calibration import (
    Calibrator,
    ConstantCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
    calibrator_from_json,
    expected_calibration_error,
    fit_calibrator,
    reliability,
)

F32 = npt.NDArray[np.float32]
Fit = Callable[[npt.ArrayLike, npt.ArrayLike], Calibrator]
GRID = np.linspace(0.0, 1.0, 1001, dtype=np.float32)


def squared(seed: int, n: int = 20_000) -> tuple[F32, npt.NDArray[np.int8]]:
    """Scores uniform on [0, 1], labels drawn with probability score²: overconfident scores."""
    rng = np.random.default_rng(seed)
    p = rng.random(n).astype(np.float32)
    y = (rng.random(n) < p.astype(np.float64) ** 2).astype(np.int8)
    return p, y


def roundtrip(c: Calibrator) -> Calibrator:
    return calibrator_from_json(json.loads(json.dumps(c.to_json())))


@pytest.mark.parametrize("make", [IsotonicCalibrator.fit, PlattCalibrator.fit, fit_calibrator])
def test_calibration_lowers_ece_on_held_out_data(make: Fit) -> None:
    p_fit, y_fit = squared(0)
    p_test, y_test = squared(1)
    raw = expected_calibration_error(p_test, y_test)
    assert raw > 0.15  # ∫ (p - p²) dp = 1/6
    c = make(p_fit, y_fit)
    calibrated = expected_calibration_error(c.apply(p_test), y_test)
    assert calibrated < 0.25 * raw
    assert calibrated < 0.025


@pytest.mark.parametrize("make", [IsotonicCalibrator.fit, PlattCalibrator.fit])
def test_outputs_monotone_in_unit_interval_and_shape_kept(make: Fit) -> None:
    c = make(*squared(2))
    out = c.apply(GRID)
    assert out.dtype == np.float32 and out.shape == GRID.shape
    assert (np.diff(out) >= 0).all()
    assert out.min() >= 0.0 and out.max() <= 1.0
    assert c.apply(GRID.reshape(7, 11, 13)).shape == (7, 11, 13)
    assert c.apply(np.array(0.5, dtype=np.float32)).shape == ()


def test_fit_calibrator_picks_by_number_of_positives() -> None:
    p, y = squared(3, 2000)
    assert isinstance(fit_calibrator(p, y), IsotonicCalibrator)
    assert isinstance(fit_calibrator(p, y, min_positives=10**6), PlattCalibrator)
    assert isinstance(fit_calibrator(p, np.zeros_like(y)), ConstantCalibrator)


@pytest.mark.parametrize("seed", [4, 5])
def test_json_round_trip_gives_identical_outputs(seed: int) -> None:
    p, y = squared(seed, 3000)
    for c in (IsotonicCalibrator.fit(p, y), PlattCalibrator.fit(p, y), ConstantCalibrator(0.01)):
        back = roundtrip(c)
        assert type(back) is type(c)
        np.testing.assert_array_equal(back.apply(GRID), c.apply(GRID))


def test_no_positives_is_a_small_smoothed_constant() -> None:
    p = np.linspace(0, 1, 998, dtype=np.float32)
    c = fit_calibrator(p, np.zeros(998))
    assert isinstance(c, ConstantCalibrator)
    assert c.value == pytest.approx(1 / 1000)  # (0 + 1) / (n + 2)
    np.testing.assert_allclose(c.apply(GRID), 1 / 1000)
    # Weights count: 98 examples standing for 10 each.
    assert fit_calibrator(p[:98], np.zeros(98), np.full(98, 10.0)).to_json()["value"] == (
        pytest.approx(1 / 982))


def test_one_positive_keeps_order_and_stays_small() -> None:
    p = np.linspace(0, 1, 1000, dtype=np.float32)
    y = np.zeros(1000)
    y[-1] = 1
    c = fit_calibrator(p, y)
    assert isinstance(c, PlattCalibrator)
    out = c.apply(GRID)
    assert (np.diff(out) >= 0).all() and out[-1] > out[0]
    # Separable, but no certainty: Platt's target for one positive is (1 + 1) / (1 + 2).
    assert out.min() >= 0.0 and out.max() < 2 / 3
    assert float(out.mean()) == pytest.approx(1 / 1000, rel=1.0)


@pytest.mark.parametrize("positives", [1, 5, 50])
def test_all_equal_scores_give_the_smoothed_rate_everywhere(positives: int) -> None:
    p = np.full(200, 0.4, dtype=np.float32)
    y = np.r_[np.ones(positives), np.zeros(200 - positives)]
    out = fit_calibrator(p, y).apply(GRID)
    assert np.ptp(out) == 0.0
    assert float(out[0]) == pytest.approx(positives / 200, abs=0.01)


def test_only_positives_and_backwards_scores() -> None:
    p = np.linspace(0, 1, 100, dtype=np.float32)
    c = fit_calibrator(p, np.ones(100))
    assert c.apply(GRID).min() == pytest.approx(101 / 102)
    # Scores that rank backwards are not flipped: the calibrator goes flat instead.
    y = np.r_[np.ones(3), np.zeros(97)]
    out = fit_calibrator(p, y).apply(GRID)
    assert np.ptp(out) == 0.0 and 0.0 < out[0] < 0.1


def test_nan_in_nan_out() -> None:
    p, y = squared(6, 2000)
    x = np.array([0.2, np.nan, 0.9], dtype=np.float32)
    for c in (IsotonicCalibrator.fit(p, y), PlattCalibrator.fit(p, y), ConstantCalibrator(0.1)):
        out = c.apply(x)
        assert np.isnan(out[1]) and np.isfinite(out[[0, 2]]).all()


def test_bad_input_is_refused_with_a_reason() -> None:
    p = np.array([0.1, 0.5, 0.9], dtype=np.float32)
    with pytest.raises(ValueError, match="1 NaN"):
        fit_calibrator(np.array([0.1, np.nan, 0.9]), [0, 1, 0])
    with pytest.raises(ValueError, match=r"labels must be 0 or 1, found \[2.0\]"):
        fit_calibrator(p, [0, 2, 1])
    with pytest.raises(ValueError, match=r"scores have shape \(3,\) but labels \(2,\)"):
        fit_calibrator(p, [0, 1])
    with pytest.raises(ValueError, match=r"weights have shape \(2,\)"):
        fit_calibrator(p, [0, 1, 1], weights=[1.0, 1.0])
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        fit_calibrator([0.1, 1.5], [0, 1])
    with pytest.raises(ValueError, match="nothing to fit"):
        fit_calibrator([], [])


def test_bad_json_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="unknown calibrator kind 'beta'"):
        calibrator_from_json({"kind": "beta", "a": 1.0})
    with pytest.raises(ValueError, match="unknown calibrator kind None"):
        calibrator_from_json({"a": 1.0, "b": 0.0})
    with pytest.raises(ValueError, match=r"platt calibrator needs keys \['a', 'b'\]"):
        calibrator_from_json({"kind": "platt", "a": 1.0})
    with pytest.raises(ValueError, match="'b' must be a number"):
        calibrator_from_json({"kind": "platt", "a": 1.0, "b": "0"})
    with pytest.raises(ValueError, match="a must be >= 0"):
        calibrator_from_json({"kind": "platt", "a": -1.0, "b": 0.0})
    with pytest.raises(ValueError, match="equal non-empty x and y"):
        calibrator_from_json({"kind": "isotonic", "x": [0.0, 1.0], "y": [0.5]})
    with pytest.raises(ValueError, match="non-decreasing"):
        calibrator_from_json({"kind": "isotonic", "x": [0.0, 1.0], "y": [0.5, 0.2]})
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        calibrator_from_json({"kind": "constant", "value": 1.5})


def test_reliability_bins_and_ece_by_hand() -> None:
    p = [0.05, 0.15, 0.15, 0.95, 1.0]
    y = [0, 1, 0, 1, 1]
    bins = reliability(p, y, bins=10)
    assert [(b.lo, b.hi, b.count) for b in bins] == [(0.0, 0.1, 1), (0.1, 0.2, 2), (0.9, 1.0, 2)]
    assert bins[1].mean_predicted == pytest.approx(0.15) and bins[1].observed_rate == 0.5
    assert bins[2].mean_predicted == pytest.approx(0.975) and bins[2].observed_rate == 1.0
    ece = expected_calibration_error(p, y, bins=10)
    assert ece == pytest.approx((1 * 0.05 + 2 * 0.35 + 2 * 0.025) / 5)
    assert reliability([], []) == []
    with pytest.raises(ValueError, match="bins must be >= 1"):
        reliability(p, y, bins=0)
