"""Memory benchmark: the service's resident memory at fleet scale with the model loaded.

    python -m bench.memory [--gpus 10000] [--json] [--before | --compare]

Builds the service's pipeline as the composition root does (service/assembly.py: rules,
thresholds and the model slot holding the shipped model, loaded as `serve` loads it; alerts in
SQLite; no sample-history sink, whose memory is SQLite's bounded page cache), feeds it DGX-like
rounds (8 GPUs, 18 NVLink links per GPU, 8 IB ports per node, every catalog metric) from a few
minutes before a whole hour to past it, so the 1-minute and hour tiers close buckets and the
rules' hour work runs, and reports the process's RSS (VmRSS, and the peak VmHWM) after each
part: interpreter and imports, the benchmark's own fleet generator (not the service's), the
model, the window store, and the rules' and alerts' state once warm; then bytes per GPU, and the
service's peak (VmHWM less the generator), which the 2-GB budget bounds as well.

--before runs the layout before issue 18's memory work: every gauge keeping its max and min in
every tier (WindowConfig.ranges=None), no heap trim after ticks, and a bucket's close re-reading
all slots at once. --compare runs both, each in a fresh process, and prints them side by side.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

BUDGET_MB = 2048.0


def _status() -> dict[str, float]:
    """VmRSS and VmHWM of this process, in MB."""
    out: dict[str, float] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(line.split()[1]) / 1024
    return out


def rss_mb() -> float:
    gc.collect()
    return _status()["VmRSS"]


@dataclass
class Report:
    gpus: int
    links: int
    ports: int
    imports_mb: float  # interpreter, numpy and the service's modules
    generator_mb: float  # the benchmark's fleet generator: not the service's
    model_mb: float  # torch and the shipped model
    pipeline_mb: float  # the assembled pipeline, before any data
    store_mb: float  # the first round: the window store allocated for the fleet
    store_nbytes_mb: float  # what its arrays hold (ScopeWindows.nbytes)
    warm_mb: float  # rules, baselines, memos and alert state once warm (past an hour)
    rss_mb: float  # the process at the end
    peak_mb: float  # VmHWM: the most it held at any moment (a tick's temporaries)
    service_mb: float  # rss less the generator
    service_peak_mb: float  # peak less the generator: the most the service held at any moment
    service_per_gpu_kb: float  # (service - imports - model) per GPU
    within_budget: bool  # service_mb within BUDGET_MB
    peak_within_budget: bool  # service_peak_mb within BUDGET_MB
    layout: str = "now"  # "before": the layout before issue 18's memory work


def run(gpus: int, minutes_before: int = 3, minutes_after: int = 2,
        old_layout: bool = False) -> Report:
    import dataclasses

    import service.stages.windows as windows
    from bench.pipeline import Fleet
    from collectors.catalog import Scope
    from service.assembly import Wiring, default_detectors
    from service.heap import HeapTrim
    from service.pipeline import build_pipeline
    from service.settings import Settings

    imports = rss_mb()
    chunk, chunk_bytes = windows.ROLLUP_CHUNK, windows.ROLLUP_BYTES
    fleet = Fleet(gpus)
    generator = rss_mb() - imports
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings()
        settings = settings.model_copy(update={"storage": settings.storage.model_copy(
            update={"data_dir": Path(tmp)})})
        if old_layout:
            settings = settings.model_copy(update={
                "window": dataclasses.replace(settings.window, ranges=None)})
            windows.ROLLUP_CHUNK = windows.ROLLUP_BYTES = 1 << 40  # put back below
        before = rss_mb()
        detectors = default_detectors(settings)  # the model slot loads the shipped model
        model = rss_mb() - before
        before = rss_mb()
        pipe = build_pipeline(settings, Wiring.offline(
            alert_db=str(settings.storage.sqlite_path), detectors=detectors))
        if old_layout:
            pipe.heap = HeapTrim(trim=lambda pad: 0)
        built = rss_mb()
        t0 = 1_699_999_200.0 - 60 * minutes_before  # the hour at 1_699_999_200
        pipe.process(fleet.round(t0), t0)
        first = rss_mb()
        for k in range(1, 12 * (minutes_before + minutes_after)):
            pipe.process(fleet.round(t0 + 5 * k), t0 + 5 * k)
        assert pipe.store[Scope.NVLINK].finished("1h") >= 0, "the hour tier closed no bucket"
        end = rss_mb()
        peak = _status()["VmHWM"]
        nbytes = pipe.store.nbytes() / 2**20
        links, ports = len(pipe.store[Scope.NVLINK]), len(pipe.store[Scope.IB_PORT])
    windows.ROLLUP_CHUNK, windows.ROLLUP_BYTES = chunk, chunk_bytes
    service = end - generator
    return Report(
        gpus=gpus, links=links, ports=ports, imports_mb=imports, generator_mb=generator,
        model_mb=model, pipeline_mb=built - before, store_mb=first - built,
        store_nbytes_mb=nbytes, warm_mb=end - first, rss_mb=end, peak_mb=peak,
        service_mb=service, service_peak_mb=peak - generator,
        service_per_gpu_kb=(service - imports - model) * 1024 / gpus,
        within_budget=service <= BUDGET_MB, peak_within_budget=peak - generator <= BUDGET_MB,
        layout="before" if old_layout else "now")


def compare(gpus: int) -> list[Report]:
    """Both layouts, each in a fresh interpreter (a process never hands all it held back)."""
    out = []
    for flag in ("--before", None):
        cmd = [sys.executable, "-m", "bench.memory", "--gpus", str(gpus), "--json"]
        done = subprocess.run(cmd + ([flag] if flag else []), check=True, capture_output=True,
                              text=True)
        out.append(Report(**json.loads(done.stdout)))
    return out


ROWS = (("interpreter and imports", "imports_mb"), ("fleet generator (benchmark)", "generator_mb"),
        ("torch and the shipped model", "model_mb"), ("pipeline, empty", "pipeline_mb"),
        ("window store, first round", "store_mb"), ("  its arrays", "store_nbytes_mb"),
        ("rules, alerts once warm", "warm_mb"), ("process", "rss_mb"),
        ("peak (VmHWM)", "peak_mb"), ("service (less the generator)", "service_mb"),
        ("service peak (less the generator)", "service_peak_mb"))


def _print_compare(reports: list[Report]) -> None:
    r0 = reports[0]
    print(f"{r0.gpus} GPUs, {r0.links} NVLink links, {r0.ports} IB ports; RSS in MB, "
          "each layout in a fresh process:")
    print(f"  {'':<32} {'before':>8} {'now':>8} {'change':>8}")
    for label, key in ROWS:
        a, b = (float(getattr(r, key)) for r in reports)
        print(f"  {label:<32} {a:>8.0f} {b:>8.0f} {b - a:>+8.0f}")
    for r in reports:
        print(f"  {r.layout}: service {r.service_mb:.0f} MB, "
              f"{'within' if r.within_budget else 'OVER'} {BUDGET_MB:.0f} MB, peak "
              f"{r.service_peak_mb:.0f} MB, {'within' if r.peak_within_budget else 'OVER'}; "
              f"{r.service_per_gpu_kb:.0f} KB per GPU beyond imports and model")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--json", action="store_true")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--before", action="store_true",
                     help="the layout before issue 18's memory work")
    how.add_argument("--compare", action="store_true",
                     help="both layouts side by side, each in a fresh process")
    args = ap.parse_args(argv)
    if args.gpus < 8:
        ap.error("--gpus: at least one node of 8")
    if args.compare:
        reports = compare(args.gpus)
        if args.json:
            json.dump([asdict(r) for r in reports], sys.stdout, indent=2)
            print()
        else:
            _print_compare(reports)
        return 0
    r = run(args.gpus, old_layout=args.before)
    if args.json:
        json.dump(asdict(r), sys.stdout, indent=2)
        print()
        return 0
    print(f"{r.gpus} GPUs, {r.links} NVLink links, {r.ports} IB ports; RSS in MB:")
    for label, mb in (("interpreter and imports", r.imports_mb),
                      ("fleet generator (benchmark)", r.generator_mb),
                      ("torch and the shipped model", r.model_mb),
                      ("pipeline, empty", r.pipeline_mb),
                      (f"window store (arrays {r.store_nbytes_mb:.0f} MB)", r.store_mb),
                      ("rules, alerts once warm", r.warm_mb)):
        print(f"  {label:<36} {mb:>8.0f}")
    print(f"  {'process':<36} {r.rss_mb:>8.0f}  (peak {r.peak_mb:.0f})")
    print(f"  {'service (less the generator)':<36} {r.service_mb:>8.0f}  "
          f"{'within' if r.within_budget else 'OVER'} {BUDGET_MB:.0f} MB; "
          f"{r.service_per_gpu_kb:.0f} KB per GPU beyond imports and model")
    print(f"  {'service peak (less the generator)':<36} {r.service_peak_mb:>8.0f}  "
          f"{'within' if r.peak_within_budget else 'OVER'} {BUDGET_MB:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
