"""Failure-predictor benchmark: inference per tick at fleet scale, training time, model size
and peak memory, for the shipped model (models/artifacts/default).

    python -m bench.model [--json] [--quick] [--gpus 1000 10000 50000] [--repeats 5]

Inference: for each fleet size (8 GPUs per node, 8 IB ports per node, 18 NVLink links per GPU,
4 at 50,000 GPUs to bound the window store's memory) a window store at a 1-h step (so the raw
ring is the hour buckets the model reads) is filled with 48 hourly rounds through the Ingestor:
healthy values that vary per entity and per hour, plus a few degrading GPUs and IB ports so
that the explanation (occlusion) runs too. Then, on 2 torch threads and on 1 (the detector's
default, PredictorConfig.threads), the median over repetitions of: the hourly model run (one
`PredictorDetector.detect` right after a new hour, on a fresh detector so nothing is cached),
split into features, forward + calibration, explanation and the rest, timed inside the run; and
a cached tick (detect again within the same hour, what every other tick costs). Each fleet size
runs in its own process, so its ru_maxrss is the peak of that fill + inference alone. The goal
(issue): 10,000 GPUs under 200 ms.

Training (skipped with --quick): the shipped model's own command from its card, re-run into a
temporary directory; wall time and the child's peak RSS (os.wait4), then the weights' sha256
against the shipped one (equal: a bit-identical reproduction here) and the test-split average
precision per head against the shipped card. The goal: under 10 minutes on 2 cores.

Retraining from history (`--from-influx GPUS DAYS`, bench/model_history.py): the time and peak
memory of `gpuhealth train --from-influx` over a simulated fleet's history in a local influxd,
per GPU-day and extrapolated to 4,096 GPUs over 90 days (`--from-influx 4096 90` runs it).
With `--tier`, the history is the hour tier the service stores and training builds its features
from it at once (bench/model_tier.py; measured at the issue's size, not extrapolated);
`--tier-check GPUS DAYS` compares those features with a replay's.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from bench.fleet_tables import fleet_tables
from bench.pipeline import rss_mb
from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Frame
from models.detectors.findings import Finding
from models.predictor.detector import PredictorDetector
from models.predictor.package import Predictor
from models.predictor.policy import PredictorConfig
from service.stages.ingest import EventLog, Ingestor
from service.stages.scoring import StoreView
from service.stages.windows import WindowStore, window_config_for

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = ROOT / "models" / "artifacts" / "default"
SIZES = (1000, 10_000, 50_000)
PORTS = 8
HOURS = 48  # hourly rounds of history (more if the model's window is longer)
STEP = 3600.0
T0 = 1_699_999_200.0  # on a whole hour
# Torch threads (PredictorConfig.threads): 2, the target machine's cores, as the issue asks; 1,
# the detector's default, because OpenMP threads spin-wait when other work wants the cores.
THREADS = (2, 1)
INFER_GOAL_MS, INFER_GOAL_GPUS = 200.0, 10_000
TRAIN_GOAL_S = 600.0
F32 = npt.NDArray[np.float32]


def links_for(gpus: int) -> int:
    # 18 links per GPU (NVLink 4) up to 10,000 GPUs; at 50,000 that many links would need
    # several GB of window store on this 23-GB machine, so 4 (the GPU-side features only take
    # the worst link, so the model's input size does not change).
    return 18 if gpus <= 10_000 else 4


# ---- a fleet at a 1-h step ---------------------------------------------------------------------

class HourlyFleet:
    """Hourly rounds of every catalog metric: per-entity offsets and hourly noise on healthy
    levels, a trickle of correctable errors, and a few entities degrading over the last day
    (HBM, thermal, NVLink and IB patterns), so the model's explanation has work to do."""

    def __init__(self, gpus: int, links: int, hours: int, seed: int = 0) -> None:
        self.hours = hours
        self.rng = np.random.default_rng(seed)
        self.tables = fleet_tables(gpus, links, PORTS)
        self.cols = {s: [m.name for m in CATALOG.columns(s)] for s in self.tables}
        self.kind = {s: [m.kind.name for m in CATALOG.columns(s)] for s in self.tables}
        self.counters = {s: np.zeros((len(t), len(self.cols[s]))) for s, t in self.tables.items()}
        g = len(self.tables[Scope.GPU])
        self.temp_offset = self.rng.normal(0.0, 3.0, g)  # cooling differs by slot and rack
        self.power_offset = self.rng.normal(0.0, 25.0, g)
        # One in 250 GPUs and ports degrades (at least 4 of each): 4 / 40 / 200 GPUs.
        k = max(4, g // 250)
        self.bad_gpus = self.rng.choice(g, k, replace=False)
        self.bad_ports = self.rng.choice(len(self.tables[Scope.IB_PORT]), k, replace=False)
        self.links = links

    def round(self, hour: int) -> Batch:
        ts = T0 + STEP * hour
        ramp = max(0, hour - (self.hours - 24))  # hours into the degradation (last day)
        b = Batch()
        for scope, table in self.tables.items():
            n = len(table)
            cols = self.cols[scope]
            v = np.zeros((n, len(cols)))
            inc = np.zeros((n, len(cols)))
            for j, (m, kind) in enumerate(zip(cols, self.kind[scope], strict=True)):
                if kind == "COUNTER":
                    inc[:, j] = self._increase(m, n)
                elif kind == "GAUGE":
                    v[:, j] = self._gauge(m, n)
                elif kind == "STATE":
                    v[:, j] = {"nvlink_state": 1.0, "ib_state": 4.0}.get(m, 0.0)
                    if m == "throttle_power":  # power capping under some jobs
                        v[:, j] = self.rng.random(n) < 0.1
            self._degrade(scope, cols, v, inc, ramp)
            self.counters[scope] += inc
            counter = np.array([k == "COUNTER" for k in self.kind[scope]])
            v[:, counter] = self.counters[scope][:, counter]
            b.add(Frame(table, np.arange(n, dtype=np.int32), np.full(n, ts), v))
        return b

    def _increase(self, m: str, n: int) -> npt.NDArray[np.float64]:
        if m in ("ib_port_rcv_data", "ib_port_xmit_data"):  # IB traffic, varying by job
            out: npt.NDArray[np.float64] = self.rng.uniform(1e11, 5e12, n)
            return out
        # Per entity-hour, about as rare as in the training fleets (a trickle much above them
        # reads as an anomaly to the model and floods the explanation).
        rate = {"ecc_sbe_volatile": 0.001, "ecc_sbe_aggregate": 0.001, "ib_symbol_error": 0.01,
                "nvlink_crc_flit": 0.0002, "pcie_replay": 0.0002}.get(m, 0.0)
        return self.rng.poisson(rate, n).astype(np.float64) if rate else np.zeros(n)

    def _gauge(self, m: str, n: int) -> npt.NDArray[np.float64]:
        noise = self.rng.normal
        # Only GPU gauges take the per-GPU offsets (ib_rate, the one port gauge, is fixed).
        if m in ("gpu_temp", "mem_temp"):
            return (61.0 if m == "gpu_temp" else 69.0) + self.temp_offset + noise(0, 2.0, n)
        if m == "gpu_temp_margin":
            return 25.0 - self.temp_offset + noise(0, 2.0, n)
        if m == "power_draw":
            return 500.0 + self.power_offset + noise(0, 20.0, n)
        if m == "sm_clock":
            return 1980.0 + noise(0, 10.0, n)
        if m == "gpu_util":
            return np.clip(noise(85.0, 10.0, n), 0.0, 100.0)
        fixed = {"gpu_slowdown_temp": 87.0, "gpu_shutdown_temp": 92.0, "mem_max_temp": 95.0,
                 "ib_rate": 400.0}
        return np.full(n, fixed.get(m, 0.0))

    def _degrade(self, scope: Scope, cols: list[str], v: npt.NDArray[np.float64],
                 inc: npt.NDArray[np.float64], ramp: int) -> None:
        if ramp == 0:
            return
        c = {m: j for j, m in enumerate(cols)}
        if scope is Scope.GPU:
            bad = self.bad_gpus
            hbm, hot = bad[0::2], bad[1::2]
            inc[hbm, c["ecc_sbe_volatile"]] += 40.0 * ramp  # accelerating correctable ECC
            inc[hbm, c["ecc_sbe_aggregate"]] += 40.0 * ramp
            inc[hbm, c["remapped_rows_correctable"]] += float(ramp % 4 == 0)
            v[hbm, c["remapped_rows_pending"]] = float(ramp > 12)
            v[hot, c["gpu_temp"]] += 1.2 * ramp  # cooling failing
            v[hot, c["mem_temp"]] += 1.5 * ramp
            v[hot, c["gpu_temp_margin"]] -= 1.2 * ramp
            v[hot, c["throttle_thermal"]] = float(ramp > 12)
        elif scope is Scope.NVLINK:
            # One link of each "hot" GPU starts to take CRC errors and replays.
            link = self.bad_gpus[1::2] * self.links
            inc[link, c["nvlink_crc_flit"]] += 200.0 * ramp
            inc[link, c["nvlink_replay"]] += 5.0 * ramp
        elif scope is Scope.IB_PORT:
            bad = self.bad_ports
            inc[bad, c["ib_symbol_error"]] += 500.0 * ramp
            inc[bad, c["ib_link_error_recovery"]] += float(ramp % 3 == 0)
            inc[bad, c["ib_port_rcv_errors"]] += 10.0 * ramp
            inc[bad, c["ib_link_flaps"]] += float(ramp % 6 == 0)


# ---- inference (one fleet size, in its own process) -------------------------------------------

def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def infer(gpus: int, repeats: int, threads: list[int]) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    links = links_for(gpus)
    predictor = Predictor.load(MODEL_DIR)
    store = WindowStore(window_config_for(STEP))
    events = EventLog()
    ingestor = Ingestor(store, events)
    hours = max(HOURS, predictor.window_h)
    fleet = HourlyFleet(gpus, links, hours)
    fill = 0.0
    steady_rounds = repeats + 1  # kept back: one new hour per steady run (below)
    for k in range(hours - steady_rounds):
        batch = fleet.round(k)
        t0 = time.perf_counter()
        ingestor.ingest(batch, T0 + STEP * k)
        fill += time.perf_counter() - t0
    del batch
    gc.collect()
    view = StoreView(store, events)
    now = T0 + STEP * (hours - 1 - steady_rounds)
    rss_filled = rss_mb()

    per_threads: list[dict[str, Any]] = []
    findings: list[Finding] = []
    for n_threads in threads:
        # The detector sets torch's threads from its config on every hourly run.
        config = PredictorConfig(threads=n_threads)
        torch.set_num_threads(n_threads)
        rows: list[dict[str, float]] = []
        for r in range(repeats + 1):  # the first is a warm-up (first forward, allocator)
            gc.collect()
            # Fresh: nothing cached, as right after a new hour (and no persistence history,
            # which changes which entities pass, not what a run costs). The split is the
            # detector's own timing of the run's phases.
            det = PredictorDetector(predictor, config)
            t0 = time.perf_counter()
            findings = det.detect(view, now)
            total = 1e3 * (time.perf_counter() - t0)
            if r:
                rows.append({"total": total, **{k: 1e3 * v for k, v in det.timing.items()}})
        cached: list[float] = []
        for _ in range(20):
            t0 = time.perf_counter()
            det.detect(view, now)  # the same hour: the findings of the run above
            cached.append(1e3 * (time.perf_counter() - t0))
        per_threads.append(_split(n_threads, rows, cached))
    # Steady state, as the live service runs: the same detector, one new hour each run (its
    # per-hour inputs extended by that hour, models/predictor/hour_cache.py). Measured on the
    # last thread count, after the fresh runs above; the hours kept back feed it.
    steady: list[float] = []
    for k in range(hours - steady_rounds, hours):
        ingestor.ingest(fleet.round(k), T0 + STEP * k)
        gc.collect()
        t0 = time.perf_counter()
        findings = det.detect(view, T0 + STEP * k)
        if k > hours - steady_rounds:  # the first primes the cache after the fresh runs
            steady.append(1e3 * (time.perf_counter() - t0))
    per_threads[-1]["steady_run_ms"] = statistics.median(steady)
    per_threads[-1]["steady_features_ms"] = 1e3 * det.timing.get("features", 0.0)
    return {
        "gpus": gpus, "links_per_gpu": links, "nvlinks": len(fleet.tables[Scope.NVLINK]),
        "ib_ports": len(fleet.tables[Scope.IB_PORT]), "hours": hours,
        "window_h": predictor.window_h,
        "degrading_gpus": len(fleet.bad_gpus), "degrading_ports": len(fleet.bad_ports),
        "fill_s": fill, "ingest_ms_per_round": 1e3 * fill / hours,
        "explained_entities": det.explained,
        "flagged": {f.rule: int(np.count_nonzero(f.risk > 0)) for f in findings},
        "repeats": repeats, "by_threads": per_threads,
        "store_mb": store.nbytes() / 2**20, "rss_after_fill_mb": rss_filled,
        "peak_rss_mb": _peak_mb(), "load_avg_1m": [load_start, os.getloadavg()[0]],
    }


def _split(threads: int, rows: list[dict[str, float]], cached: list[float]) -> dict[str, Any]:
    """Medians over the repetitions; `other` (findings, worst link, masks) is the remainder."""
    def med(key: str) -> float:
        return statistics.median(row.get(key, 0.0) for row in rows)

    other = statistics.median(row["total"] - sum(v for k, v in row.items()
                                                 if k not in ("total", "other"))
                              for row in rows)
    return {"threads": threads, "hourly_run_ms": med("total"),
            "hourly_run_min_ms": min(r["total"] for r in rows), "features_ms": med("features"),
            "forward_calibration_ms": med("forward"), "explanation_ms": med("explain"),
            "other_ms": other, "cached_tick_ms": statistics.median(cached), "runs_ms": rows}


def _infer_child(gpus: int, repeats: int, threads: list[int]) -> dict[str, Any]:
    _progress(f"inference: {gpus:,} GPUs, torch threads {' '.join(map(str, threads))}")
    cmd = [sys.executable, "-m", "bench.model", "--worker", str(gpus), "--repeats", str(repeats),
           "--threads", *map(str, threads)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _progress(msg: str) -> None:
    print(f"bench.model: {msg}", file=sys.stderr, flush=True)


# ---- training ----------------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _train_command(card_command: str, out: Path) -> list[str]:
    """The card's command with this interpreter, `--out` redirected, quiet, metrics as JSON."""
    argv = shlex.split(card_command)
    if argv[:1] != ["gpuhealth"]:
        raise SystemExit(f"bench.model: unexpected card command {card_command!r}")
    rest = argv[1:]
    if "--out" in rest:
        i = rest.index("--out")
        del rest[i:i + 2]
    # Not `-m service.commands.cli`: run as __main__, the commands would register on another module.
    entry = "import sys; from service.commands.cli import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", entry, "--log-level", "WARNING", *rest,
            "--out", str(out), "--no-progress", "--json"]


def train(meta: dict[str, Any]) -> dict[str, Any]:
    card = meta["card"]
    _progress(f"training: {card['command']} (about {card.get('train_wall_s')} s on the card)")
    with tempfile.TemporaryDirectory(prefix="bench-model-") as tmp:
        cmd = _train_command(card["command"], Path(tmp) / "model")
        stdout = Path(tmp) / "stdout.json"
        load_start = os.getloadavg()[0]
        with stdout.open("w") as f:
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=f, cwd=ROOT)
            # wait4: this child's own rusage, not the max over every child so far.
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise SystemExit(f"bench.model: training failed (exit {proc.returncode}): "
                             f"{shlex.join(cmd)}")
        new = json.loads(stdout.read_text())
        weights_bytes = (Path(tmp) / "model" / "weights.pt").stat().st_size
    shipped_sha = str(meta["weights_sha256"])
    ap: dict[str, dict[str, dict[str, float | None]]] = {}
    for scope, m in card["metrics"].items():
        mine = new["metrics"].get(scope, {}).get("test", {})
        ap[scope] = {head: {"shipped": row.get("average_precision"),
                            "new": mine.get(head, {}).get("average_precision")}
                     for head, row in m["test"].items()}
    return {
        "command": shlex.join(cmd), "card_command": card["command"],
        "wall_s": wall, "shipped_wall_s": card.get("train_wall_s"),
        "reported_wall_s": new.get("train_wall_s"),
        "peak_rss_mb": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime,
        "load_avg_1m": [load_start, os.getloadavg()[0]],
        "sha256": new["sha256"], "shipped_sha256": shipped_sha,
        "bit_identical": new["sha256"] == shipped_sha, "weights_bytes": weights_bytes,
        "test_ap": ap, "meets_goal": wall < TRAIN_GOAL_S,
    }


# ---- model size --------------------------------------------------------------------------------

def size() -> dict[str, Any]:
    p = Predictor.load(MODEL_DIR)
    params = {s.value: int(sum(t.numel() for t in rt.model.parameters()))
              for s, rt in p.scopes.items()}
    weights = MODEL_DIR / "weights.pt"
    return {"version": p.version, "weights_bytes": weights.stat().st_size,
            "weights_sha256": _sha256(weights),
            "model_json_bytes": (MODEL_DIR / "model.json").stat().st_size,
            "parameters": params, "parameters_total": sum(params.values())}


# ---- report ------------------------------------------------------------------------------------

def _print(report: dict[str, Any]) -> None:
    s = report["size"]
    print(f"model {s['version']} ({report['model_dir']}): weights.pt {s['weights_bytes']:,} B, "
          f"model.json {s['model_json_bytes']:,} B; parameters "
          + ", ".join(f"{k} {v:,}" for k, v in s["parameters"].items())
          + f" (total {s['parameters_total']:,})")
    first = report["inference"][0]
    print(f"\ninference on CPU ({os.cpu_count()} cores), {first['hours']} hourly rounds in a "
          f"1-h-step store (model window {first['window_h']} h), median of {report['repeats']} "
          f"runs (3 above 10,000 GPUs), each fleet size in its own process")
    print(f"{'GPUs':>7} {'links':>7} {'ports':>6} {'thr':>3} {'features':>9} {'fwd+cal':>9} "
          f"{'explain':>8} {'other':>7} {'hourly':>9} {'cached':>8} {'expl.':>5} {'fill':>6} "
          f"{'store':>7} {'RSS':>7} {'peak':>7} {'load':>9}")
    for r in report["inference"]:
        for i, t in enumerate(r["by_threads"]):
            head = (f"{r['gpus']:>7} {r['nvlinks']:>7} {r['ib_ports']:>6}" if i == 0
                    else " " * 22)
            tail = (f"{r['explained_entities']:>5} {r['fill_s']:>5.1f}s {r['store_mb']:>5.0f}MB "
                    f"{r['rss_after_fill_mb']:>5.0f}MB {r['peak_rss_mb']:>5.0f}MB "
                    f"{r['load_avg_1m'][0]:>4.1f}-{r['load_avg_1m'][1]:<4.1f}" if i == 0 else "")
            print(f"{head} {t['threads']:>3} {t['features_ms']:>7.0f}ms "
                  f"{t['forward_calibration_ms']:>7.0f}ms {t['explanation_ms']:>6.0f}ms "
                  f"{t['other_ms']:>5.0f}ms {t['hourly_run_ms']:>7.0f}ms "
                  f"{t['cached_tick_ms'] * 1e3:>6.0f}us {tail}")
    print("  hourly = one PredictorDetector.detect right after a new hour (fresh detector), "
          "timed inside the run:\n    features (gpu_hours + port_hours), fwd+cal "
          "(scaler, LSTM, calibration), explain (occlusion),\n    other (findings, worst link); "
          "cached = detect again within the hour (every other tick);\n  thr = torch threads "
          "(PredictorConfig.threads: 2 = the cores, 1 = the detector's default);\n"
          "  links = NVLink links (18 per GPU up to 10,000 GPUs, 4 at 50,000 to bound the store's "
          "memory), ports = IB ports (8 per node);\n  expl. = entities explained; fill = the "
          "rounds through the Ingestor (setup, not inference); store = window store;\n  RSS = "
          "after the fill, peak = ru_maxrss of the process (fill + inference); load = 1-min load "
          "average at start-end\n  (above the core count: other work shared the CPUs and the "
          "figures are pessimistic)")
    for r in report["inference"]:
        t = r["by_threads"][-1]
        print(f"  steady, {r['gpus']:,} GPUs, torch threads {t['threads']}: the same detector one "
              f"new hour later: hourly run {t['steady_run_ms']:.0f} ms (features "
              f"{t['steady_features_ms']:.0f} ms; fresh {t['hourly_run_ms']:.0f} ms, ratio "
              f"{t['steady_run_ms'] / t['hourly_run_ms']:.2f})")
    for r in report["inference"]:
        if r["gpus"] != INFER_GOAL_GPUS:
            continue
        for t in r["by_threads"]:
            run, tick = t.get("steady_run_ms", t["hourly_run_ms"]), t["cached_tick_ms"]
            print(f"  goal: {INFER_GOAL_GPUS:,} GPUs under {INFER_GOAL_MS:.0f} ms, torch threads "
                  f"{t['threads']}: hourly run {run:.0f} ms ({_met(run < INFER_GOAL_MS)}), "
                  f"cached tick {tick * 1e3:.0f} us ({_met(tick < INFER_GOAL_MS)})")
    t = report["training"]
    if t is None:
        print("\ntraining: skipped (--quick)")
        return
    print(f"\ntraining: {t['card_command']}\n  re-run: wall {t['wall_s']:.0f} s (shipped card "
          f"{t['shipped_wall_s']} s), CPU {t['cpu_s']:.0f} s, peak RSS {t['peak_rss_mb']:.0f} MB, "
          f"load {t['load_avg_1m'][0]:.1f}-{t['load_avg_1m'][1]:.1f}; goal under "
          f"{TRAIN_GOAL_S / 60:.0f} min: {_met(t['meets_goal'])}")
    print(f"  weights sha256 {t['sha256'][:16]}... vs shipped {t['shipped_sha256'][:16]}...: "
          + ("bit-identical" if t["bit_identical"] else "differ"))
    print(f"  test-split average precision, 24-h heads:\n  {'scope':<8} {'head':<18} "
          f"{'shipped':>8} {'re-run':>8} {'delta':>8}")
    for scope, heads in t["test_ap"].items():
        for head, v in heads.items():
            if not head.endswith("@24h"):
                continue
            a, b = v["shipped"], v["new"]
            d = f"{b - a:>+8.4f}" if a is not None and b is not None else f"{'-':>8}"
            print(f"  {scope:<8} {head:<18} {_num(a):>8} {_num(b):>8} {d}")


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--repeats", type=int, default=5, help="runs per figure (3 above 10,000 GPUs)")
    ap.add_argument("--threads", type=int, nargs="+", default=list(THREADS),
                    help="torch thread counts to measure (default 2 1)")
    ap.add_argument("--quick", action="store_true", help="skip the training re-run")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--from-influx", type=float, nargs=2, metavar=("GPUS", "DAYS"),
                    help="only time `train --from-influx` over a simulated history of GPUS x "
                         "DAYS in a local influxd (the issue's size: 4096 90); "
                         "bench/model_history.py")
    ap.add_argument("--tier", action="store_true",
                    help="with --from-influx: the history as the stored hour tier at an hourly "
                         "step, trained from it (bench/model_tier.py)")
    ap.add_argument("--influx-url", help="with --from-influx --tier: an influxd that holds the "
                    "hour tier already (a rerun measures the training alone)")
    ap.add_argument("--tier-check", type=float, nargs=2, metavar=("GPUS", "DAYS"),
                    help="features built from the stored hour tier against a replay's "
                         "(bench/model_tier.py)")
    args = ap.parse_args(argv)
    if args.tier_check:
        from bench.model_tier import main as tier

        return tier(int(args.tier_check[0]), args.tier_check[1], args.json, tier_check=True)
    if args.from_influx and args.tier:
        from bench.model_tier import main as tier

        return tier(int(args.from_influx[0]), args.from_influx[1], args.json,
                    url=args.influx_url)
    if args.from_influx:
        from bench.model_history import main as history

        return history(int(args.from_influx[0]), args.from_influx[1], args.json)
    if args.worker:
        print(json.dumps(infer(args.worker, args.repeats, args.threads)))
        return 0
    meta = json.loads((MODEL_DIR / "model.json").read_text())
    report: dict[str, Any] = {
        "model_dir": str(MODEL_DIR.relative_to(ROOT)), "repeats": args.repeats,
        "torch_threads": args.threads, "size": size(),
        "inference": [_infer_child(g, args.repeats if g <= 10_000 else min(args.repeats, 3),
                                   args.threads) for g in args.gpus],
        "training": None if args.quick else train(meta),
    }
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        _print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
