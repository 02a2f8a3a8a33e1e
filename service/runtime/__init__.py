"""What runs the pipeline in a process: the tick scheduler, warm start, replays and their
progress, agents' collector reports, and the service's own Prometheus metrics."""
