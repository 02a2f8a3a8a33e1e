"""Where data outlives the process: the SQLite file every store shares, sample history read
back from SQLite or InfluxDB, and the InfluxDB writer, reader and spool."""
