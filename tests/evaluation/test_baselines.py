"""The baselines through the real pipeline: static vendor thresholds, EWMA z-score, random."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from models.detectors.baselines import (
    EwmaConfig,
    EwmaZScore,
    RandomConfig,
    RandomScore,
    StaticThresholds,
)
from models.detectors.findings import Detector
from service.assembly import Wiring
from service.pipeline import build_pipeline
from service.settings import Settings
from tests.pipeline.builders import T0, Rounds

Change = Callable[[int, Rounds], None]


def replay(detector: Detector, seconds: float, change: Change | None = None, step: float = 5.0,
           rounds: Rounds | None = None) -> list[tuple[float, str, int]]:
    pipe = build_pipeline(Settings(), Wiring.offline(detectors=[detector]))
    r = rounds or Rounds()
    fired = []
    for k in range(int(seconds / step)):
        now = T0 + k * step
        if change is not None:
            change(k, r)
        fired += [(now - T0, t.entity, t.new)
                  for t in pipe.process(r.batch(now), now).transitions if t.new > t.old]
    pipe.close()
    return fired


def test_static_thresholds_stay_quiet_on_a_healthy_fleet() -> None:
    assert replay(StaticThresholds(), 1800) == []


@pytest.mark.parametrize(("entity", "metric", "value", "add"), [
    ("n0:gpu1", "remapped_rows_pending", 1.0, False),
    ("n0:gpu1", "remapped_rows_failure", 1.0, False),
    ("n0:gpu1", "retired_pages_sbe", 11.0, False),
    ("n0:gpu1", "ecc_dbe_volatile", 1.0, True),
    ("n0:gpu1:nvlink1", "nvlink_replay", 1.0, True),
    ("n0:mlx5_1:1", "ib_state", 1.0, False),
])
def test_static_thresholds_page_on_each_vendor_limit(entity: str, metric: str, value: float,
                                                     add: bool) -> None:
    def hit(k: int, r: Rounds) -> None:
        if k == 20:
            (r.add if add else r.set)(entity, metric, value)

    fired = replay(StaticThresholds(), 300, hit)
    assert fired and fired[0][1] == entity and fired[0][2] == 3
    assert fired[0][0] <= 100 + 30 + 5  # at once (the IB outage after its 30 s)


def test_static_ber_limit() -> None:
    def corrupt(k: int, r: Rounds) -> None:
        if k >= 12:  # 1e-11 at 400 Gbit/s: 20 symbol errors per 5 s
            r.add("n1:mlx5_0:1", "ib_symbol_error", 20)

    fired = replay(StaticThresholds(), 600, corrupt)
    assert [(e, lvl) for _, e, lvl in fired] == [("n1:mlx5_0:1", 3)]


@pytest.mark.slow
def test_ewma_flags_a_jump_after_learning_and_nothing_before() -> None:
    rng = np.random.default_rng(0)

    def noise(k: int, r: Rounds) -> None:
        r.set("n0:gpu2", "gpu_temp", 55 + rng.normal(0, 1))
        if k == 700:
            r.add("n1:gpu4", "ecc_sbe_volatile", 500)

    ewma = EwmaZScore(EwmaConfig(warmup_s=1800))
    fired = replay(ewma, 3600, noise)
    # Level 1 at once; a page would need the alert machine's long window (15 min) as well.
    assert [(e, lvl) for _, e, lvl in fired][:1] == [("n1:gpu4", 1)]
    assert {e for _, e, _ in fired} == {"n1:gpu4"}
    assert fired[0][0] == 3500


def test_random_score_fires_at_its_rate_and_is_seeded() -> None:
    def count(seed: int) -> list[tuple[float, str, int]]:
        det = RandomScore(RandomConfig(alerts_per_node_day=200.0, hold_s=60.0, seed=seed))
        return replay(det, 3 * 3600, step=60.0)

    a, b = count(1), count(1)
    assert a == b
    opened = [f for f in a if f[2] >= 1]
    expected = 200.0 * 2 * 3 / 24  # 2 nodes for 3 h
    entities = {e for _, e, _ in opened}
    assert len(entities) > 20
    assert len({f[0] for f in opened}) == pytest.approx(expected, rel=0.5)
