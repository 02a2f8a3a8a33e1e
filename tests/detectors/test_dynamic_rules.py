"""The dynamic rules' facts (models/detectors/dynamic/): each family declares its rules once,
with the metrics they read, their evidence and failure mode, and the findings and reads follow
what is declared; the families' settings sit side by side in `DynamicConfig` without one
family's field shadowing another's."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from collectors.catalog import Scope
from models.detectors.dynamic import DynamicConfig, DynamicThresholds
from models.detectors.dynamic.family import Family
from models.detectors.dynamic.infiniband import InfinibandConfig
from models.detectors.dynamic.levels import LevelConfig
from models.detectors.dynamic.memory import MemoryConfig
from models.detectors.dynamic.nvlink import NvlinkConfig
from models.detectors.dynamic.thermal import ThermalConfig
from tests.detectors.view import F32, F64, T0, FakeScope, healthy

FAMILY_CONFIGS = (ThermalConfig, MemoryConfig, InfinibandConfig, NvlinkConfig)


def _own_fields(cls: type) -> set[str]:
    shared = {f.name for f in dataclasses.fields(LevelConfig)}
    return {f.name for f in dataclasses.fields(cls)} - shared


def test_no_family_setting_shadows_another() -> None:
    owned = Counter(name for cls in FAMILY_CONFIGS for name in _own_fields(cls))
    assert [n for n, k in owned.items() if k > 1] == []
    everything = {f.name for f in dataclasses.fields(DynamicConfig)}
    assert everything == set().union(*(_own_fields(c) for c in FAMILY_CONFIGS)) | {
        f.name for f in dataclasses.fields(LevelConfig)}


def test_rule_names_are_unique_and_every_finding_is_a_declared_rule() -> None:
    det = DynamicThresholds()
    names = [r.name for r in det.rules]
    assert len(names) == len(set(names)) == 9
    found = det.detect(healthy(), T0)
    assert sorted(f.rule for f in found) == sorted(names)
    rules = {r.name: r for r in det.rules}
    for f in found:
        r = rules[f.rule]
        assert (f.scope, f.evidence) == (r.scope, r.evidence), f.rule
        assert f.mode == (None if r.mode is None else r.mode.value), f.rule


def _recording(s: FakeScope, seen: set[str]) -> None:
    """`s` notes in `seen` each metric whose windows or latest values are read."""
    window, latest = s.window, s.latest

    def w(metric: str, n: int, tier: str | None = None, stat: str = "agg") -> F32:
        seen.add(metric)
        return window(metric, n, tier, stat)

    def lt(metric: str) -> F64:
        seen.add(metric)
        return latest(metric)

    s.window, s.latest = w, lt  # type: ignore[method-assign]


@pytest.mark.parametrize("family", ["memory", "thermal", "infiniband", "nvlink"])
def test_a_family_reads_the_metrics_its_rules_declare(family: str) -> None:
    fam: Family = getattr(DynamicThresholds(), family)
    fleet = healthy()
    seen: set[str] = set()
    for s in fleet.scopes.values():
        _recording(s, seen)
    fam.every_tick(fleet, T0)
    fam.every_minute(fleet)
    fam.learn(fleet, lambda rule, n: np.zeros(n, bool))
    assert seen == {m for r in fam.rules for m in r.metrics}
    assert {r.scope for r in fam.rules} <= {Scope.GPU, Scope.NVLINK, Scope.IB_PORT}
