"""Which history store answers: InfluxDB when one is configured, else the embedded SQLite
store. Apart from the query contract (service.history.history) that both implement, so neither
implementation imports the other's factory."""

from __future__ import annotations

from pathlib import Path

from service.history.history import History
from service.history.history_sqlite import SQLiteHistory
from service.history.influx.reader import InfluxHistory
from service.history.influx.settings import InfluxSettings


def source_name(influx: InfluxSettings) -> str:
    return "influxdb" if influx.url else "sqlite"


def open_history(influx: InfluxSettings, sqlite_path: Path) -> History:
    """InfluxDB when storage.influxdb.url is set, else the embedded SQLite store."""
    if influx.url:
        return InfluxHistory.from_settings(influx)
    return SQLiteHistory(sqlite_path)
