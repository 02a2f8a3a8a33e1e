from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.influx.server import INFLUXD, InfluxServer


@pytest.fixture(scope="session")
def influx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InfluxServer]:
    """One real influxd for the session; tests use databases of their own."""
    if INFLUXD is None:
        pytest.skip("influxd is not installed (apt-get install influxdb; .ci/run does)")
    srv = InfluxServer(Path(tmp_path_factory.mktemp("influxd")))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def own_influx(tmp_path: Path) -> Iterator[InfluxServer]:
    """A server of the test's own, for tests that stop and start it."""
    if INFLUXD is None:
        pytest.skip("influxd is not installed (apt-get install influxdb; .ci/run does)")
    srv = InfluxServer(tmp_path / "influxd")
    srv.start()
    yield srv
    srv.stop()
