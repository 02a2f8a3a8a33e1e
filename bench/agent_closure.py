"""The node agent's import closure: this repository's modules that `gpuhealth agent` and
`gpuhealth parse` can import on a node. Two users: the Python 3.9 check of the agent's modules
(tests/collectors/agent/test_agent_py39.py, issue 33), and the one-file binary
(bench.agent_binary), which leaves every other module of ours out.

The closure is every module of `collectors` (a node runs any source the registry has; they are
imported lazily, by name) and the modules of `service` that the agent's command lines import
when run: traced, not read from the source, since the service's CLI module imports the server
inside functions and under TYPE_CHECKING, which a static walk would follow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.agent_node import AGENT_ONLY, REPO, Sink, fake_nvidia_smi

OWN = ("collectors", "models", "service")

# AGENT_ONLY (the server's dependencies unimportable), printing our modules imported at exit.
_TRACE = AGENT_ONLY.replace(
    'print("imported: "',
    'print("own: " + json.dumps(sorted(m for m in sys.modules '
    'if m.partition(".")[0] in ("collectors", "models", "service"))), file=sys.stderr)\n'
    '    print("imported: "')


def _command_lines(tmp: Path, url: str) -> list[list[str]]:
    capture = REPO / "tests" / "collectors" / "captures" / "nvidia-smi" / "query-x-h100x2-v12.xml"
    spool = str(tmp / "spool")
    return [["agent", "--help"], ["agent", "relay", "--help"],
            ["agent", "--once", "--stdout", "--source", "nvidia-smi", "--spool", spool],
            ["agent", "--once", "--url", url, "--spool", spool],
            ["parse", "nvidia-smi", str(capture)]]


def traced_modules() -> set[str]:
    """Our modules the agent's command lines import, each run in a fresh interpreter from the
    source tree against a fake nvidia-smi."""
    found: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="agent-closure-") as d, Sink() as sink:
        tmp = Path(d)
        bin_dir = fake_nvidia_smi(tmp / "node", gpus=2)
        env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        for argv in _command_lines(tmp, sink.url):
            res = subprocess.run([sys.executable, "-c", _TRACE, *argv], cwd=REPO, env=env,
                                 capture_output=True, text=True, timeout=120, check=False)
            line = next((x for x in res.stderr.splitlines() if x.startswith("own: ")), None)
            if line is None:
                raise RuntimeError(f"gpuhealth {' '.join(argv)} did not finish: "
                                   f"{res.stderr[-2000:]}")
            found.update(json.loads(line.removeprefix("own: ")))
    return found


def package_modules(package: str) -> set[str]:
    """Every module of one of our packages, from its files."""
    root = REPO / package
    out: set[str] = set()
    for f in root.rglob("*.py"):
        parts = f.relative_to(REPO).with_suffix("").parts
        out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def closure() -> set[str]:
    return package_modules("collectors") | traced_modules()


def module_file(name: str) -> Path:
    base = REPO.joinpath(*name.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def files(names: Sequence[str] | set[str]) -> list[Path]:
    return sorted(module_file(n) for n in names)


def outside(names: set[str]) -> list[str]:
    """Our modules not in `names`: what the binary leaves out."""
    everything = set().union(*(package_modules(p) for p in OWN))
    return sorted(everything - names)


if __name__ == "__main__":
    for name in sorted(closure()):
        print(name)
