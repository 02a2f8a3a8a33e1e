"""Node agent footprint: what `pip install gpuhealth[agent]` puts on disk, and the agent's
resident memory once it runs.

    python -m bench.agent_footprint [--rounds 20] [--interval 1] [--venv DIR] [--json]
    python -m bench.agent_footprint --no-install   # RSS only, from the source tree

Install: a fresh virtual environment (made without pip, so only what the install brings is
counted) gets the project from a copy of the source tree with its `agent` extra, through this
interpreter's pip and pip's own configuration (index, find-links), pinned to requirements.txt
(`-c`); the size is site-packages on disk, per distribution from its RECORD. `--pip-arg` passes
options on (e.g. `--pip-arg=--no-index --pip-arg=--find-links=DIR` offline).

Memory: that environment's `gpuhealth agent` (or, with --no-install, the source tree's with the
service's dependencies made unimportable, bench.agent_node.AGENT_ONLY) reads a fake nvidia-smi
over eight GPUs each round and pushes to a loopback endpoint; after --rounds pushes its VmRSS and
VmHWM (peak) are read from /proc. Goals (issue 17): under 100 MB installed, under 60 MB RSS.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.agent_node import AGENT_ONLY, REPO, Sink, agent_args, fake_nvidia_smi

MiB = 1 << 20
GOAL_INSTALL_MB, GOAL_RSS_MB = 100, 60
_SOURCES = ("collectors", "models", "service", "bench", "pyproject.toml", "README.md")


def install_agent(venv: Path, work: Path, pip_args: list[str]) -> None:
    """A venv without pip, then `pip --python VENV install SRC[agent]` from a copy of the tree
    (building in place would leave build/ and *.egg-info in the repository)."""
    src = work / "src"
    for name in _SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "-q", "-c", str(REPO / "requirements.txt"), f"{src}[agent]",
                    *pip_args], check=True)


def _site_packages(venv: Path) -> Path:
    (found,) = venv.glob("lib/python3*/site-packages")
    return found


def _on_disk(path: Path) -> int:
    st = path.lstat()
    return st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size


def install_size(venv: Path) -> dict[str, Any]:
    """site-packages on disk (as `du` counts it) and per distribution, from each RECORD."""
    site = _site_packages(venv)
    total = sum(_on_disk(p) for p in site.rglob("*") if p.is_file() and not p.is_symlink())
    per: dict[str, int] = {}
    for record in site.glob("*.dist-info/RECORD"):
        name = record.parent.name.split("-")[0]
        size = 0
        with record.open(newline="") as f:
            for row in csv.reader(f):
                p = site / row[0] if row else site
                if p.is_file() and not p.is_symlink():
                    size += _on_disk(p)
        per[name] = size
    return {"site_packages_mb": round(total / MiB, 1),
            "distributions": {k: round(v / MiB, 1)
                              for k, v in sorted(per.items(), key=lambda kv: -kv[1])}}


def _proc_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def agent_rss(cmd: list[str], cwd: Path, work: Path, rounds: int,
              interval: float) -> dict[str, Any]:
    """Run the agent until the sink has taken `rounds` pushes; its memory then."""
    bin_dir = fake_nvidia_smi(work / "node")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("PYTHONPATH", None)
    with Sink() as sink:
        args = agent_args(sink.url, work / "spool", interval)
        proc = subprocess.Popen([*cmd, *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60 + 3 * rounds * interval
        try:
            while sink.posts < rounds:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"agent stopped or stalled after {sink.posts} pushes: "
                                       f"{proc.communicate(timeout=10)[1][-2000:]}")
                time.sleep(0.1)
            time.sleep(interval / 2)  # between rounds: idle
            rss, hwm = _proc_kb(proc.pid, "VmRSS"), _proc_kb(proc.pid, "VmHWM")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                err = proc.communicate(timeout=30)[1]
            except subprocess.TimeoutExpired:
                proc.kill()
                err = proc.communicate()[1]
    return {"rounds": sink.posts, "pushed_kb": round(sink.bytes / 1024, 1),
            "rss_mb": round(rss / 1024, 1), "peak_rss_mb": round(hwm / 1024, 1),
            "agent_said": next((x for x in reversed(err.splitlines())
                                if x.startswith("agent:")), err.strip()[-500:])}


def run(rounds: int, interval: float, venv: Path | None, install: bool,
        pip_args: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agent-footprint-") as tmp:
        work = Path(tmp)
        out: dict[str, Any] = {"goal_install_mb": GOAL_INSTALL_MB, "goal_rss_mb": GOAL_RSS_MB}
        if install:
            target = venv or work / "venv"
            if not (target / "bin" / "gpuhealth").exists():
                t0 = time.monotonic()
                install_agent(target, work, pip_args)
                out["install_s"] = round(time.monotonic() - t0, 1)
            out["install"] = install_size(target)
            cmd, cwd = [str(target / "bin" / "gpuhealth")], work
            out["mode"] = "agent-only venv"
        else:
            cmd, cwd = [sys.executable, "-c", AGENT_ONLY], REPO
            out["mode"] = "source tree, service dependencies blocked"
        out["agent"] = agent_rss(cmd, cwd, work, rounds, interval)
        return out


def _report(r: dict[str, Any]) -> str:
    lines = [f"node agent footprint ({r['mode']})"]
    if "install" in r:
        ins = r["install"]
        top = ", ".join(f"{k} {v}" for k, v in list(ins["distributions"].items())[:6])
        lines.append(f"  installed: {ins['site_packages_mb']} MiB site-packages "
                     f"(goal < {r['goal_install_mb']}); largest: {top}")
    a = r["agent"]
    lines.append(f"  RSS after {a['rounds']} rounds (8 GPUs, nvidia-smi): {a['rss_mb']} MiB, "
                 f"peak {a['peak_rss_mb']} MiB (goal < {r['goal_rss_mb']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.agent_footprint",
                                description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=20, help="pushes before RSS is read")
    p.add_argument("--interval", type=float, default=1.0, help="agent --interval (seconds)")
    p.add_argument("--venv", type=Path, help="install here (kept); reused if it has gpuhealth")
    p.add_argument("--no-install", dest="install", action="store_false",
                   help="skip the install; run the source tree with the service's "
                        "dependencies blocked")
    p.add_argument("--pip-arg", action="append", default=[], help="passed on to pip install")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.rounds < 1 or not args.interval > 0:
        p.error("--rounds must be 1 or more and --interval positive")
    result = run(args.rounds, args.interval, args.venv, args.install, args.pip_arg)
    print(json.dumps(result, indent=2) if args.json else _report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
