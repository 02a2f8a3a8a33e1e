"""Running as several processes: the shard map (which process owns which node) and, with
PostgreSQL, the leader lease. docs/design.md, "Sharding"."""
