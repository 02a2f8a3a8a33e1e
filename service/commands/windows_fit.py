"""Fit the failure-window calibration (models/predictor/interval.py) on simulated seeds that are
never scored, and write it beside the default model.

    python -m service.commands.windows_fit [--scenario train-family] [--seeds 1010 1011]
        [--days 14] [--set fused] [--coverage 0.8] [--records DIR] [--out PATH]

Each seed is simulated and fed to the detector set; the set's pre-failure alerts with a window
(models/evaluation/windows.py) are kept per seed in --records as JSON, and reused on the next run
(so a fit at another coverage needs no new simulation). The default seeds are train-family seeds
the shipped model was not trained on (it trained on 1000-1005) and that no evaluation scores.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from models.evaluation.windows import PreFailure, window_scores
from models.predictor.interval import COVERAGE, DEFAULT_PATH, fit

log = logging.getLogger(__name__)


def records(scenario: str, seed: int, days: float | None, det: str,
            keep: Path) -> list[PreFailure]:
    kept = keep / f"{Path(scenario).stem}-{seed}-{days}-{det}.json"
    if kept.exists():
        return [PreFailure.from_dict(d) for d in json.loads(kept.read_text())]
    from models.evaluation.sources import scenario_config, simulator_source
    from service.commands.evaluate import evaluate_source, quiet_pipeline

    quiet_pipeline()
    log.info("simulating %s seed %d", scenario, seed)
    run = evaluate_source(simulator_source(scenario_config(scenario, seed, days)), [det], seed)
    found = run["pre_failure"][det]
    keep.mkdir(parents=True, exist_ok=True)
    tmp = kept.with_suffix(".tmp")
    tmp.write_text(json.dumps(found))
    tmp.replace(kept)
    return [PreFailure.from_dict(d) for d in found]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m service.commands.windows_fit",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--scenario", default="train-family")
    p.add_argument("--seeds", type=int, nargs="+", default=[1010, 1011])
    p.add_argument("--days", type=float, default=14.0)
    p.add_argument("--set", dest="det", default="fused", help="the detector set whose alerts "
                   "are calibrated (the service's default: rules and the model)")
    p.add_argument("--coverage", type=float, default=COVERAGE)
    p.add_argument("--records", type=Path, default=Path("var") / "windows")
    p.add_argument("--out", type=Path, default=DEFAULT_PATH)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if not 0.5 <= args.coverage < 1:
        p.error("--coverage must be in [0.5, 1)")
    pres = [x for seed in args.seeds
            for x in records(args.scenario, seed, args.days, args.det, args.records)]
    if not pres:
        print("no pre-failure alert with a window: nothing to calibrate on", file=sys.stderr)
        return 1
    seeds = " ".join(str(s) for s in args.seeds)
    cal = fit((pair for x in pres for pair in x.pairs()), args.coverage,
              f"{args.scenario} seeds {seeds}, {args.days:g} days, set {args.det}: "
              f"{len(pres)} pre-failure alerts")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cal.save(args.out)
    print(json.dumps({"out": str(args.out), "fitted_on": cal.fitted_on, "hidden": cal.hidden,
                      "in_sample": window_scores(pres, cal)["by_mode"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
