"""A cold start behind a relay (issue 29, defect 3): `gpuhealth serve` (a subprocess, its
embedded SQLite store, never having met the fleet), one relay on loopback, one round of every
node's agent push through it, then every sample read back from the store.

    python -m bench.cold_start_relay [--nodes 1250] [--gpus 8] [--links 18] [--token T]

Prints the samples sent and stored (the goal: none lost) and the time from the relay's first
forward to its spool empty (the service admitting the fleet). Without --token the service takes
`ingest.max_new_gpus_per_batch` new GPUs a request and answers the rest 503 with Retry-After
(the relay sends the pending nodes again); with one, a writer holding a token is taken in full.
Exit 1 when a sample is lost."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from tests.collectors.agent.cold_start import cold_start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cold_start_relay", description=__doc__)
    p.add_argument("--nodes", type=int, default=1_250)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--links", type=int, default=18, help="NVLink links per GPU")
    p.add_argument("--token", default=None, help="a write token for the service and relay")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        run = cold_start(Path(d), args.nodes, args.gpus, args.links, token=args.token)
    lost = len(run.sent - run.stored)
    out = {"gpus": args.nodes * args.gpus, "samples_sent": len(run.sent),
           "samples_stored": len(run.stored & run.sent), "samples_lost": lost,
           "admit_s": round(run.admit_s, 2), "bodies_sent": run.bodies_sent,
           "resends_503": run.forward_failures, "token": bool(args.token)}
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:<16} {v}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
