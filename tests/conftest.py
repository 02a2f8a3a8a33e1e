"""Fixtures every test package may ask for."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.runtime import gc_policy

# Session fixtures that start a server or train a model: under xdist (`make test-fast` runs
# `-n auto --dist loadgroup`) the tests that take one run on one worker, so it is made once.
SHARED = {"recorded": "predictor-model", "tiny": "predictor-model",
          "tiny_model": "predictor-model", "influx_server": "influxd",
          "slurm_cluster": "slurm"}

# The real PostgreSQL server and the `state_target` fixture that runs a shared-state store's
# tests on SQLite and on PostgreSQL.
pytest_plugins = ("tests.postgres",)


@pytest.fixture(scope="session", autouse=True)
def _gc_policy_held() -> Iterator[None]:
    """The test process holds the collector policy that every running app installs
    (service.runtime.gc_policy), as a long-running service's process does. Otherwise the
    first app of each test pays a full collection of the whole test process (torch, every
    test module: about 0.4 s a start, a third of the API tests' time) and the last one to
    stop unfreezes it all again for the next."""
    gc_policy.POLICY.install()
    yield
    gc_policy.POLICY.uninstall()


@pytest.fixture
def plain_gc() -> Iterator[None]:
    """The collector as a process without a running app has it (nothing frozen, no policy
    callback), for a test that counts on what a full collection frees or finds: it releases
    the session's hold for the test."""
    gc_policy.POLICY.uninstall()
    try:
        yield
    finally:
        gc_policy.POLICY.install()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist's loadgroup each test goes to whichever worker is free, but a test module
    whose fixtures outlive a test (a served app, a browser, a simulated fleet) stays on one
    worker, and so do the tests of each expensive session fixture above."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _xdist_group(item: pytest.Item) -> str | None:
    names = getattr(item, "fixturenames", ())
    shared = sorted({SHARED[n] for n in names if n in SHARED})
    if shared:
        return shared[0]
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    if any(d[-1].scope in ("package", "module", "class") for d in defs if d):
        return item.nodeid.split("::")[0]
    return None
