"""`train --from-influx` at fleet scale: a simulated fleet's history written into a local
influxd (bench/influx_history.py: the sink's LineWriter, labels as the `label` measurement),
then `gpuhealth train --from-influx` over it in a child process: wall time (replay and
training) and peak memory (the child's ru_maxrss from os.wait4, which is its VmHWM), per
GPU-day, with a linear extrapolation to the issue's size (4,096 GPUs over 90 days).

    python -m bench.model --from-influx 4096 90      # the issue's size (hours on 2 cores)
    python -m bench.model --from-influx 512 14       # minutes
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.influx_history import write_simulated
from models.simulator.config import SimConfig
from models.simulator.scenarios import scenario_tree
from service.history.influx.settings import InfluxSettings

ISSUE = (4096, 90)
START = "2025-01-01T00:00:00Z"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _influxd(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    exe = shutil.which("influxd")
    if exe is None:
        raise SystemExit("influxd is not installed (apt-get install influxdb)")
    port = _port()
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "influxdb.conf"
    conf.write_text(f'reporting-disabled = true\nbind-address = "127.0.0.1:{_port()}"\n'
                    f'[meta]\n  dir = "{root}/meta"\n[data]\n  dir = "{root}/data"\n'
                    f'  wal-dir = "{root}/wal"\n  query-log-enabled = false\n'
                    f'[http]\n  bind-address = "127.0.0.1:{port}"\n  log-enabled = false\n'
                    f'  max-body-size = 0\n[monitor]\n  store-enabled = false\n'
                    f'[logging]\n  level = "warn"\n')
    proc = subprocess.Popen([exe, "-config", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/ping", timeout=1).status_code == 204:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("influxd did not start")


def scenario(gpus: int, days: float, step_s: int | None = None) -> SimConfig:
    tree = scenario_tree("ci", seed=1000)
    tree["fleet"]["nodes"] = max(1, gpus // 8)
    tree["time"]["days"] = days
    if step_s is not None:
        tree["time"]["step_s"] = step_s
    tree["seed"] = 1000
    return SimConfig.model_validate(tree)


def run(gpus: int, days: float, epochs: int = 2) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        root = Path(tmp)
        proc, url = _influxd(root / "influxd")
        try:
            cfg = {"url": url, "database": "history", "cluster": "bench",
                   "raw_retention": "INF"}
            t0 = time.perf_counter()
            wrote = write_simulated(scenario(gpus, days), InfluxSettings(**cfg))  # type: ignore[arg-type]
            write_s = time.perf_counter() - t0
            child = train_child(root, cfg, epochs, ["--source", "raw"])
        finally:
            proc.terminate()
            proc.wait(30)
    wall, rss_mb, out = child["train_wall_s"], child["peak_rss_mb"], child["output"]
    gpu_days = gpus * days
    scale = ISSUE[0] * ISSUE[1] / gpu_days
    return {"gpus": gpus, "days": days, "epochs": epochs, "rounds": wrote["rounds"],
            "lines_written": wrote["lines"], "failures": wrote["failures"],
            "write_s": round(write_s, 1), "train_wall_s": round(wall, 1),
            "peak_rss_mb": rss_mb, "s_per_gpu_day": wall / gpu_days,
            "dataset_mb": round(dataset_mb(gpus, days), 1),
            "extrapolated_4096x90": {
                "wall_h": round(wall * scale / 3600, 2),
                "dataset_mb": round(dataset_mb(*ISSUE), 1),
                "peak_rss_mb": round(rss_mb + dataset_mb(*ISSUE) - dataset_mb(gpus, days), 1),
                "note": f"linear in GPU-days from {gpus} GPUs x {days:g} days; memory: the "
                        "measured peak plus the larger dataset (hourly features, float32)"},
            "output": out}


def train_child(root: Path, cfg: dict[str, Any], epochs: int,
                extra: list[str] | None = None,
                until: str = "2030-01-01T00:00:00Z") -> dict[str, Any]:
    """`gpuhealth train --from-influx` over the whole stored span in a child process: its wall
    time and peak memory (ru_maxrss from os.wait4: the child's VmHWM)."""
    config = root / "gpuhealth.yaml"
    config.write_text(yaml.safe_dump({"storage": {"data_dir": str(root), "influxdb": cfg}}))
    cmd = [sys.executable, "-c", "import sys; from service.commands.cli import main; "
           "sys.exit(main())", "train", "--from-influx", "--since", START,
           "--until", until, "--config", str(config),
           "--out", str(root / "model"), "--epochs", str(epochs), "--no-progress",
           *(extra or [])]
    t1 = time.perf_counter()
    with open(root / "out", "wb") as fo, open(root / "err", "wb") as fe:
        child = subprocess.Popen(cmd, stdout=fo, stderr=fe,
                                 cwd=Path(__file__).resolve().parents[1])
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t1
    rc = os.waitstatus_to_exitcode(status)
    out, err = (root / "out").read_text(), (root / "err").read_text()
    if rc != 0:
        raise SystemExit(f"train --from-influx failed ({rc}): {err[-2000:]}")
    return {"train_wall_s": round(wall, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "output": out.strip().splitlines()[-3:]}


def dataset_mb(gpus: int, days: float) -> float:
    """The recorded hourly features (the dataset training holds): GPUs and IB ports (8 per
    node) x hours x features, float32."""
    from collectors.catalog import Scope
    from models.predictor.features import n_hourly

    hours = days * 24
    return (gpus * n_hourly(Scope.GPU) + gpus * n_hourly(Scope.IB_PORT)) * hours * 4 / 2**20


def main(gpus: int, days: float, as_json: bool) -> int:
    import json

    r = run(gpus, days)
    if as_json:
        print(json.dumps(r, indent=2))
        return 0
    e = r["extrapolated_4096x90"]
    print(f"train --from-influx, {gpus} GPUs x {days:g} days ({r['rounds']} rounds, "
          f"{r['failures']} failures; written in {r['write_s']:.0f} s):\n"
          f"  measured: {r['train_wall_s']:.0f} s wall, peak RSS {r['peak_rss_mb']:.0f} MB "
          f"({1000 * r['s_per_gpu_day']:.1f} ms per GPU-day; dataset {r['dataset_mb']:.0f} MB)"
          f"\n  extrapolated to 4,096 GPUs x 90 days: {e['wall_h']:.1f} h, peak RSS about "
          f"{e['peak_rss_mb']:.0f} MB (dataset {e['dataset_mb']:.0f} MB)")
    return 0
