"""Running as several processes: the shard map (which process owns which node), and
leases in the shared state for what only one replica may do. docs/design.md, "Sharding"."""
