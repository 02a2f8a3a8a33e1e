"""Command line: `python -m models.simulator {write,summary,bench} SCENARIO ...`.

    write   SCENARIO OUT_DIR   simulate into a trace directory (line protocol + labels.jsonl)
    summary SCENARIO           planned failures per mode and benign traps per kind
    bench   SCENARIO --days N  render N days and report GPU-samples per second
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections import Counter
from collections.abc import Sequence

from models.simulator.config import SimConfig
from models.simulator.modes import Mode
from models.simulator.scenarios import load_scenario
from models.simulator.simulator import Simulator
from models.simulator.writer import write_trace


def _summary(cfg: SimConfig) -> str:
    sim = Simulator(cfg)
    labels = sim.labels
    latent = Counter(f.mode for f in sim.latent)
    fails = [x for x in labels if x["kind"] == "failure"]
    modes = Counter(Mode(x["mode"]) for x in fails)
    pre = Counter(Mode(x["mode"]) for x in fails if x["precursor_onset"] is not None)
    traps = Counter(x["trap"] for x in labels if x["kind"] == "benign")
    out = [f"{cfg.name}: {cfg.fleet.gpus} GPUs, {cfg.time.days:g} days at {cfg.time.step_s} s, "
           f"{cfg.gpu_years:.1f} GPU-years, rate multiplier {cfg.failures.rate_multiplier:g}",
           f"failures {len(fails)}, with precursor {sum(pre.values())}"]
    out += [f"  {m:18s} {modes[m]:6d}  with precursor {pre[m]:5d}"
            for m in sorted(modes, key=list(Mode).index)]
    out += [f"  latent {m:16s} {latent[m]:6d}  (active-only: no sample shows it)"
            for m in sorted(latent, key=list(Mode).index)]
    out += [f"  trap {t:22s} {n:6d}" for t, n in sorted(traps.items())]
    return "\n".join(out)


def _bench(cfg: SimConfig, days: float) -> str:
    full_days = cfg.time.days
    cfg = cfg.model_copy(update={"time": cfg.time.model_copy(update={"days": days})})
    sim = Simulator(cfg)
    t0 = time.perf_counter()
    sim.labels  # noqa: B018 - planning
    sim.jobs  # noqa: B018
    t1 = time.perf_counter()
    samples = 0
    for batch in sim.run():
        samples += len(next(iter(batch.frames.values())))
    t2 = time.perf_counter()
    rate = samples / (t2 - t1)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return (f"{cfg.name}: planned {days:g} days in {t1 - t0:.1f} s, rendered in {t2 - t1:.1f} s: "
            f"{rate:.3g} GPU-samples/s; the full {full_days:g} days would take "
            f"{(t2 - t1) * full_days / days / 60:.1f} min; peak RSS {rss:.0f} MiB")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m models.simulator", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=("write", "summary", "bench"))
    p.add_argument("scenario", help="preset (demo, ci, fleet-year), family or YAML file")
    p.add_argument("out_dir", nargs="?", help="trace directory (write)")
    p.add_argument("--overrides", help="YAML file merged over the scenario")
    p.add_argument("--seed", type=int)
    p.add_argument("--days", type=float, default=3.0, help="days to render (bench)")
    p.add_argument("--no-gzip", action="store_true")
    a = p.parse_args(argv)
    cfg = load_scenario(a.scenario, a.overrides, seed=a.seed)
    if a.command == "summary":
        print(_summary(cfg))
    elif a.command == "bench":
        print(_bench(cfg, a.days))
    else:
        if not a.out_dir:
            p.error("write needs OUT_DIR")
        s = write_trace(cfg, a.out_dir, gzip=not a.no_gzip)
        print(f"wrote {s.lines} lines in {len(s.files)} files and {s.labels} labels to "
              f"{s.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
