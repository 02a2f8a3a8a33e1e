"""Every catalog metric has a valid range, and ingest refuses a value outside it, cell by cell,
whatever the source: the values a fuzz run wrote (a state of 7, -1 or 1e308, a temperature of
1e308 or -300) once fired level-3 hard rules, each a drain request in auto mode."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import CATALOG, COUNT_MAX, Catalog, Kind, Metric, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from collectors.schema import SchemaMapper
from models.simulator import Simulator
from models.simulator.hardware import GENERATIONS
from service.assembly import Wiring
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from service.stages.ingest import MAX_DETAILED_REJECTIONS, EventLog, Ingestor
from service.stages.windows import WindowStore
from tests.models._simulator_util import SCOPES, collect, small
from tests.pipeline.builders import T0, Rounds

STEP = 5.0

# (entity, metric, value): each would fire a hard rule (or, for the last ones, count as a
# reading) if it were taken as a reading.
HOSTILE = [
    ("n0:mlx5_0:1", "ib_state", 7.0),  # ib_port_down: not ACTIVE for 30 s
    ("n0:mlx5_1:1", "ib_state", -1.0),
    ("n1:mlx5_0:1", "ib_state", 1e308),
    ("n0:gpu0:nvlink0", "nvlink_state", -1.0),  # nvlink_down fires on 0 only, but -1 is junk
    ("n0:gpu0:nvlink1", "nvlink_state", 7.0),
    ("n0:gpu1", "remapped_rows_failure", 7.0),  # remap_failure: >= 1
    ("n0:gpu2", "remapped_rows_failure", 1e308),
    ("n0:gpu3", "throttle_thermal", 7.0),  # thermal_slowdown: >= 1 for 60 s
    ("n0:gpu4", "gpu_temp", 1e308),  # near_shutdown: within 2 degC of the shutdown threshold
    ("n0:gpu5", "gpu_temp", -300.0),
    ("n0:gpu6", "gpu_shutdown_temp", -300.0),  # near_shutdown from the threshold's side
    ("n0:gpu7", "mem_temp", 1e308),
    ("n1:gpu0", "ecc_dbe_volatile", 1e308),  # dbe: any uncorrectable error
    ("n1:gpu1", "retired_pages_dbe", 2.0**64),  # retired_pages_limit: 63
    ("n1:gpu2", "gpu_temp", math.inf),
]
REAL_FAULT = "n1:gpu3"  # a real uncorrectable error: proves an alert would be seen


def test_every_metric_has_a_range_and_the_registry_refuses_a_gauge_without_one() -> None:
    for m in CATALOG:
        lo, hi = m.bounds
        assert math.isfinite(lo) and math.isfinite(hi) and lo < hi, m.name
        if m.kind in (Kind.GAUGE, Kind.STATE):
            assert m.valid is not None, m.name
    cat = Catalog()
    with pytest.raises(ValueError, match="needs a valid range"):
        cat.register(Metric("t", "degC", Kind.GAUGE, Scope.GPU, "a temperature"))
    with pytest.raises(ValueError, match="is empty"):
        cat.register(Metric("s", "bool", Kind.STATE, Scope.GPU, "a flag", valid=(1.0, 0.0)))
    assert "t" not in cat and "s" not in cat


@pytest.mark.parametrize(("metric", "inside", "outside"), [
    ("gpu_temp", (-40.0, 200.0), (-40.5, 200.5, 1e308, -300.0)),
    ("gpu_shutdown_temp", (40.0, 92.0, 200.0), (0.0, -300.0)),
    ("gpu_temp_margin", (-5.0, 49.0), (-300.0, 1e308)),
    ("power_draw", (0.0, 700.0, 5000.0), (-1.0, 5001.0)),
    ("sm_clock", (0.0, 1980.0), (-1.0, 1e5)),
    ("gpu_util", (0.0, 100.0), (-0.5, 100.5)),
    ("ib_state", (0.0, 1.0, 4.0, 5.0), (-1.0, 6.0, 7.0, 1e308)),
    ("ib_phys_state", (0.0, 5.0, 7.0), (-1.0, 8.0)),
    ("ib_rate", (0.0, 2.5, 400.0, 800.0), (-1.0, 1e5)),
    ("nvlink_state", (0.0, 1.0), (-1.0, 2.0, 7.0)),
    ("remapped_rows_pending", (0.0, 1.0), (-1.0, 7.0)),
    ("ecc_dbe_volatile", (0.0, 2.0**62, COUNT_MAX), (-1.0, 2.0**63, 1e308)),
])
def test_ranges_at_and_past_their_edges(metric: str, inside: tuple[float, ...],
                                        outside: tuple[float, ...]) -> None:
    m = CATALOG[metric]
    assert [m.out_of_range(v) for v in inside] == [None] * len(inside)
    for v in outside:
        why = m.out_of_range(v)
        assert why is not None and why.startswith(f"{metric} value ")
        assert m.bounds_text in why


def _pipeline(tmp_path: Path) -> Pipeline:
    return build_pipeline(Settings(storage={"data_dir": tmp_path}),
                                   Wiring(notifiers=(), remediate=False))


def test_out_of_range_values_fire_no_hard_rule_and_are_each_refused(tmp_path: Path) -> None:
    pipe = _pipeline(tmp_path)
    rounds = Rounds()
    fired: list[tuple[str, int]] = []
    reasons: set[str] = set()
    hostile_rounds = 40  # 200 s: past every sustained rule's hold (30 s IB, 60 s thermal)
    for k in range(40 + hostile_rounds):
        now = T0 + k * STEP
        if k == 40:
            for key, metric, value in HOSTILE:
                rounds.set(key, metric, value)
            rounds.add(REAL_FAULT, "ecc_dbe_volatile", 1)
        batch = rounds.batch(now)
        if k == 40:
            batch.events.add("n1:gpu4", now, "xid", 1e308)  # no Xid code is that large
        res = pipe.ingest(batch, now)
        reasons.update(r.reason for r in res.rejections)
        tick = pipe.tick(now)
        fired.extend((t.entity, t.new) for t in tick.transitions if t.new > t.old)
    # The real fault pages; nothing the hostile values touched raises any alert.
    assert fired == [(REAL_FAULT, 3)]
    assert pipe.stats.samples_rejected == len(HOSTILE) * hostile_rounds + 1
    assert {
        "ib_state value 7 is outside its valid range [0, 5]",
        "ib_state value -1 is outside its valid range [0, 5]",
        "ib_state value 1e+308 is outside its valid range [0, 5]",
        "gpu_temp value 1e+308 is outside its valid range [-40, 200] degC",
        "gpu_temp value -300 is outside its valid range [-40, 200] degC",
        "gpu_temp value inf is outside its valid range [-40, 200] degC",
        "gpu_shutdown_temp value -300 is outside its valid range [40, 200] degC",
        "ecc_dbe_volatile value 1e+308 is outside its valid range [0, 2^63) errors",
        "xid value 1e+308 is outside its valid range [0, 2^63) code",
    } <= reasons
    # Refused values are missing, never stored: the sensor reads as silent, not as hot.
    gpus = pipe.store[Scope.GPU]
    slot = gpus.slot(Entity.parse("n0:gpu4"))
    assert slot is not None
    assert np.isnan(gpus.window("gpu_temp", hostile_rounds)[slot]).all()
    assert not np.isnan(gpus.window("power_draw", hostile_rounds)[slot]).any()
    pipe.close()


def test_line_protocol_values_out_of_range_are_refused_per_value_and_the_rest_kept(
        tmp_path: Path) -> None:
    pipe = _pipeline(tmp_path)
    ns = int(T0 * 1e9)
    lines = [
        f"gpu,gpu=0,host=n0 gpu_temp=1e308,power_draw=300.0,remapped_rows_failure=7i {ns}",
        f"gpu,gpu=1,host=n0 gpu_temp=-300,gpu_shutdown_temp=92.0 {ns}",
        f"nvlink,gpu=0,host=n0,link=0 nvlink_state=-1i,nvlink_replay=3i {ns}",
        f"ib_port,device=mlx5_0,host=n0,port=1 ib_state=7i,ib_rate=400.0 {ns}",
    ]
    batch = SchemaMapper().parse("\n".join(lines))
    assert batch.rejected == []  # the parser has no ranges: ingest is the one check
    res = pipe.ingest(batch, T0)
    assert (res.accepted, res.rejected) == (4, 5)
    assert sorted(f"{r.entity} {r.metric}" for r in res.rejections) == [
        "n0:gpu0 gpu_temp", "n0:gpu0 remapped_rows_failure", "n0:gpu0:nvlink0 nvlink_state",
        "n0:gpu1 gpu_temp", "n0:mlx5_0:1 ib_state"]
    gpu = res.clean.frames[Scope.GPU]
    assert np.nansum(gpu.values[:, CATALOG.column(Scope.GPU, "power_draw")]) == 300.0
    assert np.isnan(gpu.values[:, CATALOG.column(Scope.GPU, "gpu_temp")]).all()
    pipe.close()


def test_a_flood_of_out_of_range_values_is_counted_exactly_and_summarised() -> None:
    n = 3 * MAX_DETAILED_REJECTIONS
    table = EntityTable(Scope.GPU, [Entity.gpu(f"n{i}", 0) for i in range(n)])
    v = np.full((n, len(CATALOG.columns(Scope.GPU))), np.nan)
    v[:, CATALOG.column(Scope.GPU, "gpu_temp")] = 1e308
    v[:, CATALOG.column(Scope.GPU, "power_draw")] = 300.0
    b = Batch()
    b.add(Frame(table, np.arange(n, dtype=np.int32), np.full(n, T0), v))
    res = Ingestor(WindowStore(), EventLog()).ingest(b, T0)
    assert (res.accepted, res.rejected) == (n, n)
    assert len(res.rejections) == MAX_DETAILED_REJECTIONS
    assert res.rejections[0].reason.startswith("gpu_temp value 1e+308 is outside")


@pytest.mark.parametrize("generation", sorted(GENERATIONS))
def test_the_simulators_own_readings_are_all_in_range(generation: str) -> None:
    """Failure-dense runs (thermal, memory, link faults) stay inside every range: the ranges
    refuse junk, never a reading the model of a real fleet produces."""
    grid = collect(list(Simulator(small(fleet={"generation": generation},
                                        failures={"rate_multiplier": 5000.0})).run()))
    for scope in SCOPES:
        for j, m in enumerate(CATALOG.columns(scope)):
            x = grid.values[scope][:, :, j]
            x = x[~np.isnan(x)]
            lo, hi = m.bounds
            assert len(x) == 0 or (lo <= x.min() and x.max() <= hi), (m.name, x.min(), x.max())
    assert all(CATALOG["xid"].out_of_range(code) is None for _, _, code in grid.events)
