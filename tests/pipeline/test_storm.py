"""A fleet storm through the real tick path: it names its hot nodes, lists every hard fault
under it and keeps that list current while it fires (the muted per-node alerts stay firing);
a small fleet never storms; a backfill or a spool drain neither looks silent nor counts as
nodes failing together; nodes that went silent raise NodeNoData, which never counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from collectors.frames import Batch, Entity, EntityTable
from service.assembly import Wiring
from service.notify.refs import summary_of
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from service.stages.alert_store import Alert
from service.stages.fleet_alerts import FLEET, MUTES, NODATA, STORM, STORM_MUTES, STORM_NODE
from tests.notify.timeline import Recorder
from tests.pipeline.builders import T0, Rounds

STEP = 5.0


def _pipeline(tmp: Path, record: Recorder | None = None, **alerts: Any) -> Pipeline:
    s = Settings.model_validate({
        "storage": {"data_dir": str(tmp)}, "detectors": {"model": {"path": "none"}},
        "alerts": alerts,
        "notify": {"route": {"receiver": "record", "group_wait_s": 0}}})
    if record is None:
        return build_pipeline(s, Wiring(notifiers=(), remediate=False))
    return build_pipeline(s, Wiring.offline(alert_db=str(tmp / "a.db"), notifiers=[record],
                                            notify_background=False, remediate=False))


def _storm(p: Pipeline) -> Alert | None:
    return next((a for a in p.alerts.open_alerts() if a.name == STORM), None)


def _hard(a: Alert) -> list[tuple[str, str]]:
    return [(e["rule"], e["signal"].split(": ", 1)[0]) for e in a.explanation if e["hard"]]


def _xid(key: str, ts: float, code: int = 79) -> Batch:
    b = Batch()
    b.events.add(key, ts, "xid", float(code))
    return b


def test_a_storm_lists_every_hard_fault_under_it_and_keeps_the_list_current(
        tmp_path: Path) -> None:
    record = Recorder("record")
    # Quick levels, so a fault clears while the storm still fires.
    p = _pipeline(tmp_path, record, for_s=(0, 0, 0), long_window_s=0, dwell_s=(0, 0, 0),
                  resolve_for_s=10)
    r = Rounds(nodes=12, gpus=2, links=1, ports=1)
    t = T0

    def run(ticks: int, events: Batch | None = None) -> None:
        nonlocal t
        for _ in range(ticks):
            t += STEP
            if events is not None:
                p.ingest(events, t)
                events = None
            p.process(r.batch(t), t)

    try:
        run(3)
        for n in range(4):  # 4 of 12 nodes at once: a storm (3 make one)
            r.set(f"n{n}:gpu0", "ecc_dbe_volatile", 1.0)
        run(2)
        storm = _storm(p)
        assert storm is not None and storm.node == "*" and storm.entity == FLEET
        expl = storm.explanation
        assert expl[0] == {"rule": STORM, "signal": "4 of 12 nodes at level >= 2 within 10 min",
                           "value": 4, "threshold": 3, "risk": 0.3333, "hard": False}
        nodes = [e["signal"] for e in expl if e["rule"] == STORM_NODE]
        assert nodes == [f"n{n} (dbe): n{n}:gpu0 dbe: uncorrectable ECC errors since the "
                         "driver loaded" for n in range(4)]
        (mutes,) = [e for e in expl if e["rule"] == STORM_MUTES]
        assert (mutes["signal"], mutes["value"]) == (MUTES, 4)
        assert _hard(storm) == [("dbe", f"n{n}:gpu0") for n in range(4)]
        assert summary_of(storm) == (
            "FleetStorm: 4 of 12 nodes at level >= 2 within 10 min: n0 (dbe), n1 (dbe), "
            "n2 (dbe), n3 (dbe); 4 hard faults: n0:gpu0 dbe, n1:gpu0 dbe, n2:gpu0 dbe +1 more")
        # The page went out with that summary; the per-node pages are muted, not resolved.
        paged = [al for m in record.messages for al in m.alerts
                 if al.labels["alertname"] == STORM]
        assert paged and paged[0].annotations["summary"] == summary_of(storm)
        firing = {a.entity: a.level for a in p.alerts.open_alerts() if a.name != STORM}
        assert firing == {f"n{n}:gpu0": 3 for n in range(4)}

        # Quiet ticks rewrite nothing.
        run(3)
        again = _storm(p)
        assert again is not None and again.updated_at == storm.updated_at

        # One more hard fault, on a node already counted: an Xid 79 on n5 (not hot before).
        run(1, _xid("n5:gpu1", t + STEP))
        storm = _storm(p)
        assert storm is not None and storm.id == again.id
        assert ("xid", "n5:gpu1") in _hard(storm) and len(_hard(storm)) == 5
        xid = next(e for e in storm.explanation if e["hard"] and e["rule"] == "xid")
        assert xid["value"] == 79 and xid["signal"].startswith("n5:gpu1: Xid")
        assert "n5:gpu1 xid 79" not in summary_of(storm)  # the first three are named
        assert "5 hard faults" in summary_of(storm)

        # A fault clears (the driver reloaded, the volatile count reads 0): off the list.
        r.set("n2:gpu0", "ecc_dbe_volatile", 0.0)
        run(6)
        storm = _storm(p)
        assert storm is not None and storm.id == again.id, "the storm still fires"
        assert ("dbe", "n2:gpu0") not in _hard(storm)
        assert ("dbe", "n0:gpu0") in _hard(storm) and ("xid", "n5:gpu1") in _hard(storm)
        assert len(_hard(storm)) == 4
    finally:
        p.close()


def test_a_small_fleet_never_storms(tmp_path: Path) -> None:
    p, r = _pipeline(tmp_path), Rounds(nodes=4, gpus=2, links=1, ports=1)
    try:
        t = T0
        for k in range(8):
            t = T0 + STEP * k
            if k == 3:
                for n in range(3):  # 3 of 4 nodes: each is paged on its own
                    r.set(f"n{n}:gpu0", "ecc_dbe_volatile", 1.0)
            p.process(r.batch(t), t)
        opened = {(a.name, a.entity): a.level for a in p.alerts.open_alerts()}
        assert opened == {("GpuFailureRisk", f"n{n}:gpu0"): 3 for n in range(3)}
        assert p.fleet.count.need == 0  # below min_fleet nothing is judged a storm
    finally:
        p.close()


@pytest.mark.slow
def test_a_backfill_raises_neither_no_data_nor_a_storm(tmp_path: Path) -> None:
    """An agent backfills an hour (--backfill-s), a minute of it per tick, so its data is
    minutes behind the live edge for five minutes; the history holds failures on 4 of 12
    nodes. Nothing is silent, and the failures alert one by one without a storm."""
    p, r = _pipeline(tmp_path), Rounds(nodes=12, gpus=2, links=1, ports=1)
    history = T0 - 3600
    seen: set[tuple[str, str]] = set()
    try:
        now = T0
        k = 0
        while history < now:
            now = T0 + STEP * k
            k += 1
            for _ in range(12):  # a minute of history per 5-s tick
                if history >= now:
                    break
                if history >= T0 - 1800:  # half an hour ago the failures began
                    for n in range(4):
                        r.set(f"n{n}:gpu0", "ecc_dbe_volatile", 1.0)
                p.ingest(r.batch(history), now)
                history += STEP
            p.tick(now)
            seen |= {(a.name, a.entity) for a in p.alerts.find(limit=1000)}
        assert now - T0 > 240  # well past the no-data grace and stale limit
        for _ in range(150):  # caught up: live for over ten minutes
            now += STEP
            p.process(r.batch(now), now)
            seen |= {(a.name, a.entity) for a in p.alerts.find(limit=1000)}
        assert not [s for s in seen if s[0] in (NODATA, "GpuMissing", STORM)], seen
        opened = {(a.name, a.entity): a.level for a in p.alerts.open_alerts()}
        assert opened == {("GpuFailureRisk", f"n{n}:gpu0"): 3 for n in range(4)}
    finally:
        p.close()


def test_a_spool_drain_after_an_outage_is_not_a_storm(tmp_path: Path) -> None:
    """A relay cut off for ten minutes drains its spool: 12 nodes' rounds arrive at once,
    with failures on 4 of them from during the outage. Each failure alerts; no storm."""
    p, r = _pipeline(tmp_path), Rounds(nodes=12, gpus=2, links=1, ports=1)
    try:
        t = T0
        for k in range(60):  # five healthy minutes
            t = T0 + STEP * k
            p.process(r.batch(t), t)
        cut = t
        spooled: list[Batch] = []
        for k in range(1, 121):  # ten minutes cut off; two minutes in, 4 nodes fail
            if k == 24:
                for n in range(4):
                    r.set(f"n{n}:gpu0", "ecc_dbe_volatile", 1.0)
            spooled.append(r.batch(cut + STEP * k))
            if k <= 60:
                p.tick(cut + STEP * k)  # the service sees nothing
        t = cut + STEP * 60
        assert {a.name for a in p.alerts.open_alerts()} == {NODATA}  # silent: rightly so
        for k in range(60):  # the spool drains, two rounds behind per tick, then live
            t += STEP
            for b in spooled[2 * k: 2 * k + 2]:
                p.ingest(b, t)
            p.tick(t)
        for _ in range(120):
            t += STEP
            p.process(r.batch(t), t)
        opened = {(a.name, a.entity): a.level for a in p.alerts.open_alerts()}
        assert opened == {("GpuFailureRisk", f"n{n}:gpu0"): 3 for n in range(4)}
        assert not [a for a in p.alerts.find(limit=1000) if a.name == STORM]
    finally:
        p.close()


def test_silent_short_lived_nodes_raise_no_data_which_never_counts_toward_a_storm(
        tmp_path: Path) -> None:
    """Three nodes send three rounds and go silent, three more send one (names seen once,
    issue 29), while two live nodes of twelve fail: three NodeNoData alerts that say who and
    since when, none for a name seen once, and no storm (2 hot nodes; 3 make one)."""
    p, r = _pipeline(tmp_path), Rounds(nodes=12, gpus=2, links=1, ports=1)
    once, short = (Rounds(nodes=3, gpus=1, links=1, ports=1) for _ in range(2))
    for rounds, prefix in ((short, "x"), (once, "y")):  # nodes xn0..xn2, yn0..yn2
        rounds.tables = {s: EntityTable(s, [Entity.parse(prefix + e.key) for e in tb.entities])
                         for s, tb in rounds.tables.items()}
    try:
        p.ingest(once.batch(T0), T0)
        t = T0
        for k in range(40):
            t = T0 + STEP * k
            if k < 3:
                p.ingest(short.batch(t - 2 * STEP), t - 2 * STEP)
            if k == 20:
                for n in range(2):
                    r.set(f"n{n}:gpu0", "ecc_dbe_volatile", 1.0)
            p.process(r.batch(t), t)
        nodata = {a.node: a for a in p.alerts.open_alerts() if a.name == NODATA}
        assert sorted(nodata) == ["xn0", "xn1", "xn2"]
        a = nodata["xn1"]
        (e,) = a.explanation
        assert e["rule"] == NODATA and e["hard"] is False and e["threshold"] == 60
        assert 60 < e["value"] <= 60 + 2 * STEP
        assert summary_of(a) == (f"NodeNoData: xn1 silent for 1 min {int(e['value']) - 60} s, "
                                 "last seen 2023-11-14 22:00:00 UTC")
        assert {(x.name, x.entity) for x in p.alerts.open_alerts() if x.level == 3} == {
            ("GpuFailureRisk", "n0:gpu0"), ("GpuFailureRisk", "n1:gpu0")}
        assert _storm(p) is None and p.fleet.count.hot == 2
        assert p.fleet.count.fleet == 12  # the silent nodes are not of the live fleet
    finally:
        p.close()



def test_a_late_xid_is_no_sign_of_life_for_a_gpu_that_fell_off_the_bus(tmp_path: Path) -> None:
    """Only sample rows show a GPU reporting: the Xid 79 its node's spool drains late pages,
    and the GPU stays GpuMissing, which names it and when it was last seen."""
    p, r = _pipeline(tmp_path), Rounds(nodes=2, gpus=4, links=1, ports=1)
    gone = ("n1:gpu3", "n1:gpu3:nvlink0")
    try:
        t = T0
        for k in range(30):
            t = T0 + STEP * k
            p.process(r.batch(t), t)
        fell = t
        missing_seen = []
        for k in range(1, 41):
            t = fell + STEP * k
            if k == 20:
                p.ingest(_xid("n1:gpu3", fell + 1), t)
            p.process(r.batch(t, missing=gone), t)
            missing_seen.append(any(a.name == "GpuMissing" for a in p.alerts.open_alerts()))
        assert missing_seen.index(True) <= 14 and all(missing_seen[14:]), missing_seen
        opened = {(a.name, a.entity): a for a in p.alerts.open_alerts()}
        assert opened["GpuFailureRisk", "n1:gpu3"].level == 3
        a = opened["GpuMissing", "n1:gpu3"]
        assert summary_of(a).startswith("GpuMissing: n1:gpu3 silent for 1 min ")
        assert summary_of(a).endswith(" while n1 reports, last seen 2023-11-14 22:02:25 UTC")
    finally:
        p.close()


def test_a_storm_open_across_a_restart_stays_open_and_keeps_its_list(tmp_path: Path) -> None:
    r = Rounds(nodes=12, gpus=2, links=1, ports=1)
    p = _pipeline(tmp_path)
    t = T0
    for k in range(6):
        t = T0 + STEP * k
        if k == 2:
            for n in range(4):
                r.set(f"n{n}:gpu0", "ecc_dbe_volatile", 1.0)
        p.process(r.batch(t), t)
    before = _storm(p)
    assert before is not None and len(_hard(before)) == 4
    p.close()
    p = _pipeline(tmp_path)
    try:
        for _ in range(6):
            t += STEP
            p.process(r.batch(t), t)
        after = _storm(p)
        assert after is not None and after.id == before.id
        assert _hard(after) == _hard(before)
        assert after.explanation[0]["value"] == 4  # its nodes still count
    finally:
        p.close()
