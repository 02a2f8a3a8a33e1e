"""Entity names come from the wire, and each new one allocates window memory (issue 14, item 4):
new entities are capped per request and in total, the excess is refused with its reason while
every valid sample beside it is kept, and entities silent past their longest window are
forgotten, with every slot-indexed state (windows, alert machine, detectors) following."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, EventFrame, Frame
from models.detectors.dynamic import DynamicThresholds
from service.assembly import Wiring
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from service.stages.alert_store import Alert
from service.stages.ingest import EventLog, Ingestor
from service.stages.windows import EntityLimits, WindowStore
from tests.pipeline.builders import T0, Rounds

STEP = 5.0
DAY = 86400.0


def _gpus(names: list[tuple[str, int]], ts: float, temp: float = 40.0) -> Batch:
    table = EntityTable(Scope.GPU, [Entity.gpu(n, g) for n, g in names])
    v = np.full((len(names), len(CATALOG.columns(Scope.GPU))), np.nan)
    v[:, CATALOG.column(Scope.GPU, "gpu_temp")] = temp
    b = Batch()
    b.add(Frame(table, np.arange(len(names), dtype=np.int32), np.full(len(names), ts), v))
    return b


def _ingestor(**limits: int) -> Ingestor:
    return Ingestor(WindowStore(limits=EntityLimits(**limits)), EventLog())


def test_new_entities_per_request_are_capped_and_the_rest_taken_later() -> None:
    ing = _ingestor(max_gpus=10_000, max_new_gpus_per_batch=100)
    known = _gpus([("real", 0)], T0)
    ing.ingest(known, T0)
    flood = [("real", 0)] + [(f"ph{i}", 0) for i in range(250)]
    res = ing.ingest(_gpus(flood, T0 + STEP), T0 + STEP, from_wire=True)
    gpus = ing.store[Scope.GPU]
    assert len(gpus) == 101  # the known GPU and the first 100 new ones
    assert res.rejected == 150 and res.accepted == 101  # the known GPU's sample is kept
    assert any("max_new_gpus_per_batch" in r.reason and r.entity == "ph100:gpu0"
               for r in res.rejections)
    assert gpus.latest("gpu_temp")[gpus.slot(Entity.gpu("real", 0))] == 40.0
    # The rest are taken by the next requests: a relay's first big batch is only delayed.
    res = ing.ingest(_gpus(flood, T0 + 2 * STEP), T0 + 2 * STEP, from_wire=True)
    assert len(gpus) == 201 and res.rejected == 50
    flood += [(f"more{i}", 0) for i in range(300)]
    # The service's own sources (a replay, its collectors) are bounded by the total only.
    res = ing.ingest(_gpus(flood, T0 + 3 * STEP), T0 + 3 * STEP)
    assert len(gpus) == 551 and res.rejected == 0


def test_total_cap_refuses_new_entities_and_keeps_known_ones() -> None:
    ing = _ingestor(max_gpus=8, max_new_gpus_per_batch=1000)
    ing.ingest(_gpus([("n1", g) for g in range(8)], T0), T0)
    res = ing.ingest(_gpus([("n1", 0), ("n2", 0)], T0 + STEP, temp=50.0), T0 + STEP)
    assert res.rejected == 1 and res.accepted == 1
    assert "at most 8 gpu entities (ingest.max_gpus)" in res.rejections[0].reason
    assert len(ing.store[Scope.GPU]) == 8
    assert ing.store[Scope.GPU].refused_total == 1


def test_a_link_of_a_refused_gpu_and_an_event_of_one_are_refused() -> None:
    ing = _ingestor(max_gpus=1, max_new_gpus_per_batch=1000)
    ing.ingest(_gpus([("n1", 0)], T0), T0)
    table = EntityTable(Scope.NVLINK, [Entity.nvlink("n1", 0, 0), Entity.nvlink("n9", 0, 0)])
    v = np.zeros((2, len(CATALOG.columns(Scope.NVLINK))))
    b = Batch()
    b.add(Frame(table, np.arange(2, dtype=np.int32), np.full(2, T0 + STEP), v))
    b.events = EventFrame(["n1:gpu0", "n9:gpu3"], [T0 + STEP] * 2, ["xid"] * 2, [79.0] * 2)
    res = ing.ingest(b, T0 + STEP)
    assert [e.key for e in ing.store[Scope.NVLINK].entities] == ["n1:gpu0:nvlink0"]
    refused = {r.entity for r in res.rejections}
    assert refused == {"n9:gpu0:nvlink0", "n9:gpu3"}
    assert [e.entity for e in ing.events.events] == ["n1:gpu0"]


def test_twenty_thousand_new_gpus_in_one_write_take_bounded_memory() -> None:
    """The reported attack: 20,000 new GPUs in one 1.28 MB write added 1.2 GB."""
    ing = _ingestor()
    before = ing.store.nbytes()
    res = ing.ingest(_gpus([(f"ph{i}", 0) for i in range(20_000)], T0), T0, from_wire=True)
    grown = ing.store.nbytes() - before
    per_gpu = 62_000  # bytes of windows per GPU (service/stages/windows.py EntityLimits)
    assert res.rejected == 20_000 - 1024
    assert grown < 1.1 * 1024 * per_gpu


def _one_gpu_store() -> tuple[Ingestor, WindowStore]:
    store = WindowStore(limits=EntityLimits(max_gpus=100))
    return Ingestor(store, EventLog()), store


@pytest.mark.slow
def test_silent_entities_are_forgotten_and_survivors_keep_their_history() -> None:
    ing, store = _one_gpu_store()
    names = [("a", 0), ("b", 0), ("c", 0), ("d", 0)]
    for k in range(12):
        ing.ingest(_gpus(names, T0 + k * STEP, temp=40.0 + k), T0 + k * STEP)
    gpus = store[Scope.GPU]
    horizon = gpus.horizon_s
    assert horizon == 7 * DAY  # the 1-h tier's 168 buckets
    before = gpus.window("gpu_temp", 12)[[1, 3]]
    # "b" and "d" report on every hour; "a" and "c" fall silent.
    later = T0
    for h in range(1, 168):
        later = T0 + h * 3600.0
        ing.ingest(_gpus([("b", 0), ("d", 0)], later), later)
    assert store.forget(T0 + horizon - 30) is None  # nothing is silent past its horizon yet
    done = store.forget(T0 + horizon + 60)
    assert done is not None
    assert [e.key for e in done.dropped[Scope.GPU]] == ["a:gpu0", "c:gpu0"]
    assert done.nodes_dropped == ["a", "c"] and store.registry.nodes == ["b", "d"]
    assert [e.key for e in gpus.entities] == ["b:gpu0", "d:gpu0"]
    assert gpus.slot(Entity.gpu("d", 0)) == 1 and gpus.node_of[:2].tolist() == [0, 1]
    assert done.keep[Scope.GPU].tolist() == [1, 3]
    # The survivors' rollups are theirs (the raw ring has since moved on a week): their
    # first hour is the mean of what they sent in it.
    hour = gpus.window("gpu_temp", 168, tier="1h")
    assert np.nanmax(hour[1]) == pytest.approx(float(np.nanmean(before[1])))
    # Their slots take new data, and the freed room takes new entities.
    now = T0 + horizon + 90
    ing.ingest(_gpus([("d", 0), ("e", 0)], now, temp=77.0), now)
    assert gpus.latest("gpu_temp")[:3].tolist()[1:] == [77.0, 77.0]


def test_a_gpu_stays_while_one_of_its_links_reports() -> None:
    ing, store = _one_gpu_store()
    ing.ingest(_gpus([("a", 0), ("b", 0)], T0), T0)
    table = EntityTable(Scope.NVLINK, [Entity.nvlink("a", 0, 3)])
    for k in range(4):  # a link that reports on (one line once is on probation)
        b = Batch()
        later = T0 + 6 * DAY + k * STEP
        b.add(Frame(table, np.zeros(1, np.int32), np.full(1, later),
                    np.zeros((1, len(CATALOG.columns(Scope.NVLINK))))))
        ing.ingest(b, later)
    done = store.forget(T0 + 7 * DAY + 60)
    assert done is not None and [e.key for e in done.dropped[Scope.GPU]] == ["b:gpu0"]
    links = store[Scope.NVLINK]
    assert store[Scope.GPU].entities[links.gpu_of[0]] == Entity.gpu("a", 0)


def test_under_pressure_one_line_names_are_forgotten_after_the_raw_window() -> None:
    """A flood of one-line names that reached the limit frees its room in minutes, not in a
    week; an entity that reports on is kept however young; without pressure nobody is."""
    ing, store = _one_gpu_store()  # 100 GPUs at most
    ing.ingest(_gpus([(f"ph{i}", 0) for i in range(50)] + [("real", 0)], T0), T0)
    for k in range(1, 5):
        ing.ingest(_gpus([("real", 0)], T0 + k * STEP), T0 + k * STEP)
    raw_s = store[Scope.GPU].raw_length * STEP
    assert store.forget(T0 + raw_s + 30) is None  # half full, nothing refused: no pressure
    ing.ingest(_gpus([(f"more{i}", 0) for i in range(60)], T0 + 40), T0 + 40)
    assert store[Scope.GPU].refused_total == 11
    assert store.forget(T0 + raw_s - 1) is None
    done = store.forget(T0 + raw_s + 4 * STEP + 1)
    assert done is not None and len(done.dropped[Scope.GPU]) == 50
    assert [e.key for e in store[Scope.GPU].entities][:1] == ["real:gpu0"]
    assert len(store[Scope.GPU]) == 50  # the newer ones wait for their raw window
    assert store[Scope.GPU].latest("gpu_temp").tolist() == [40.0] * 50


def _pipeline(tmp: Path) -> Pipeline:
    s = Settings(storage={"data_dir": tmp},  # type: ignore[arg-type]
                 detectors={"model": {"path": "none"}})  # type: ignore[arg-type]
    return build_pipeline(s, Wiring(notifiers=(), remediate=False))


def _open(p: Pipeline) -> dict[str, Alert]:
    return {a.entity: a for a in p.alerts.open_alerts() if not a.alertname.startswith("Node")}


def test_forgetting_resolves_the_silent_and_moves_the_rest(tmp_path: Path) -> None:
    p, r = _pipeline(tmp_path), Rounds(nodes=3, gpus=2, links=1, ports=1)
    r.set("n0:gpu0", "ecc_dbe_volatile", 1.0)  # pages: a hard rule at certainty
    r.set("n2:gpu1", "ecc_dbe_volatile", 1.0)
    t = T0
    for k in range(6):
        t = T0 + STEP * k
        p.process(r.batch(t), t)
    assert {"n0:gpu0", "n2:gpu1"} <= set(_open(p))
    dyn = next(d for d in p.scorer.detectors if isinstance(d, DynamicThresholds))
    gpus = p.store[Scope.GPU]
    survivor = gpus.slot(Entity.gpu("n2", 1))
    assert survivor is not None
    dyn.memory.sbe_base._fit(len(gpus))
    dyn.memory.sbe_base.count[survivor] = 777  # a mark on the survivor's per-slot detector state
    # Node n0 goes away (decommissioned); n1 and n2 report on a week later.
    missing = tuple(e.key for s in r.tables.values() for e in s.entities if e.node == "n0")
    later = T0 + 7 * DAY + 120
    p.process(r.batch(later, missing=missing), later)
    assert "n0" not in p.store.registry.nodes
    assert all(e.node != "n0" for s in SCOPES_ for e in p.store[s].entities)
    opened = _open(p)
    assert "n0:gpu0" not in opened and "n2:gpu1" in opened
    assert not [a.name for a in p.alerts.open_alerts() if a.node == "n0"]
    slot = gpus.slot(Entity.gpu("n2", 1))
    assert slot is not None and slot < survivor
    assert p.machine.level(Scope.GPU)[slot] == 3
    assert dyn.memory.sbe_base.count[slot] in (777, 778)  # 778: it learned the hour since
    assert len(p.machine.level(Scope.GPU)) == len(gpus)
    # The forgotten GPU's page resolved, with its history kept.
    gone = [a for a in p.alerts.find() if a.entity == "n0:gpu0"]
    assert gone and gone[-1].level == 0 and gone[-1].state == "resolved"


SCOPES_ = (Scope.GPU, Scope.NVLINK, Scope.IB_PORT)


def test_a_pipeline_sharing_the_store_follows_its_forgetting(tmp_path: Path) -> None:
    owner = _pipeline(tmp_path / "a")
    reader = build_pipeline(owner.settings.model_copy(), Wiring.offline(
        alert_db=str(tmp_path / "b.db"), shared=(owner.store, owner.events)))
    r = Rounds(nodes=2, gpus=1, links=1, ports=1)
    r.set("n1:gpu0", "ecc_dbe_volatile", 1.0)
    for k in range(4):
        t = T0 + STEP * k
        owner.process(r.batch(t), t)
        reader.tick(t)
    later = T0 + 8 * DAY
    r.tables = {s: EntityTable(s, [e for e in tb.entities if e.node == "n1"])
                for s, tb in r.tables.items()}
    r.values = {s: v[len(v) // 2:] for s, v in r.values.items()}
    owner.process(r.batch(later), later)
    reader.tick(later)
    assert reader.generation == owner.store.generation == 1
    assert reader.machine.level(Scope.GPU).tolist() == [3]
