"""The peer-comparison (Mahalanobis) baseline on a real window store fed round by round."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Entity
from models.detectors.findings import Finding
from models.detectors.fusion import fuse
from models.detectors.peer import PeerMahalanobis, robust_z, shrunk_correlation
from service.stages.ingest import EventLog, Ingestor
from service.stages.scoring import StoreView
from service.stages.windows import WindowConfig, WindowStore, window_config_for
from tests.pipeline.builders import T0, Rounds

HOUR = 3600.0
Change = Callable[[float, Rounds], None]


class Fleet:
    """A small fleet with healthy noise: per-sample jitter plus a per-GPU offset redrawn every
    hour (so the peer spread is real and changes), and a rare single correctable ECC error."""

    def __init__(self, rounds: Rounds, step: float = 300.0, seed: int = 0,
                 config: WindowConfig | None = None) -> None:
        self.r, self.step = rounds, step
        self.store = WindowStore(config or window_config_for(step))
        self.ingest = Ingestor(self.store, EventLog())
        self.view = StoreView(self.store, EventLog())
        self.rng = np.random.default_rng(seed)
        self.base = {s: v.copy() for s, v in rounds.values.items()}
        self.offset = np.zeros((len(rounds.tables[Scope.GPU]), 3))

    def _noise(self, t: float) -> None:
        g, rng = self.r.values[Scope.GPU], self.rng
        b = self.base[Scope.GPU]
        if (t - T0) % HOUR < self.step:
            self.offset = rng.normal(0.0, (1.5, 15.0, 15.0), self.offset.shape)
        for j, (m, sd) in enumerate((("gpu_temp", 1.0), ("power_draw", 10.0),
                                     ("sm_clock", 10.0))):
            c = CATALOG.column(Scope.GPU, m)
            g[:, c] = b[:, c] + self.offset[:, j] + rng.normal(0.0, sd, len(g))
        c = CATALOG.column(Scope.GPU, "mem_temp")
        g[:, c] = b[:, c] + self.offset[:, 0] + rng.normal(0.0, 1.0, len(g))
        c = CATALOG.column(Scope.GPU, "ecc_sbe_volatile")
        g[:, c] += rng.random(len(g)) < 0.002 * self.step / 300

    def run(self, seconds: float, change: Change | None = None,
            detector: PeerMahalanobis | None = None) -> list[tuple[float, list[Finding]]]:
        """Feed samples from T0 on; detect after each one. [(time, findings)] per tick."""
        det = detector or PeerMahalanobis()
        out = []
        for k in range(int(seconds / self.step)):
            t = T0 + k * self.step
            self._noise(t)
            if change is not None:
                change(t, self.r)
            self.ingest.ingest(self.r.batch(t), t)
            out.append((t, det.detect(self.view, t)))
        return out

    def slot(self, key: str) -> int:
        e = Entity.parse(key)
        s = self.store[e.scope].slot(e)
        assert s is not None
        return s


def _of(findings: list[Finding], scope: Scope) -> Finding:
    return next(f for f in findings if f.scope is scope)


def test_a_healthy_fleet_stays_quiet_in_nearly_all_hours() -> None:
    ticks = Fleet(Rounds(nodes=4, gpus=8)).run(24 * HOUR)
    hours = {}
    for t, fs in ticks:
        if fs:
            hours[t // HOUR] = max(float(f.risk.max()) for f in fs)
    assert len(hours) >= 22
    loud = [r for r in hours.values() if r > 0]
    assert len(loud) <= 2, hours
    assert all(r < 0.6 for r in loud)


@pytest.mark.parametrize("step", [300.0, 3600.0])
def test_a_hot_gpu_with_an_ecc_burst_is_the_top_entity(step: float) -> None:
    fleet = Fleet(Rounds(nodes=4, gpus=8), step=step)

    def fault(t: float, r: Rounds) -> None:
        if t >= T0 + 3 * HOUR:
            r.add("n1:gpu3", "gpu_temp", 10.0)
            r.add("n1:gpu3", "mem_temp", 10.0)
            r.add("n1:gpu3", "ecc_sbe_volatile", 40.0 * step / HOUR)

    ticks = fleet.run(6 * HOUR, fault)
    g = _of(ticks[-1][1], Scope.GPU)
    hot = fleet.slot("n1:gpu3")
    assert g.rule == "mahalanobis_gpu"
    assert g.risk[hot] >= 0.6
    assert int(np.argmax(g.value)) == hot
    assert g.value[hot] > g.threshold
    assert np.sort(g.risk)[-2] < 0.6  # nobody else near it


def test_an_ib_port_with_symbol_errors_stands_out() -> None:
    fleet = Fleet(Rounds(nodes=4, gpus=8, ports=4))

    def flap(t: float, r: Rounds) -> None:
        if t >= T0 + 2 * HOUR:
            r.add("n2:mlx5_1:1", "ib_symbol_error", 30.0)

    ticks = fleet.run(4 * HOUR, flap)
    p = _of(ticks[-1][1], Scope.IB_PORT)
    bad = fleet.slot("n2:mlx5_1:1")
    assert p.rule == "mahalanobis_ib_port"
    assert p.risk[bad] >= 0.6
    assert int(np.argmax(p.value)) == bad
    assert np.sort(p.risk)[-2] == 0


def test_nothing_before_the_first_hour_then_one_cached_result_per_hour() -> None:
    fleet = Fleet(Rounds(nodes=4, gpus=8))
    ticks = fleet.run(2 * HOUR + 600)
    first = next(t for t, fs in ticks if fs)
    assert first == T0 + HOUR  # the hour finishes once its last 5-min step has passed
    assert all(fs == [] for t, fs in ticks if t < first)
    in_hour = [fs for t, fs in ticks if first <= t < first + HOUR]
    assert len(in_hour) == 12
    for fs in in_hour[1:]:  # the very objects, not recomputed copies
        assert all(a is b for a, b in zip(fs, in_hour[0], strict=True))
    next_hour = next(fs for t, fs in ticks if t == first + HOUR)
    assert next_hour[0] is not in_hour[0][0]
    assert {f.scope for f in next_hour} == {Scope.GPU, Scope.IB_PORT}
    assert all(len(f.risk) == len(fleet.store[f.scope]) for f in next_hour)


def test_entities_that_join_mid_hour_get_zero_risk_until_the_next_hour() -> None:
    fleet = Fleet(Rounds(nodes=4, gpus=8))
    det = PeerMahalanobis()
    fleet.run(HOUR + 300, detector=det)
    t = T0 + HOUR + 600
    fleet.ingest.ingest(Rounds(nodes=5, gpus=8).batch(t), t)
    fs = det.detect(fleet.view, t)
    sizes = {s: len(fleet.store[s]) for s in (Scope.GPU, Scope.NVLINK, Scope.IB_PORT)}
    assert [len(f.risk) for f in fs] == [sizes[Scope.GPU], sizes[Scope.IB_PORT]] == [40, 10]
    assert fuse(fs, sizes)[Scope.GPU].risk[32:].max() == 0


def test_no_hour_buckets_means_no_findings_and_one_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    config = WindowConfig(step_s=60.0, tiers=(), nvlink_tiers=())
    fleet = Fleet(Rounds(nodes=2, gpus=8), step=60.0, config=config)
    with caplog.at_level(logging.INFO, logger="models.detectors.peer"):
        ticks = fleet.run(1200)
    assert all(fs == [] for _, fs in ticks)
    assert sum("no hour buckets" in m for m in caplog.messages) == 1


def test_nan_only_columns_and_a_single_node_give_no_risk() -> None:
    rounds = Rounds(nodes=4, gpus=8)
    for e in rounds.tables[Scope.GPU].entities:
        for m in ("mem_temp", "power_draw", "ecc_sbe_volatile"):
            rounds.set(e.key, m, np.nan)
    ticks = Fleet(rounds).run(3 * HOUR)
    assert ticks[-1][1]
    assert all(float(f.risk.max()) == 0 for _, fs in ticks[-12:] for f in fs)

    for nodes, gpus in ((1, 8), (1, 1)):
        ticks = Fleet(Rounds(nodes=nodes, gpus=gpus, ports=1)).run(3 * HOUR)
        fs = ticks[-1][1]
        assert fs and all(float(f.risk.max()) == 0 for f in fs)
        assert all(np.isfinite(f.value).all() for f in fs)


def test_robust_z_and_correlation_cope_with_constant_and_missing_columns() -> None:
    x = np.zeros((20, 3))
    x[:, 1] = np.nan
    x[:, 2] = np.arange(20.0)
    x[0, 0] = 3.0  # one count in a column that is otherwise 0: the floor keeps z modest
    z = robust_z(x, np.array([0.5, 0.5, 0.5]))
    assert z[0, 0] == pytest.approx(6.0)
    assert (z[:, 1] == 0).all()
    r = shrunk_correlation(z, 3.0, 0.05)
    assert np.allclose(np.diag(r), 1.0)
    assert np.all(np.linalg.eigvalsh(r) > 0)
