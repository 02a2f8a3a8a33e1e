"""Scenario presets and YAML overrides.

- demo: 4 nodes x 8 H100-like GPUs, 6 h at 5 s, with scripted failures of six modes (short
  precursors) and a handful of benign traps, for dashboards and end-to-end demos.
- ci: 64 nodes (512 GPUs), 28 days at 300 s, failure rates x30 (about 190 failures, 45 with a
  precursor), for an end-to-end evaluation that runs in a couple of minutes.
- fleet-year: 512 nodes (4,096 GPUs), 365 days at 300 s, base rates (about 720 failures, 175 with
  a precursor; docs/simulator.md), 4 NVLinks per GPU to keep the render within minutes.

Families (families.py: `train-family`, `shifted-family`) are named like presets but draw a
randomized tree from a seed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from models.simulator.config import SimConfig
from models.simulator.families import FAMILIES

Tree = dict[str, Any]


def _demo() -> Tree:
    f = [
        # mode, at_h, node, unit, link, lead_h, repair_h
        ("M2_gpu_hard", 1.0, 2, 0, 0, None, 1.0),
        ("M3_nvlink", 2.5, 0, 2, 5, 1.0, 0.75),
        ("M1_hbm", 3.5, 1, 5, 0, 1.5, 1.0),
        ("M7_unobservable", 4.0, 3, 0, 0, None, 0.25),
        ("M4_ib_link", 4.5, 2, 3, 0, 2.0, 0.5),
        ("M5_thermal", 5.25, 3, 7, 0, 3.0, 0.5),
        ("M6_sram", 5.5, 1, 1, 0, 1.0, 0.4),
    ]
    b = [
        # trap, start_h, duration_h, node, unit, link
        ("driver_reload", 0.75, 0.05, 0, 0, 0),
        ("sbe_carrier", 0.5, 5.0, 0, 6, 0),
        ("benign_remap", 1.0, 1.0, 1, 2, 0),
        ("nvlink_blip", 2.0, 0.0, 3, 3, 1),
        ("telemetry_gap", 2.2, 0.05, 3, 0, 0),
        ("straggler_compute", 3.0, 0.33, 1, 0, 0),
        ("software_xid", 3.2, 0.0, 2, 6, 0),
        ("clock_skew", 4.2, 1.0, 1, 0, 0),
        ("ib_corruption", 0.0, 6.0, 0, 4, 0),
    ]
    return {
        "name": "demo",
        "fleet": {"nodes": 4, "generation": "H100-like"},
        "time": {"days": 0.25, "step_s": 5},
        "workload": {"job_hours_median": 1.5, "job_hours_sigma": 0.5},
        # Denser remaps than the default so the short M1 precursor shows one.
        "failures": {"shapes": {"hbm": {"remap_prob_per_burst": 0.6}}},
        "scripted_failures": [
            dict(zip(("mode", "at_h", "node", "unit", "link", "lead_h", "repair_h"), x,
                     strict=True)) for x in f],
        "scripted_benign": [
            dict(zip(("trap", "start_h", "duration_h", "node", "unit", "link"), x, strict=True))
            for x in b],
    }


def _ci() -> Tree:
    return {
        "name": "ci",
        "fleet": {"nodes": 64, "generation": "H100-like", "nvlinks_per_gpu": 4},
        "time": {"days": 28, "step_s": 300},
        "failures": {"rate_multiplier": 30.0},
    }


def _fleet_year() -> Tree:
    return {
        "name": "fleet-year",
        "fleet": {"nodes": 512, "generation": "H100-like", "nvlinks_per_gpu": 4},
        # Hourly samples: one round costs about 35 ms for four detector sets at this size, so
        # 8,760 rounds fit the 30-minute budget with room for seeds (docs/evaluation.md).
        "time": {"days": 365, "step_s": 3600},
    }


PRESETS: dict[str, Callable[[], Tree]] = {"demo": _demo, "ci": _ci, "fleet-year": _fleet_year}


def merge(base: Tree, over: Tree) -> Tree:
    """Deep merge: mappings merge key by key, anything else in `over` replaces."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _yaml(path: str | Path) -> Tree:
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a scenario file must hold a mapping")
    return data


def _named(name: str, seed: int) -> Tree:
    """A preset's tree, or the tree a family draws at `seed` (families.py)."""
    return FAMILIES[name](seed) if name in FAMILIES else PRESETS[name]()


def scenario_tree(name_or_path: str | Path, overrides_yaml: str | Path | None = None, *,
                  seed: int = 0) -> Tree:
    """The tree of a preset, a family (drawn at `seed`) or a YAML file (`preset:` may name
    either, the family then drawn at the file's `seed` or this one)."""
    if str(name_or_path) in PRESETS or str(name_or_path) in FAMILIES:
        tree = _named(str(name_or_path), seed)
    else:
        tree = _yaml(name_or_path)
        preset = tree.pop("preset", None)
        if preset is not None:
            if preset not in PRESETS and preset not in FAMILIES:
                raise ValueError(f"unknown preset {preset!r}; known: "
                                 f"{sorted(PRESETS) + sorted(FAMILIES)}")
            tree = merge(_named(preset, int(tree.get("seed", seed))), tree)
    if overrides_yaml is not None:
        over = _yaml(overrides_yaml)
        over.pop("preset", None)
        tree = merge(tree, over)
    return tree


def load_scenario(name_or_path: str | Path, overrides_yaml: str | Path | None = None, *,
                  seed: int | None = None) -> SimConfig:
    """A preset name ("demo", "ci", "fleet-year"), a family name ("train-family",
    "shifted-family", drawn at `seed`) or a YAML file (a whole config, or `preset:` plus
    overrides), with an optional YAML file of overrides merged over it. `seed`, when given,
    is the run's seed too; a family without one is drawn at 0."""
    tree = scenario_tree(name_or_path, overrides_yaml, seed=seed or 0)
    if seed is not None:
        tree["seed"] = seed
    return SimConfig.model_validate(tree)
