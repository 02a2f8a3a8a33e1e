"""Entities come and go while the model's hourly findings are cached: NVLink links that arrive
after their GPUs, GPUs added and nodes joining between two model runs must never break a tick
(the demo's own trace once failed every tick with a broadcast error in fusion)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from collectors.catalog import Scope
from models.detectors.findings import Finding
from models.detectors.fusion import fuse
from service.assembly import Wiring
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from service.stages.windows import window_config_for
from tests.pipeline.builders import T0, Rounds

STEP = 300.0


def _pipeline(tmp: Path, model: str) -> Pipeline:
    s = Settings(window=window_config_for(STEP), storage={"data_dir": tmp},  # type: ignore[arg-type]
                 detectors={"model": {"path": model}})  # type: ignore[arg-type]
    return build_pipeline(s, Wiring(notifiers=(), remediate=False))


def _run(p: Pipeline, r: Rounds, start: float, steps: int) -> float:
    t = start
    for k in range(steps):
        t = start + k * STEP
        r.add("n1:gpu2", "ecc_sbe_volatile", 40.0)
        p.ingest(r.batch(t), t)
        tick = p.tick(t)
        for scope in (Scope.GPU, Scope.NVLINK, Scope.IB_PORT):
            assert len(tick.risk.scopes[scope].risk) == len(p.store[scope])
    return t


def test_links_gpus_and_nodes_joining_after_the_model_ran(tmp_path: Path) -> None:
    p = _pipeline(tmp_path, "default")  # the shipped model: it predicts NVLink per GPU
    # 8 h 15 min: the growth below falls inside an hour, between two model runs
    t = _run(p, Rounds(nodes=2, gpus=4, links=1, ports=1), T0, int(8.25 * 3600 / STEP))
    slot = p.scorer.detectors[-1]
    assert slot.name == "lstm" and getattr(slot, "detector", None) is not None
    # Links first (same GPUs), then more GPUs, then a whole node, each between model runs.
    for grown in (Rounds(nodes=2, gpus=4, links=3, ports=1),
                  Rounds(nodes=2, gpus=8, links=3, ports=1),
                  Rounds(nodes=3, gpus=8, links=3, ports=2)):
        t = _run(p, grown, t + STEP, 3)
    assert p.stats.ticks > 0
    # the hour after: the model scores the grown fleet and its NVLink findings cover new links
    t = _run(p, Rounds(nodes=3, gpus=8, links=3, ports=2), t + STEP, int(3600 / STEP))
    links = p.risk.scopes[Scope.NVLINK] if p.risk else None
    assert links is not None and len(links.risk) == 3 * 8 * 3


def _finding(n: int, at: int) -> Finding:
    risk = np.zeros(n, np.float32)
    risk[at] = 0.5
    return Finding("r", Scope.GPU, risk, np.zeros(n), 1.0, "s", details={at: "why"})


def test_fusion_fits_findings_sized_for_another_entity_count() -> None:
    shorter, longer = _finding(3, 2), _finding(9, 8)
    out = fuse([shorter, longer], {Scope.GPU: 5})[Scope.GPU]
    assert out.risk.tolist() == [0, 0, 0.5, 0, 0]  # the slot past the fleet is gone
    assert [s.rule for s in out.explain(2)] == ["r"] and out.explain(4) == []
    assert np.isnan(shorter.fitted(5).value[3:]).all()
