"""Database, retention policies and continuous queries on InfluxDB 1.x (`manage_schema`).

Raw points go to the default policy `raw`; a continuous query per measurement keeps 5-minute
mean and max in `rollup_5m` for long-range dashboards and training exports. `rollup_1h` keeps
the hour tier the service writes itself (service.history.influx.hour_tier), as long as the
5-minute rollups. 2.x and 3.x are
set up by their own tools (docs/influxdb.md); there this is switched off.
"""

from __future__ import annotations

import logging

from service.history.influx.client import InfluxClient, InfluxError
from service.history.influx.influxql import ident, time_ns
from service.history.influx.lines import RATE_SUFFIX

log = logging.getLogger(__name__)

RAW_RP = "raw"
HOUR_RP = "rollup_1h"  # service.history.influx.hour_tier writes there
ROLLUP_RP = "rollup_5m"
ROLLUP_EVERY = "5m"
ROLLUP_EVERY_S = 300
ROLLED_UP = ("gpu", "nvlink", "ib_port", "psu", "fan", "node", "gpu" + RATE_SUFFIX,
             "nvlink" + RATE_SUFFIX, "ib_port" + RATE_SUFFIX, "node" + RATE_SUFFIX, "risk")


def statements(database: str, raw_retention: str, rollup_retention: str) -> list[str]:
    db = ident(database)
    out = [f"CREATE DATABASE {db}",
           f"CREATE RETENTION POLICY {ident(RAW_RP)} ON {db} DURATION {raw_retention} "
           f"REPLICATION 1 DEFAULT",
           f"CREATE RETENTION POLICY {ident(ROLLUP_RP)} ON {db} DURATION {rollup_retention} "
           f"REPLICATION 1",
           f"CREATE RETENTION POLICY {ident(HOUR_RP)} ON {db} DURATION {rollup_retention} "
           f"REPLICATION 1"]
    for m in ROLLED_UP:
        out.append(f"CREATE CONTINUOUS QUERY {ident('cq_' + m + '_' + ROLLUP_EVERY)} ON {db} "
                   f"BEGIN {_rollup(database, m)} END")
    return out


def _rollup(database: str, measurement: str, where: str = "") -> str:
    db = ident(database)
    return (f"SELECT mean(*), max(*) INTO {db}.{ident(ROLLUP_RP)}.:MEASUREMENT "
            f"FROM {db}.{ident(RAW_RP)}.{ident(measurement)}{where} "
            f"GROUP BY time({ROLLUP_EVERY}), *")


def backfill_rollups(client: InfluxClient, start: float, end: float) -> None:
    """Roll up raw points of [start, end) now, as the continuous queries would have: for data
    written late (a replayed trace, a spool emptied after an outage) which continuous queries,
    running only over recent intervals, never see."""
    where = f" WHERE time >= {time_ns(start)} AND time < {time_ns(end)}"
    for m in ROLLED_UP:
        client.query(_rollup(client.cfg.database, m, where), write=True, database=False)


def ensure_schema(client: InfluxClient, raw_retention: str, rollup_retention: str) -> None:
    """Idempotent: an existing policy is altered to the configured duration, an existing
    continuous query is kept. Raises InfluxError when InfluxDB is unreachable or refuses."""
    db = client.cfg.database
    for stmt in statements(db, raw_retention, rollup_retention):
        try:
            client.query(stmt, write=True, database=False)
        except InfluxError as exc:
            msg = str(exc)
            if "already exists" not in msg:
                raise
            if stmt.startswith("CREATE RETENTION POLICY"):
                client.query(stmt.replace("CREATE", "ALTER", 1).replace(" REPLICATION 1", ""),
                             write=True, database=False)
    log.info("InfluxDB schema ready: database %s, policies %s (%s), %s and %s (%s)", db,
             RAW_RP, raw_retention, ROLLUP_RP, HOUR_RP, rollup_retention)
