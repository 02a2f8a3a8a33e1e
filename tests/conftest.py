"""Fixtures every test package may ask for."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from models.predictor import interval
from models.predictor.interval import Calibration
from service.runtime import gc_policy
from service.settings import Settings, StorageSettings

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


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Default settings writing only under the test's temporary directory; notifications
    leave at once (no group_wait), so a few rounds show them."""
    return Settings(storage=StorageSettings(data_dir=tmp_path / "data"),
                    notify={"route": {"receiver": "record", "group_wait_s": 0}})


@pytest.fixture
def window_calibration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                       ) -> Iterator[Callable[[Calibration], None]]:
    """Sets the failure-window calibration the process reads (models/predictor/interval.py)
    to a table of the test's own, written where the shipped one would be read from."""
    path = tmp_path / "windows.json"
    monkeypatch.setattr(interval, "DEFAULT_PATH", path)

    def use(cal: Calibration) -> None:
        cal.save(path)
        interval.default_calibration.cache_clear()

    interval.default_calibration.cache_clear()
    yield use
    interval.default_calibration.cache_clear()


@pytest.fixture
def no_window_calibration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No failure-window calibration: windows are shown raw, as without a shipped table."""
    monkeypatch.setattr(interval, "DEFAULT_PATH", tmp_path / "no-windows.json")
    interval.default_calibration.cache_clear()
    yield
    interval.default_calibration.cache_clear()
