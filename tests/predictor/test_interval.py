"""Failure windows at a stated coverage (models/predictor/interval.py): split conformal intervals
that hold new failures at the coverage they state, a constant baseline they must beat, and the
choice of the window to show."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from models.predictor import interval
from models.predictor.interval import (
    GROWTH,
    MODEL,
    Calibration,
    Pair,
    RawWindow,
    conformal,
    fit,
    shown,
)


def growth(mode: str, estimate_h: float) -> RawWindow:
    return RawWindow(GROWTH, mode, estimate_h / 2, estimate_h * 2, estimate_h, 0.6)


def model(mode: str, lo: float, hi: float) -> RawWindow:
    return RawWindow(MODEL, mode, lo, hi, hi, 0.7)


def test_conformal_ranks_with_the_finite_sample_correction() -> None:
    xs = [float(i) for i in range(1, 20)]  # n = 19: (n + 1) * 0.1 = 2, (n + 1) * 0.9 = 18
    assert conformal(xs, 0.8) == (2.0, 18.0)
    assert conformal([1.0, 2.0, 3.0], 0.8) == (0.0, math.inf)  # too few for either end
    with pytest.raises(ValueError):
        conformal([], 0.8)


def test_a_biased_growth_estimate_is_recalibrated_to_its_stated_coverage() -> None:
    """The failure comes a lognormal factor (median 3.5) after the estimate, as the issue measured
    on unseen fleets: the raw half-to-twice window misses most, the calibrated one holds about
    80 % of new alerts and is far narrower than a constant window that holds as many."""
    rng = random.Random(7)

    def draw(n: int) -> list[Pair]:
        out = []
        for _ in range(n):
            est = math.exp(rng.uniform(math.log(2), math.log(100)))
            out.append(Pair(growth("M1_hbm", est), est * 3.5 * math.exp(rng.gauss(0, 0.4))))
        return out

    cal = fit(draw(400), 0.8)
    new = draw(2000)
    raw_cover = sum(p.raw.lo_h <= p.actual_h <= p.raw.hi_h for p in new) / len(new)
    ivs = [cal.apply(p.raw) for p in new]
    assert all(iv is not None for iv in ivs)
    cover = sum(iv.holds(p.actual_h) for iv, p in zip(ivs, new, strict=True) if iv) / len(new)
    assert raw_cover < 0.3
    assert 0.75 <= cover <= 0.87
    base = cal.baseline("M1_hbm")
    assert base is not None
    widths = sorted(iv.width_h for iv in ivs if iv)
    assert widths[len(widths) // 2] < base[1] - base[0]
    assert "growth:M1_hbm" not in cal.hidden


def test_a_window_that_says_nothing_more_than_the_constant_is_hidden() -> None:
    """A model window whose failures are spread as widely as every alert's is hidden; a mode
    with too few pairs of its own takes the pooled quantiles."""
    rng = random.Random(3)
    pairs = [Pair(model("M5_thermal", 1, 24), rng.uniform(0.1, 160)) for _ in range(200)]
    cal = fit(pairs, 0.8)
    assert "model:M5_thermal" in cal.hidden
    assert cal.apply(model("M5_thermal", 1, 24)) is None
    # What is shown instead: when such alerts' failures came, the mode's constant, told so.
    base = shown([model("M5_thermal", 1, 24)], cal)
    assert base is not None and base.raw.source == "constant"
    assert (base.lo_h, base.hi_h) == cal.baseline("M5_thermal")
    assert "80% of such alerts; no estimate sharper than that" in base.text()
    assert shown([model("M5_thermal", 1, 24)], Calibration(0.8, hidden=cal.hidden)) is None
    # A mode never seen in calibration falls back on the pooled key of the same raw window,
    # which is hidden only by name (source:mode): it is shown.
    other = cal.apply(model("M3_nvlink", 1, 24))
    assert other is not None and other.coverage == 0.8


def test_the_narrowest_calibrated_window_is_shown_and_raw_ones_without_a_table() -> None:
    cal = Calibration(0.8, growth={"*": (1.0, 4.0)}, model={"M1_hbm@1-24h": (2.0, 100.0)})
    raws = (model("M1_hbm", 1, 24), growth("M1_hbm", 5.0))
    best = shown(raws, cal)
    assert best is not None and best.raw.source == GROWTH and (best.lo_h, best.hi_h) == (5, 20)
    assert "80% of such alerts; growth rule" in best.text()
    raw = shown(raws, None)  # no calibration: the model's raw window, as before
    assert raw is not None and raw.raw.source == MODEL and raw.coverage is None
    assert "uncalibrated" in raw.text()
    assert shown((), cal) is None


def test_the_table_round_trips_and_refuses_another_format(tmp_path: object) -> None:
    cal = fit([Pair(growth("M1_hbm", 10), 10 * (1 + i / 50)) for i in range(30)], 0.8,
              "train-family 1000-1001")
    again = Calibration.from_json(cal.to_json())
    assert again == cal
    with pytest.raises(ValueError, match="format"):
        Calibration.from_json('{"format": 99, "coverage": 0.8}')
    with pytest.raises(ValueError, match="not a number"):
        Calibration.from_json('{"format": 1, "coverage": 0.8, "growth": {"*": [1, "x"]}}')


def test_every_shown_window_reads_as_the_alert_annotation_finds_it() -> None:
    from service.notify.refs import WHEN

    raw = model("M1_hbm", 0, 24)
    for lo, hi in ((0.0, 24.0), (2.0, 30.0), (5.0, math.inf)):
        text = Calibration(0.8, model={"M1_hbm@0-24h": (lo, hi)}).apply(raw).text()  # type: ignore[union-attr]
        assert WHEN in text, text


@pytest.mark.parametrize("body", ["{", '{"format": 1}', '{"format": 1, "coverage": 1.5}',
                                  '{"format": 1, "coverage": 0.8, "growth": {"*": [1]}}'])
def test_a_damaged_shipped_table_stops_the_start_and_names_the_file(
        window_calibration: Callable[[Calibration], None], tmp_path: Path, body: str) -> None:
    from service.assembly import Wiring
    from service.pipeline import build_pipeline

    (tmp_path / "windows.json").write_text(body)
    interval.default_calibration.cache_clear()
    with pytest.raises(interval.CalibrationError, match=r"^windows\.json: "):
        build_pipeline(wiring=Wiring.offline())
