"""FleetAlerts on its own: how many nodes make a storm in a fleet of a given size, how a
backfill's episode is kept out of it, and the one-line summaries of node and fleet alerts."""

from __future__ import annotations

import math

import numpy as np

from models.detectors.findings import Signal
from service.stages.fleet_alerts import (
    NODATA,
    STORM,
    FleetAlerts,
    HotNode,
    StormCount,
    StormSettings,
    derived_summary,
    duration_text,
    hard_signal,
    silence_signal,
    storm_signals,
)
from tests.pipeline.builders import T0

NODES = [f"n{i:02d}" for i in range(20)]


def test_no_storm_below_the_minimum_fleet_and_never_three_of_four() -> None:
    f = FleetAlerts(StormSettings())
    assert [f.need(n) for n in (1, 4, 9, 10, 15, 16, 40, 1000)] == [0, 0, 0, 3, 3, 4, 8, 200]
    levels = np.full(4, 3, np.int8)
    out = f.step(T0, NODES[:4], np.zeros(4, bool), levels, dict.fromkeys(NODES[:4], 3))
    assert out == [] and f.count == StormCount(4, 4, 0)


def _step(f: FleetAlerts, at: float, levels: dict[str, int], raised: dict[str, int],
          behind: dict[str, float] | None = None) -> list[str]:
    lv = np.array([levels.get(n, 0) for n in NODES], np.int8)
    out = f.step(at, NODES, np.zeros(len(NODES), bool), lv, raised, behind=behind)
    return [t.alertname for t in out]


def test_an_episode_begun_behind_the_live_edge_never_counts() -> None:
    f = FleetAlerts(StormSettings(settle_s=300))
    hot = {n: 2 for n in NODES[:3]}
    # n00..n02 rise while their data arrives late: no entry, no storm.
    assert _step(f, T0, hot, hot, behind=dict.fromkeys(NODES[:3], T0)) == []
    assert f.count.hot == 0
    # n03 and n04 were behind too; caught up, they rise within settle_s: no entries either.
    # n05, always live, rises: an entry.
    _step(f, T0 + 5, hot, {}, behind={"n03": T0 + 5, "n04": T0 + 5})
    more = {**hot, "n03": 2, "n04": 3, "n05": 2}
    assert _step(f, T0 + 200, more, {"n03": 2, "n04": 3, "n05": 2}) == []
    assert f.hot == ["n05"]
    # Past settle_s those episodes still do not count while they last (n04 escalates) ...
    assert _step(f, T0 + 400, {**more, "n04": 3}, {"n04": 3}) == [] and f.hot == ["n05"]
    # ... once n00's episode ends, its next rise counts; with three more live ones, a storm
    # (4 of 20 make one).
    _step(f, T0 + 410, {**more, "n00": 0}, {})
    assert _step(f, T0 + 415, more, {"n00": 3}) == [] and f.hot == ["n05", "n00"]
    last = {**more, "n06": 2, "n07": 2}
    assert _step(f, T0 + 420, last, {"n06": 2, "n07": 2}) == [STORM]
    assert f.count == StormCount(20, 4, 4) and f.hot == ["n05", "n00", "n06", "n07"]


def test_a_storm_summary_names_five_nodes_and_three_hard_faults() -> None:
    xid = Signal("xid", "Xid code logged in the last 10 min", 79, math.nan, 1.0, True)
    dbe = Signal("dbe", "uncorrectable ECC errors since the driver loaded", 2, 1, 1.0, True)
    nodes = [HotNode(f"n{i:02d}", 3, f"n{i:02d}:gpu1", xid if i % 2 else dbe) for i in range(7)]
    nodes.append(HotNode("n07", 2))  # held at its level, no rule speaking now
    hard = [hard_signal(h.entity, h.top.as_dict()) for h in nodes[:4] if h.top is not None]
    expl = [s.as_dict() for s in storm_signals(StormCount(64, 9, 13), 600, nodes, hard, 7,
                                               names=8)]
    assert expl[0] == {"rule": STORM, "signal": "9 of 64 nodes at level >= 2 within 10 min",
                       "value": 9, "threshold": 13, "risk": 0.1406, "hard": False}
    assert expl[2]["signal"] == ("n01 (xid 79): n01:gpu1 xid: Xid code logged in the last "
                                 "10 min")
    assert expl[8]["signal"] == "n07 (level 2)"
    assert expl[9] == {"rule": "storm_more", "signal": "+1 more nodes at level >= 2",
                       "value": 1, "threshold": None, "risk": 0.0, "hard": False}
    assert expl[11]["signal"] == "n00:gpu1: uncorrectable ECC errors since the driver loaded"
    assert derived_summary(STORM, expl, 0.14) == (
        "FleetStorm: 9 of 64 nodes at level >= 2 within 10 min: n00 (dbe), n01 (xid 79), "
        "n02 (dbe), n03 (xid 79), n04 (dbe) +4 more; 4 hard faults: n00:gpu1 dbe, "
        "n01:gpu1 xid 79, n02:gpu1 dbe +1 more")
    # Stored before storms explained themselves:
    assert derived_summary(STORM, [], 0.75) == "FleetStorm: 75% of the fleet entered level >= 2"
    assert derived_summary("GpuFailureRisk", expl, 0.5) is None


def test_silence_reads_how_long_and_since_when() -> None:
    assert [duration_text(s) for s in (0, 45, 65, 600, 3 * 3600 + 1200, 2 * 86400 + 4 * 3600)
            ] == ["0 s", "45 s", "1 min 5 s", "10 min", "3 h 20 min", "2 d 4 h"]
    s = silence_signal(NODATA, "n3", "n3", T0 + 65, T0, 60)
    assert (s.signal, s.value, s.threshold) == (
        "n3 silent for 1 min 5 s, last seen 2023-11-14 22:00:00 UTC", 65, 60)
    never = silence_signal("GpuMissing", "n3:gpu1", "n3", T0, math.nan, 60)
    assert never.signal == ("n3:gpu1 silent while n3 reports, not heard from since this "
                            "service started")
    assert derived_summary(NODATA, [s.as_dict()], 1.0) == f"NodeNoData: {s.signal}"
