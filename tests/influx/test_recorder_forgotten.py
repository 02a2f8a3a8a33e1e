"""Risk points end for an entity that leaves risk, including one the window store forgot
(its slot renumbered away): an "open now" panel must see it end, not keep it open forever."""

from __future__ import annotations

from pathlib import Path

from service.assembly import Wiring
from service.history.influx.record import TickRecorder
from service.pipeline import build_pipeline
from service.settings import Settings
from service.tick import TickResult
from tests.pipeline.builders import T0, Rounds

DAY = 86400.0


def _points(rec: TickRecorder, tick: TickResult) -> dict[str, str]:
    """entity -> its GPU risk point's fields."""
    out = {}
    for line in rec.risk(tick.risk, tick.levels, tick.derived):
        tags, rest = line.split(" ", 1)
        if tags.endswith(",scope=gpu"):
            entity = next(t[7:] for t in tags.split(",") if t.startswith("entity="))
            out[entity] = rest.rsplit(" ", 1)[0]
    return out


def test_a_forgotten_entity_at_risk_gets_its_closing_point(tmp_path: Path) -> None:
    s = Settings(storage={"data_dir": tmp_path},  # type: ignore[arg-type]
                 detectors={"model": {"path": "none"}})  # type: ignore[arg-type]
    p = build_pipeline(s, Wiring(notifiers=(), remediate=False))
    r, rec = Rounds(nodes=3, gpus=2, links=1, ports=1), TickRecorder("c")
    r.set("n0:gpu0", "ecc_dbe_volatile", 1.0)
    r.set("n2:gpu1", "ecc_dbe_volatile", 1.0)
    for k in range(4):
        got = _points(rec, p.process(r.batch(T0 + 5 * k), T0 + 5 * k))
    assert got["n0:gpu0"].startswith("risk=1.0,level=3i")
    gone = tuple(e.key for t in r.tables.values() for e in t.entities if e.node == "n0")
    later = T0 + 7 * DAY + 120
    got = _points(rec, p.process(r.batch(later, missing=gone), later))
    assert got["n0:gpu0"] == "risk=0.0,level=0i"  # forgotten: its one closing point
    assert "n0:gpu1" not in got  # forgotten, never at risk: nothing to close
    assert got["n2:gpu1"].startswith("risk=1.0,level=3i")
    got = _points(rec, p.process(r.batch(later + 5, missing=gone), later + 5))
    assert not [e for e in got if e.startswith("n0:")]  # and no more of the forgotten
