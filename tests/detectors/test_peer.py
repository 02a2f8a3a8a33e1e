"""The Mahalanobis peer baseline on the in-memory fleet: scored once per finished hour, held
in between, quiet below its chi-square quantile and with too few peers."""

from __future__ import annotations

import dataclasses

import pytest

from models.detectors.peer import PeerConfig, PeerMahalanobis
from tests.detectors.view import T0, FakeFleet, finding

P = PeerConfig()


def fleet(offset: float, gpus: int = 8) -> FakeFleet:
    """Two nodes of identical GPUs, but GPU 0 `offset` degC warmer, in the last hour."""
    f = FakeFleet(nodes=2, gpus=gpus)
    f.gpu.fill("gpu_temp", 50.0, "1h")
    f.gpu.put("gpu_temp", 0, [50.0 + offset], "1h")
    return f


@pytest.mark.parametrize(("offset", "risk"), [(0.0, 0.0), (2.0, 0.0), (100.0, P.risk[2])])
def test_mahalanobis_levels(offset: float, risk: float) -> None:
    got = finding(PeerMahalanobis().detect(fleet(offset), T0), "mahalanobis_gpu")
    assert got.risk[0] == pytest.approx(risk)
    assert (got.risk > 0).tolist() == (got.value >= got.threshold).tolist()
    assert not got.risk[1:].any()


def test_mahalanobis_holds_for_the_hour_then_resets() -> None:
    f, det = fleet(100.0), PeerMahalanobis()
    assert finding(det.detect(f, T0), "mahalanobis_gpu").risk[0] > 0
    f.gpu.fill("gpu_temp", 50.0, "1h")
    assert finding(det.detect(f, T0 + 60), "mahalanobis_gpu").risk[0] > 0  # same hour: held
    f.step()  # the next hour finished
    assert not finding(det.detect(f, T0 + 3600), "mahalanobis_gpu").risk.any()


def test_mahalanobis_needs_enough_peers() -> None:
    few = dataclasses.replace(P, min_entities=2 * 8 + 1)  # more than the fleet holds
    got = finding(PeerMahalanobis(few).detect(fleet(100.0), T0), "mahalanobis_gpu")
    assert not got.risk.any()


def test_mahalanobis_rests_before_the_first_finished_hour() -> None:
    f = fleet(100.0)
    f.gpu._finished["1h"] = -1
    assert PeerMahalanobis().detect(f, T0) == []
