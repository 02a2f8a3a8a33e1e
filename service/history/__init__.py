"""Sample and risk history: the sinks that keep what ingest accepted, the risk and alert record of
each tick, and the readers that answer history queries from SQLite or InfluxDB (with the InfluxDB
writer, reader and spool). It stands on the round and on the database layer below it."""
