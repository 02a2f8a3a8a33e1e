"""A fake `nvidia-smi` for one soak node: it reads the node's state file (written by the
harness, soak_fleet.Fleet) and prints what the real tool would for the arguments the
collectors pass: `--query-gpu=...  --format=csv[,noheader][,nounits]` and `-q -x`.

The harness writes one executable per node that calls `main(state_file, argv)`; an argument
this fake does not know fails the way nvidia-smi fails (a message and a non-zero status), so a
collector change that asks for something new shows up as a down collector, not as made-up data.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.soak_render import query_csv, query_xml

SCRIPT = """#!{python} -S
import sys
sys.path.insert(0, {repo!r})
from bench.soak_smi import main
sys.exit(main({state!r}, sys.argv[1:]))
"""


def write_executable(path: Path, state: Path, repo: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SCRIPT.format(python=sys.executable, repo=str(repo), state=str(state)))
    path.chmod(0o755)


def main(state_file: str, argv: Sequence[str]) -> int:
    try:
        state = json.loads(Path(state_file).read_text())
    except (OSError, ValueError) as exc:
        print(f"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
              f"driver ({exc})", file=sys.stderr)
        return 9
    gpus = state["gpus"]
    args = list(argv)
    if "-q" in args and "-x" in args:
        sys.stdout.write(query_xml(gpus, state["driver"], time.time()))
        return 0
    query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
    fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
    if query is None or not fmt.startswith("csv"):
        print(f"Invalid combination of input arguments: {' '.join(args)}", file=sys.stderr)
        return 2
    opts = set(fmt.split(",")[1:])
    fields = [f.strip() for f in query.split(",") if f.strip()]
    try:
        text = query_csv(gpus, fields, header="noheader" not in opts, units="nounits" not in opts)
    except KeyError as exc:
        print(f'Field "{exc.args[0]}" is not a valid field to query.', file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0
