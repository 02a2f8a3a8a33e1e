"""InfluxDB settings refuse what would only fail later: retention durations InfluxQL cannot
read, and an auth mode without its credential."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.history.influx.influxql import parse_duration
from service.history.influx.settings import InfluxSettings


def test_durations_parse_as_influxql_reads_them() -> None:
    assert parse_duration("14d") == 14 * 86400
    assert parse_duration("1h30m") == 5400
    assert parse_duration("2w") == 14 * 86400
    assert parse_duration("INF") is None and parse_duration("inf") is None
    assert parse_duration("0s") is None  # InfluxDB reads a zero duration as forever


@pytest.mark.parametrize("bad", ["", "14", "14 days", "d14", "1.5h", "14d;DROP", "-1d"])
def test_bad_retention_is_refused_at_start(bad: str) -> None:
    with pytest.raises(ValidationError, match="not an InfluxQL duration"):
        InfluxSettings(url="http://localhost:8086", raw_retention=bad)
    with pytest.raises(ValidationError, match="not an InfluxQL duration"):
        InfluxSettings(rollup_retention=bad)


def test_auth_needs_its_credential() -> None:
    with pytest.raises(ValidationError, match="no token is set"):
        InfluxSettings(url="http://x:8086", auth="token")
    with pytest.raises(ValidationError, match="no username is set"):
        InfluxSettings(url="http://x:8086", auth="basic")
