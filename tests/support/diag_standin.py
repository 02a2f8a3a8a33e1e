"""A stand-in for a diagnostic tool on a node without GPUs: prints a capture and exits.

    python tests/support/diag_standin.py CAPTURE [--exit N] [--sleep S]

prints CAPTURE's bytes to stdout as they are, then sleeps S seconds (a test killed at its time
limit: the output so far is out, the process still runs) and exits with N. A test puts it on
a node as `dcgmi` or `all_reduce_perf` behind a two-line shell script; it ignores the tool's
own arguments, so only what comes after `--standin` (if present) is read:

    exec python diag_standin.py --standin capture.json --exit 226 -- "$@"

Standard library only: the node may have nothing else.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    if "--" in argv:
        argv = argv[:argv.index("--")]  # the tool's own arguments follow: ignored
    if argv[:1] == ["--standin"]:
        argv = argv[1:]
    p = argparse.ArgumentParser(prog="diag_standin")
    p.add_argument("capture", type=Path)
    p.add_argument("--exit", type=int, default=0, dest="code")
    p.add_argument("--sleep", type=float, default=0.0)
    args = p.parse_args(argv)
    sys.stdout.buffer.write(args.capture.read_bytes())
    sys.stdout.flush()
    if args.sleep > 0:
        time.sleep(args.sleep)
    code: int = args.code
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
