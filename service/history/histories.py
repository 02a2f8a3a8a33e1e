"""Which history store answers: InfluxDB when one is configured, else the embedded SQLite
store. Apart from the query contract (service.history.history) that both implement, so neither
implementation imports the other's factory."""

from __future__ import annotations

from service.history.history import History
from service.history.history_sqlite import SQLiteHistory
from service.history.influx.reader import InfluxHistory
from service.settings import Settings


def source_name(settings: Settings) -> str:
    return "influxdb" if settings.storage.influxdb.url else "sqlite"


def open_history(settings: Settings) -> History:
    """InfluxDB when storage.influxdb.url is set, else the embedded SQLite store."""
    if settings.storage.influxdb.url:
        return InfluxHistory.from_settings(settings.storage.influxdb)
    return SQLiteHistory(settings.storage.sqlite_path)
