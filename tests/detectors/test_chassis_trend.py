"""The predictive chassis rules (models/detectors/chassis_trend.py), through ChassisRules: a fan
slowing against its chassis peers and a supply running hotter than its delivering peer fire at
watch level; a fan curve or profile that moves every fan, a spare in standby by design and a
failed supply do not."""

from __future__ import annotations

import numpy as np

from models.detectors.chassis_trend import WATCH_RISK, ChassisTrendConfig
from tests.detectors.test_chassis import Chassis, fired_at, run

C = ChassisTrendConfig()
HOLD = 120  # the fake store's raw ring (10 min of 5-s steps) covers less than the hold: the
# rule reads the minute tier, which these tests fill


def _fans(f: Chassis, rpm: list[float]) -> None:
    """Each fan's speed over the hold, in the minute tier (fan i of both nodes)."""
    for slot, v in enumerate(rpm * 2):
        f.fan.put("fan_rpm", slot, [v] * 30, res="1m")
        f.fan.put("fan_health", slot, [0.0] * 30, res="1m")


def test_a_fan_slowing_against_its_peers_is_a_watch() -> None:
    f = Chassis(fans=4)
    _fans(f, [9000.0, 9100.0, 8900.0, 9000.0])
    f.fan.put("fan_rpm", 1, [9100.0 * 0.8] * 30, res="1m")  # n0:fan1 at 80 % of its peers
    got = run(f, "fan_slowing")
    assert fired_at(got) == [1] and np.isclose(got.risk[1], WATCH_RISK)
    assert 0.79 < got.value[1] < 0.82 and not got.hard


def test_fans_that_move_together_and_a_short_dip_are_quiet() -> None:
    f = Chassis(fans=4)
    _fans(f, [5000.0, 5100.0, 4900.0, 5000.0])  # an acoustic profile: all slow together
    assert fired_at(run(f, "fan_slowing")) == []
    f.fan.put("fan_rpm", 2, [6000.0] * 5, res="1m")  # one fan lags a load step for 5 min
    f.fan.put("fan_rpm", 0, [4000.0] * 5, res="1m")
    assert fired_at(run(f, "fan_slowing")) == []


def test_a_stalled_fan_is_fan_faileds_not_a_slowing_one() -> None:
    f = Chassis(fans=4)
    _fans(f, [9000.0, 9000.0, 9000.0, 9000.0])
    f.fan.put("fan_rpm", 3, [1000.0] * 30, res="1m")  # under the 1,800 rpm lower critical
    assert fired_at(run(f, "fan_slowing")) == []


def _psus(f: Chassis, temps: list[float], state: list[float]) -> None:
    for slot, (t, s) in enumerate(zip(temps, state, strict=True)):
        f.psu.put("psu_temp_c", slot, [t] * 30, res="1m")
        f.psu.put("psu_state", slot, [s] * 30, res="1m")
        f.psu.put("psu_health", slot, [0.0] * 30, res="1m")


def test_a_supply_hotter_than_its_delivering_peer_is_a_watch() -> None:
    f = Chassis()
    _psus(f, [50.0, 40.0, 41.0, 40.0], [0.0] * 4)  # n0:psu0 10 degC over n0:psu1
    got = run(f, "psu_running_hot")
    assert fired_at(got) == [0] and np.isclose(got.risk[0], WATCH_RISK)
    assert got.value[0] == 10.0


def test_a_standby_spare_runs_cool_and_is_no_peer() -> None:
    f = Chassis()
    _psus(f, [50.0, 35.0, 41.0, 40.0], [0.0, 1.0, 0.0, 0.0])  # n0:psu1 a spare by design
    assert fired_at(run(f, "psu_running_hot")) == []
    _psus(f, [50.0, 35.0, 41.0, 40.0], [0.0, 3.0, 0.0, 0.0])  # ... or failed
    assert fired_at(run(f, "psu_running_hot")) == []


def test_a_predictive_failure_warning_is_a_watch() -> None:
    f = Chassis()
    _psus(f, [40.0, 40.0, 40.0, 40.0], [0.0] * 4)
    f.psu.put("psu_health", 3, [1.0, 1.0], res="1m")
    assert fired_at(run(f, "psu_running_hot")) == [3]
    f.psu.put("psu_health", 3, [0.0, 1.0], res="1m")  # one reading: not yet
    assert fired_at(run(f, "psu_running_hot")) == []


def test_the_peer_median_is_numpys_over_the_node_mates() -> None:
    import warnings

    from models.detectors.chassis_trend import _peer_median

    rng = np.random.default_rng(1)
    nodes = np.repeat(np.arange(16), 6)
    rng.shuffle(nodes)
    nodes[:3] = -1  # not placed on a node: no peers
    vals = rng.normal(9000, 100, (96, 5))
    vals[rng.random(vals.shape) < 0.2] = np.nan
    peer = rng.random(vals.shape) < 0.8
    got, count = _peer_median(vals, nodes.astype(np.int64), peer)
    assert np.isnan(got[:3]).all() and (count[:3] == 0).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN step: no peer
        for i in range(3, 96):
            mates = np.flatnonzero((nodes == nodes[i]) & (np.arange(96) != i))
            v = np.where(peer[mates], vals[mates], np.nan)
            assert np.allclose(got[i], np.nanmedian(v, axis=0), equal_nan=True)
            assert (count[i] == (~np.isnan(v)).sum(axis=0)).all()
