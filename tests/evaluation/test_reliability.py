"""Reliability of the model's probabilities (models/evaluation/reliability.py): the bins, ECE,
the outcomes a head is scored against, and a perfectly calibrated score."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity
from models.evaluation import plots
from models.evaluation.events import Failure
from models.evaluation.reliability import Bins, Reliability, parse_head, pooled

H = 3600.0
T = 1_735_689_600.0
HEADS = ["M1_hbm@1h", "M1_hbm@24h", "M3_nvlink@24h"]
GPUS = [Entity(Scope.GPU, f"n{i // 2}", str(i % 2)) for i in range(4)]  # n0:gpu0 .. n1:gpu1


def test_bins_and_ece_by_hand() -> None:
    b = Bins(["h"], edges=(0.0, 0.5, 1.0))
    p = np.array([[0.1], [0.2], [0.3], [0.6], [0.8], [np.nan]])
    y = np.array([[0.0], [0.0], [1.0], [1.0], [1.0], [1.0]])
    b.add(p, y)
    t = b.table()["h"]
    assert t["n"] == 5 and t["positives"] == 2.0 + 0.0 + 1.0  # the NaN sample is left out
    lo, hi = t["bins"]
    assert (lo["n"], lo["predicted"], lo["observed"]) == (3, pytest.approx(0.2),
                                                          pytest.approx(1 / 3))
    assert (hi["n"], hi["predicted"], hi["observed"]) == (2, pytest.approx(0.7), 1.0)
    # ECE: 3/5 x |0.2 - 1/3| + 2/5 x |0.7 - 1|
    assert t["ece"] == pytest.approx(0.6 * (1 / 3 - 0.2) + 0.4 * 0.3)
    assert t["predicted"] == pytest.approx(2.0 / 5) and t["observed"] == pytest.approx(3 / 5)


def test_a_perfectly_calibrated_score_is_reported_calibrated() -> None:
    rng = np.random.default_rng(7)
    b = Bins(["h"])
    for _ in range(20):  # online, in chunks, as hour by hour
        p = rng.beta(0.3, 3.0, size=(50_000, 1))
        b.add(p, (rng.random(p.shape) < p).astype(np.float32))
    t = b.table()["h"]
    for bin_ in t["bins"]:
        if bin_["n"] >= 20_000:
            assert bin_["observed"] == pytest.approx(bin_["predicted"], abs=0.01)
    assert t["ece"] < 0.005
    skewed = Bins(["h"])
    p = rng.beta(0.3, 3.0, size=(200_000, 1))
    skewed.add(p, (rng.random(p.shape) < p / 2).astype(np.float32))  # overconfident by 2x
    assert skewed.table()["h"]["ece"] > 0.03


def test_merge_and_pool_add_counts() -> None:
    a, b = Bins(["h"], (0.0, 1.0)), Bins(["h"], (0.0, 1.0))
    a.add(np.array([[0.2]]), np.array([[1.0]]))
    b.add(np.array([[0.4]]), np.array([[0.0]]))
    both = pooled([{"gpu": a.to_dict()}, {"gpu": b.to_dict()}])["gpu"]["h"]
    assert both["n"] == 2 and both["bins"][0]["predicted"] == pytest.approx(0.3)
    with pytest.raises(ValueError):
        a.merge(Bins(["other"], (0.0, 1.0)))


def test_outcomes_follow_the_training_targets() -> None:
    fails = [
        Failure(T + 10 * H, "n0:gpu0", Scope.GPU, "n0", "M1_hbm", T - 5 * H),
        # An NVLink failure counts for the GPU that owns the link.
        Failure(T + 2 * H, "n0:gpu1:nvlink3", Scope.NVLINK, "n0", "M3_nvlink", T - 5 * H),
        # A node-scope failure: no positive, but its node's entities leave its grace out.
        Failure(T - 3 * H, "n1", Scope.NODE, "n1", "M7_unobservable"),
    ]
    rel = Reliability(fails)
    y, valid = rel.truth(Scope.GPU, HEADS, GPUS, T)
    assert valid.tolist() == [True, True, False, False]
    assert y[0].tolist() == [0.0, 1.0, 0.0]  # fails in 10 h: within 24 h, not within 1 h
    assert y[1].tolist() == [0.0, 0.0, 1.0]
    y, valid = rel.truth(Scope.GPU, HEADS, GPUS, T + 9.5 * H)
    assert y[0].tolist() == [1.0, 1.0, 0.0]
    assert not valid[2]  # 12.5 h after the node's failure
    _, valid = rel.truth(Scope.GPU, HEADS, GPUS, T + 21 * H)
    assert valid[2] and valid[3]  # past the node failure's 24 h grace (no repair known)
    _, valid = rel.truth(Scope.GPU, HEADS, GPUS, T + 10 * H)  # at the failure: left out
    assert not valid[0]
    _, valid = rel.truth(Scope.GPU, HEADS, GPUS, T + 34 * H)  # 24 h after: counted again
    assert valid[0]
    p = np.full((4, 3), 0.5, np.float32)
    p[3] = np.nan
    rel(Scope.GPU, p, HEADS, GPUS, T)  # two valid slots
    t = rel.bins[Scope.GPU].table()
    assert t["M1_hbm@24h"]["n"] == 2 and t["M1_hbm@24h"]["positives"] == 1.0


def test_head_names() -> None:
    assert parse_head("M1_hbm@168h") == ("M1_hbm", 168 * H)
    with pytest.raises(ValueError):
        parse_head("M1_hbm")


def test_the_diagram_is_drawn(tmp_path: Path) -> None:
    b = Bins(HEADS)
    b.add(np.array([[0.0005, 0.05, 0.4], [0.02, 0.5, 0.95]]), np.array([[0, 0, 1], [0, 1, 1]]))
    name = plots.reliability(b.table(), "gpu", tmp_path / "rel.png")
    assert (tmp_path / name).stat().st_size > 1000
