"""Running as several processes: shards that own nodes, and leases for what only one may do."""
