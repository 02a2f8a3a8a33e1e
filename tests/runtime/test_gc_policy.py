"""The collector policy (service.runtime.gc_policy): survivors of a full collection leave
later scans, cyclic garbage among them is still collected once the frozen set regrew, and the
last app to stop leaves the collector as it found it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from service.runtime.gc_policy import GcPolicy

pytestmark = pytest.mark.usefixtures("plain_gc")  # no other policy's callback beside these


class _Node:
    other: object = None


def _cycle() -> tuple[_Node, weakref.ref[_Node]]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


@pytest.fixture
def clean() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.slow
def test_survivors_of_a_full_collection_are_frozen(clean: None) -> None:
    policy = GcPolicy(min_regrow=10**9)
    policy.install()
    try:
        start = gc.get_freeze_count()
        kept = [[i] for i in range(5_000)]  # tracked containers that survive
        gc.collect()
        assert gc.get_freeze_count() >= start + len(kept)
        # Garbage made since the last full collection is collected as ever.
        obj, ref = _cycle()
        del obj
        gc.collect()
        assert ref() is None
    finally:
        policy.uninstall()
    assert gc.get_freeze_count() == 0
    assert policy._after not in gc.callbacks


@pytest.mark.slow
def test_frozen_cyclic_garbage_is_collected_once_the_frozen_set_regrew(clean: None) -> None:
    policy = GcPolicy(regrow=0.0, min_regrow=20_000)
    policy.install()
    try:
        obj, ref = _cycle()
        gc.collect()  # the cycle survives: frozen
        del obj
        gc.collect()
        assert ref() is not None, "frozen garbage waits for the next full scan"
        grown = [[i] for i in range(30_000)]  # past min_regrow: the next scan is full
        gc.collect()  # sees the growth and unfreezes
        gc.collect()  # scans everything: the old cycle goes
        assert ref() is None
        assert policy.full_scans == 1
        assert gc.get_freeze_count() >= len(grown)  # and the survivors are frozen again
    finally:
        policy.uninstall()


def test_the_last_app_to_stop_unfreezes(clean: None) -> None:
    policy = GcPolicy()
    policy.install()
    policy.install()  # a second app in the same process (tests run several)
    policy.uninstall()
    assert gc.get_freeze_count() > 0 and policy._after in gc.callbacks
    policy.uninstall()
    assert gc.get_freeze_count() == 0 and policy._after not in gc.callbacks
