"""The dynamic rules keep what they made of hour-resolution windows until the store's hour tier
moves (`ScopeWindows.tier_version`): their findings are the ones made afresh every minute,
across hour boundaries, new entities and a compaction."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity
from models.detectors.dynamic import DynamicThresholds
from models.detectors.findings import Finding
from models.detectors.view import EventView, ScopeView
from service.stages.windows import ScopeWindows, TierSpec, WindowConfig, WindowStore
from tests.pipeline.builders import T0

COMPACT = 12 * 60 * 2 + 204  # a step the rules are run at
TIERS = (TierSpec("1m", 60, 12), TierSpec("1h", 3600, 10))
CONFIG = WindowConfig(raw_length=24, tiers=TIERS, nvlink_raw_length=24, nvlink_tiers=TIERS)


class Hidden:
    """A scope that does not tell its tier versions: the rules read it afresh every time."""

    def __init__(self, w: ScopeWindows) -> None:
        self._w = w

    def __getattr__(self, name: str) -> object:
        if name == "tier_version":
            raise AttributeError(name)
        return getattr(self._w, name)

    def __len__(self) -> int:
        return len(self._w)


class View:
    def __init__(self, store: WindowStore, hide: bool) -> None:
        self.scopes = {s: Hidden(w) if hide else w for s, w in store.scopes.items()}

    def scope(self, scope: Scope) -> ScopeView:
        return self.scopes[scope]  # type: ignore[return-value]

    def events_since(self, ts: float) -> Sequence[EventView]:
        return []


def _same(a: list[Finding], b: list[Finding], where: str) -> None:
    assert [(f.rule, f.scope) for f in a] == [(f.rule, f.scope) for f in b], where
    for x, y in zip(a, b, strict=True):
        for p, q in ((x.risk, y.risk), (x.value, y.value), (x.ttf_h, y.ttf_h),
                     (x.growth, y.growth)):
            assert (p is None) == (q is None), where
            if p is not None:
                assert np.array_equal(p, q, equal_nan=True), f"{where}: {x.rule}"


@pytest.mark.slow
def test_hour_memos_give_the_findings_made_afresh() -> None:
    rng = np.random.default_rng(3)
    store = WindowStore(CONFIG)
    memo, fresh = DynamicThresholds(), DynamicThresholds()
    real, hidden = View(store, hide=False), View(store, hide=True)
    k0 = int(store.step_of(np.array([T0]))[0])
    stamps = set()
    for i in range(12 * 60 * 3 + 30):  # three hours and a bit
        k, now = k0 + i, T0 + 5.0 * i
        store.advance(k)
        # A node joins for a moment; two go quiet after two hours and are forgotten, and two
        # new ones take their slots in the same step (as many entities as the memo saw).
        nodes = [0, 1, 2, 3, 4, 5] if i < 12 * 60 * 2 else [0, 1, 2, 3]
        if i == 12 * 90:
            nodes.append(6)
        if i == COMPACT:
            done = store.forget(now + store[Scope.GPU].horizon_s - 300)
            assert done is not None and len(done.dropped[Scope.GPU]) == 3
            for det in (memo, fresh):
                for sc, keep in done.keep.items():
                    det.forget(sc, keep)
        if i >= COMPACT:
            nodes += [7, 8, 9]
        for sc in (Scope.GPU, Scope.NVLINK, Scope.IB_PORT):
            w = store[sc]
            ents = [Entity.gpu(f"n{n}", 0) if sc is Scope.GPU else
                    Entity.nvlink(f"n{n}", 0, 1) if sc is Scope.NVLINK else
                    Entity.ib_port(f"n{n}", "mlx5_0", 1) for n in nodes]
            slots = np.array([w.slots_for_entity(e, store.registry, now) for e in ents],
                             np.int32)
            v = np.full((len(w.metrics), len(ents)), np.nan, np.float32)
            for j in range(len(w.metrics)):
                # Errors growing with time on node 0, a trickle elsewhere.
                lam = np.where(np.array(nodes) == 0, 0.02 * (1 + i / 300), 0.01)
                v[j] = rng.poisson(lam) if w.is_counter[j] else rng.normal(50, 5, len(ents))
            w.write(slots, np.full(len(ents), k, np.int64), v)
        if i % 12 == 0 or i % 97 == 0:
            got, want = memo.detect(real, now), fresh.detect(hidden, now)
            _same(got, want, f"step {i}")
            stamps.add(store[Scope.NVLINK].tier_version("1h"))
    assert len(stamps) >= 4  # hours closed and the compaction moved the stamp
    assert memo.memo.held and not fresh.memo.held
