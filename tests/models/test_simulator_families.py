"""Scenario families (models/simulator/families.py): deterministic draws that validate, run,
and a shifted family that stays outside the train family's ranges."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from collectors.catalog import Scope
from models.evaluation.sources import scenario_config
from models.simulator import SimConfig, Simulator, load_scenario
from models.simulator.families import FAMILIES, SHIFTED, TRAIN, Range, draw
from models.simulator.modes import Mode
from models.simulator.scenarios import merge, scenario_tree
from tests.models._simulator_util import collect

SEEDS = range(40)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_same_seed_same_tree_and_other_seeds_other_draws(family: str) -> None:
    assert scenario_tree(family, seed=7) == scenario_tree(family, seed=7)
    trees = [scenario_tree(family, seed=s) for s in range(6)]
    rates = {t["failures"]["rate_multiplier"] for t in trees}
    assert len(rates) == 6
    assert trees[0]["seed"] == 0 and trees[5]["seed"] == 5


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_draw_validates(family: str) -> None:
    for seed in SEEDS:
        cfg = SimConfig.model_validate(scenario_tree(family, seed=seed))
        assert cfg.name == family and cfg.seed == seed
        assert cfg.fleet.nodes == 64 and cfg.time.days == 28 and cfg.time.step_s == 300


def test_train_draws_cover_several_choices() -> None:
    cfgs = [load_scenario("train-family", seed=s) for s in SEEDS]
    assert {c.fleet.links for c in cfgs} == set(TRAIN.nvlinks)
    assert {c.fleet.ib_ports_per_node for c in cfgs} == set(TRAIN.ib_ports)
    laws = {c.failures.lead_time.of(m).dist for c in cfgs for m in Mode
            if m is not Mode.M7_UNOBSERVABLE}
    assert laws == {"lognormal", "exponential", "uniform"}
    assert any(c.fleet.missing_fields for c in cfgs) and any(not c.fleet.missing_fields
                                                             for c in cfgs)
    assert {c.fleet.counter_max for c in cfgs} == {None, 65535.0}


def _inside(x: float, ranges: tuple[Range, ...]) -> bool:
    return any(lo <= x <= hi for lo, hi in ranges)


def test_shifted_draws_lie_outside_the_train_ranges() -> None:
    """Every bold row of the families.py table."""
    for seed in SEEDS:
        tree, d = draw(SHIFTED, "shifted-family", seed)
        train_tree, t = draw(TRAIN, "train-family", seed)
        cfg, train = SimConfig.model_validate(tree), SimConfig.model_validate(train_tree)
        assert cfg.fleet.generation != train.fleet.generation
        assert d["nvlinks"] not in TRAIN.nvlinks and d["ib_ports"] not in TRAIN.ib_ports
        for mode, scale in d["lead_scale"].items():
            assert not _inside(scale, TRAIN.lead_scale), (seed, mode)
            assert _inside(t["lead_scale"][mode], TRAIN.lead_scale)
        assert not _inside(d["noise_scale"], (TRAIN.noise_scale,))
        assert _inside(t["noise_scale"], (TRAIN.noise_scale,))
        b, tb = cfg.benign, train.benign
        outside: list[tuple[float, Range]] = [
            (cfg.signals.gpu_offset_sd_c, TRAIN.offset_sd_c),
            (b.missing_sample_frac, TRAIN.missing_sample_frac),
            (b.gap_per_node_day, TRAIN.gap_per_node_day),
            (b.sbe_carrier_per_gpu_year, TRAIN.carrier_rate),
            (b.carrier_bursts_per_day_median, TRAIN.carrier_per_day),
            (b.carrier_bursts_sigma, TRAIN.carrier_sigma),
        ]
        for value, r in outside:
            assert not _inside(value, (r,)), (seed, value, r)
        assert b.carrier_days_min >= tb.carrier_days_max
        assert cfg.fleet.missing_fields
        assert not set(cfg.fleet.missing_fields) & set(TRAIN.missing_fields)
        assert cfg.fleet.counter_overflow == "wrap" and train.fleet.counter_overflow == "stick"
        assert not cfg.failures.shapes.thermal.power_signature
        assert train.failures.shapes.thermal.power_signature


def test_scenario_config_passes_the_seed_to_the_family() -> None:
    a, b = scenario_config("train-family", 3, days=1), scenario_config("train-family", 4, days=1)
    assert a.seed == 3 and a.time.days == 1
    assert a.failures.rate_multiplier != b.failures.rate_multiplier
    assert a == SimConfig.model_validate(merge(scenario_tree("train-family", seed=3),
                                               {"time": {"days": 1}}))


def test_a_yaml_may_name_a_family_as_its_preset(tmp_path: Any) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("preset: shifted-family\nseed: 5\ntime: {days: 2}\n")
    cfg = load_scenario(path)
    base = load_scenario("shifted-family", seed=5)
    assert cfg.time.days == 2 and cfg.fleet == base.fleet and cfg.seed == 5


def test_unknown_names_are_still_refused() -> None:
    with pytest.raises(FileNotFoundError):
        scenario_tree("no-such-family", seed=1)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_short_run_of_each_family_has_failures_and_labels(family: str) -> None:
    # Four nodes for half a day: rates raised further so the short run holds failures.
    cfg = SimConfig.model_validate(merge(scenario_tree(family, seed=11), {
        "fleet": {"nodes": 4}, "time": {"days": 0.5},
        "failures": {"rate_multiplier": 3000.0}}))
    sim = Simulator(cfg)
    fails = [x for x in sim.labels if x["kind"] == "failure"]
    assert fails and any(x["precursor_onset"] is not None for x in fails)
    grid = collect(list(sim.run()))
    assert grid.values[Scope.NVLINK].shape[1] == 4 * 8 * cfg.fleet.links
    assert grid.values[Scope.IB_PORT].shape[1] == 4 * cfg.fleet.ib_ports_per_node
    for name in cfg.fleet.missing_fields:
        scope = Scope.NVLINK if name.startswith("nvlink") else Scope.GPU
        assert np.isnan(grid.col(scope, name)).all()
    assert np.isfinite(grid.col(Scope.GPU, "gpu_temp")).mean() > 0.8
