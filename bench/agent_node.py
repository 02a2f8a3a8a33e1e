"""A GPU node for the agent without a GPU: a fake `nvidia-smi` (bench.soak_smi, the soak's) over
eight H100-like GPUs, a write endpoint that takes every push, and the command line that runs
`gpuhealth agent` with the service's dependencies made unimportable (what an agent-only install
has). Used by bench.agent_footprint and by the test of the agent's imports."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.soak_fleet import GpuState
from bench.soak_smi import write_executable

REPO = Path(__file__).resolve().parents[1]
GPUS = 8

# Import names of what an agent-only install lacks: the `server` extra's distributions
# (pyproject.toml) and the heavy packages they bring. `gpuhealth agent` imports none of them.
NOT_IN_AGENT = ("torch", "sklearn", "scipy", "matplotlib", "kubernetes", "fastapi", "starlette",
                "uvicorn", "apscheduler", "prometheus_client", "aiosmtplib", "tqdm", "pydantic",
                "pydantic_core", "pydantic_settings", "yaml", "sympy", "networkx", "PIL",
                "joblib", "fastapi_offline", "pyarrow", "httptools", "uvloop", "re2")

# `python -c AGENT_ONLY ARGS...` is `gpuhealth ARGS...` from the source tree in the current
# directory, with every NOT_IN_AGENT module failing to import as if not installed. At exit it
# prints, on stderr, the JSON list of third-party top-level modules that were imported.
AGENT_ONLY = f"""
import importlib.abc, json, sys
BLOCKED = {NOT_IN_AGENT!r}
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
sys.path.insert(0, "")
from service.commands.cli import main
try:
    rc = main()
finally:
    std = set(sys.stdlib_module_names) | {{"collectors", "models", "service", "bench"}}
    mods = sorted({{m.partition(".")[0] for m in sys.modules}} - std)
    print("imported: " + json.dumps([m for m in mods if not m.startswith("_")]),
          file=sys.stderr)
sys.exit(rc)
"""


def fake_nvidia_smi(root: Path, gpus: int = GPUS) -> Path:
    """Write a node's nvidia-smi state and the fake tool; return the directory to put first on
    PATH."""
    rng = random.Random(7)
    listed: list[dict[str, Any]] = [
        GpuState(i, f"GPU-{i:08x}-0000-4000-8000-000000000000",
                 f"00000000:{0x18 + 0x10 * i:02X}:00.0", temp=40.0 + i, base_temp=40.0 + i,
                 power=300.0).as_dict(rng)
        for i in range(gpus)]
    root.mkdir(parents=True, exist_ok=True)
    state = root / "smi-state.json"
    state.write_text(json.dumps({"driver": "550.54.15", "gpus": listed}))
    binary = root / "bin" / "nvidia-smi"
    write_executable(binary, state, REPO)
    return binary.parent


class Sink:
    """A write endpoint on loopback that answers 204 to every POST and counts them."""

    def __init__(self) -> None:
        self.posts = 0
        self.bytes = 0
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with sink.lock:
                    sink.posts += 1
                    sink.bytes += len(body)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/write"

    def __enter__(self) -> Sink:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def agent_args(url: str, spool: Path, interval: float,
               extra: Sequence[str] = ()) -> list[str]:
    return ["agent", "--source", "nvidia-smi", "--host", "bench-node", "--interval",
            f"{interval:g}", "--url", url, "--spool", str(spool), *extra]
