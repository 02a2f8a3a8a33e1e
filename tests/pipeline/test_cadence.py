"""Sustained-state rules under a real sender's cadence: an agent's 5-s rounds drift against the
service's 5-s steps, so now and then a step gets no sample. An IB port that stays DOWN, or a
GPU that stays at its slowdown temperature, must still fire its hard rule across such gaps;
a gap alone, or a state that recovered inside the window, must not."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.detectors.findings import sustained
from service.assembly import Wiring
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from tests.pipeline.builders import T0, Rounds

STEP = 5.0
PORT = "n0:mlx5_0:1"


def test_sustained_reads_the_reports_that_came() -> None:
    t, f = True, False
    holds = np.array([[t, t, f, t, t, t], [t, f, f, f, f, t], [t, t, t, t, t, f],
                      [f, f, t, t, t, t]])
    seen = np.array([[t, t, f, t, t, t], [t, f, f, f, f, t], [t, t, t, t, t, t],
                     [f, f, t, t, t, t]])
    # one missed step; too few reports; the condition ended; no report near the start
    assert sustained(holds, seen).tolist() == [True, False, False, False]


def _pipeline(tmp: Path) -> Pipeline:
    s = Settings(storage={"data_dir": tmp},  # type: ignore[arg-type]
                 detectors={"model": {"path": "none"}})  # type: ignore[arg-type]
    return build_pipeline(s, Wiring(notifiers=(), remediate=False))


def test_an_ib_port_down_through_a_drifting_cadence_pages(tmp_path: Path) -> None:
    p, r = _pipeline(tmp_path), Rounds(nodes=2, gpus=2, links=1, ports=1)
    t = T0
    for k in range(24):
        t = T0 + STEP * k
        p.process(r.batch(t), t)
    r.set(PORT, "ib_state", 1.0)  # DOWN from here
    r.set(PORT, "ib_phys_state", 2.0)
    levels = []
    for k in range(1, 12):
        t += STEP
        missing = (PORT,) if k in (3, 7) else ()  # the agent's round slipped past a step
        p.process(r.batch(t, missing=missing), t)
        levels.append({a.entity: a.level for a in p.alerts.open_alerts()}.get(PORT, 0))
    assert 3 in levels, levels
    # 30 s of DOWN (ib_down_s) and the tick after: within two ticks of the evidence
    assert levels.index(3) <= 7, levels



def test_one_line_from_a_fast_clock_does_not_blind_the_fleet(tmp_path: Path) -> None:
    """A node whose clock runs 290 s ahead (inside max_future_s) sends one line while an IB
    port of another node goes down: the port still pages about ib_down_s after it went down,
    not after the fast clock's time has passed for everyone."""
    p, r = _pipeline(tmp_path), Rounds(nodes=2, gpus=2, links=1, ports=1)
    ahead = Rounds(nodes=3, gpus=1, links=0, ports=0)  # n2 has the fast clock
    t = T0
    for k in range(24):
        t = T0 + STEP * k
        p.process(r.batch(t), t)
    r.set(PORT, "ib_state", 1.0)
    went_down = t + STEP
    paged = None
    for k in range(1, 30):
        t = went_down + STEP * (k - 1)
        if k == 2:
            b = ahead.batch(t + 290, missing=("n0:gpu0", "n1:gpu0"))
            b.frames = {s: f for s, f in b.frames.items() if len(f)}
            p.ingest(b, t)
        p.process(r.batch(t), t)
        if {a.entity: a.level for a in p.alerts.open_alerts()}.get(PORT) == 3 and paged is None:
            paged = t
    assert paged is not None and paged - went_down <= 30 + 2 * STEP, (paged, went_down)
    # the fast node is reported, with how far ahead it stamps
    assert list(p.clock_ahead) == ["n2"] and p.clock_ahead["n2"][0] == 290
