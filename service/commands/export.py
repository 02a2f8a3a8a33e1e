"""`gpuhealth export`: raw samples and events of a time range out of InfluxDB, back into our
trace format (collectors.trace), so `gpuhealth replay`, `evaluate --trace` and training read
what the service stored as they read a recorded trace.

InfluxDB is read one chunk of time at a time (service.history.influx.reader.RawReader) and each
chunk is written before the next is asked for, so memory stays bounded however long the range."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

from service.commands.cli import register
from service.commands.usage import load_settings

log = logging.getLogger(__name__)

_SCOPES = ("gpu", "nvlink", "ib_port")


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="start", required=True,
                   help="start, inclusive: epoch seconds or RFC 3339 (2023-11-14T22:13:20Z)")
    p.add_argument("--to", dest="end", required=True, help="end, exclusive: as --from")
    p.add_argument("--out", type=Path, required=True, help="trace directory to write")
    p.add_argument("--labels", type=Path,
                   help="a labels.jsonl to validate and copy beside the trace")
    p.add_argument("--scope", default=",".join(_SCOPES),
                   help="comma-separated scopes to export (default: gpu,nvlink,ib_port; "
                        "Xid events go with gpu)")
    p.add_argument("--config", type=Path, help="settings file (YAML); default $GPUHEALTH_CONFIG")
    p.add_argument("--cluster", help="cluster tag to export (default: storage.influxdb.cluster)")
    p.add_argument("--chunk", type=float, default=600.0,
                   help="seconds of data per InfluxDB query (default 600); bounds memory")
    p.add_argument("--no-gzip", action="store_true", help="write plain .lp files")


def _fail(msg: str) -> int:
    print(f"gpuhealth export: {msg}", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    from collectors.catalog import Scope
    from collectors.labels import LabelError, load_labels
    from collectors.trace import LABELS_FILE, SUFFIXES, TraceWriter
    from service.history.history import QueryError, parse_time
    from service.history.influx.client import InfluxClient, InfluxError
    from service.history.influx.reader import RawReader

    try:
        start, end = parse_time(args.start), parse_time(args.end)
    except QueryError as exc:
        return _fail(str(exc))
    if start >= end:
        return _fail(f"--from ({args.start}) must be before --to ({args.end})")
    if args.chunk <= 0:
        return _fail("--chunk must be positive")
    names = [s.strip() for s in args.scope.split(",") if s.strip()]
    bad = [s for s in names if s not in _SCOPES]
    if bad or not names:
        return _fail(f"--scope {args.scope!r}: choose from {', '.join(_SCOPES)}")
    if args.labels is not None:
        try:
            load_labels(args.labels)  # refused as a whole, every bad line named
        except (OSError, LabelError) as exc:
            return _fail(f"--labels {args.labels}: {exc}")
    if args.out.exists() and not args.out.is_dir():
        return _fail(f"--out {args.out}: not a directory")
    if args.out.exists() and any(p.name.endswith(SUFFIXES) for p in args.out.iterdir()):
        # Parts of another trace would break the time order a trace promises.
        return _fail(f"{args.out} already holds a trace; export into a new directory")
    settings = load_settings(args.config)
    cfg = settings.storage.influxdb
    if not cfg.url:
        return _fail("export reads InfluxDB: set storage.influxdb.url (--config or "
                     "GPUHEALTH_STORAGE__INFLUXDB__URL)")
    reader = RawReader(InfluxClient(cfg), args.cluster or cfg.cluster)
    counts = {"lines": 0, "chunks": 0}
    try:
        with TraceWriter(args.out, gzip=not args.no_gzip) as writer:
            for a, b, batch in reader.batches(start, end, [Scope(s) for s in names], args.chunk):
                n = writer.write(batch)
                counts["lines"] += n
                counts["chunks"] += 1
                log.debug("exported %d lines for [%.0f, %.0f)", n, a, b)
            files = list(writer.files)
    except InfluxError as exc:
        return _fail(f"InfluxDB: {exc}")
    finally:
        reader.close()
    if args.labels is not None:
        shutil.copyfile(args.labels, args.out / LABELS_FILE)
    print(f"exported {counts['lines']} lines ({', '.join(names)}) from cluster "
          f"{reader.cluster!r} in {counts['chunks']} chunks into {len(files)} file(s) in "
          f"{args.out}" + (f"; {reader.skipped} points without our entity tags skipped"
                           if reader.skipped else ""))
    if not counts["lines"]:
        print("gpuhealth export: no samples in that range (check --from/--to, the cluster "
              "and the database)", file=sys.stderr)
        return 1
    return 0


register("export", _configure, _run,
         "export raw samples and events from InfluxDB as a trace (line protocol + labels)")
