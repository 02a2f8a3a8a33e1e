"""The default learning loop on its own, in simulated time: a fleet whose failure mix differs
from the shipped model's (bench/learning.py's MIX) runs through the live pipeline with the
InfluxDB sink and the auto-labeller, and the scheduled retraining job
(service.runtime.retrain.Retrainer, the settings' defaults: weekly, 10 labels per mode, a week
in shadow, fine-tuned from the active model) is stepped every few data hours on the data clock.
Nothing is done by hand: the job trains (`gpuhealth train --from-influx` in a child process,
the span ending at the data clock), shadows, judges and promotes or refuses on its own.

Beside it, a rules-only twin (the same rounds, no model) gives the rules' alerts. Both are
scored against the simulator's own failures (never seen by the loop) over the weeks after the
first promotion (or the whole run when none happened): per view, detected, false alarms,
precision, recall, F1 and median lead.

    python -m bench.learning --loop --nodes 16 --days 35 --rate-multiplier 60
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.learning import MIX, _pipeline, config_file, scenario, settings
from models.evaluation.events import AlertRecord, truth_from_labels
from models.evaluation.matching import FailureIndex, default_views, match
from models.evaluation.metrics import view_scores
from models.evaluation.rounds import feed_rounds
from models.evaluation.sources import simulator_source
from models.predictor.interval import MODEL, model_calibrated
from service.assembly import Wiring
from service.history.influx.sink import InfluxSink
from service.pipeline import Pipeline, build_pipeline
from service.runtime.retrain import ACTOR, Retrainer, TrainFailed
from service.settings import Settings
from service.stages.windows import window_config_for
from service.tick import TickResult
from tests.influx.server import InfluxServer

DAY = 86400.0
HOUR = 3600.0


@dataclass
class SimTrainer:
    """`gpuhealth train --from-influx` as the service's CommandTrainer runs it, over the span
    that ends at the data clock (the service's ends at the wall clock)."""

    config: Path
    pipe: Pipeline
    now: list[float]
    runs: list[dict[str, Any]] = field(default_factory=list)

    def train(self, out: Path, since_days: float, init: Path | None = None) -> None:
        for sink in (x for x in self.pipe.sinks if isinstance(x, InfluxSink)):
            sink.flush(600)
        end = self.now[0]
        cmd = [sys.executable, "-c", "import sys; from service.commands.cli import main; "
               "sys.exit(main())", "train", "--from-influx", "--since",
               str(end - since_days * DAY), "--until", str(end), "--config", str(self.config),
               "--out", str(out), "--no-progress"]
        cmd += [] if init is None else ["--init", str(init)]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        self.runs.append({"at": end, "wall_s": round(time.perf_counter() - t0, 1),
                          "rc": done.returncode,
                          "said": (done.stdout or done.stderr).strip().splitlines()[-3:]})
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise TrainFailed(f"training exited {done.returncode}: " + " / ".join(tail))


def _escalations(res: TickResult) -> list[AlertRecord]:
    return [AlertRecord(t.at, t.entity, t.scope, t.node, t.new, t.old)
            for t in res.transitions if t.new > t.old and not t.derived]


def _scores(alerts: list[AlertRecord], labels: list[dict[str, Any]], span: tuple[float, float],
            node_days: float) -> dict[str, Any]:
    failures = list(truth_from_labels(labels).failures)
    index = FailureIndex(failures)
    out = {}
    for v in default_views():
        s = view_scores(match(alerts, failures, v, index=index), failures, node_days, span)
        out[v.name] = {k: s[k] for k in ("failures", "detected", "false_alarms", "precision",
                                         "recall_all", "f1")} | {
            "median_lead_h": (s["lead"] or {}).get("median_h")}
    return out


def run(nodes: int, days: float, seed: int, multiplier: float, root: Path,
        check_h: float = 6.0) -> dict[str, Any]:
    cfg_sim = scenario(nodes, days, seed, multiplier)
    src = simulator_source(cfg_sim)
    step = src.step_s
    srv = InfluxServer(root / "influxd")
    srv.start()
    try:
        data = root / "data"
        s = settings(data, srv.url)
        s = s.model_copy(update={"learning": s.learning.model_copy(update={
            "retrain": s.learning.retrain.model_copy(update={"enabled": True})})})
        cfg = config_file(root, data, srv.url)
        pipe = _pipeline(s, step)
        twin = build_pipeline(Settings(window=window_config_for(step),
                                       detectors={"model": {"path": "none"}}),  # type: ignore[arg-type]
                              Wiring.offline())
        now = [float(src.start or 0.0)]
        trainer = SimTrainer(cfg, pipe, now)
        job = Retrainer(pipe, s.learning.retrain, trainer, root / "models",
                        clock=lambda: now[0])
        steps: list[dict[str, Any]] = []
        fused: list[AlertRecord] = []
        rules: list[AlertRecord] = []
        next_check = now[0] + check_h * HOUR
        t0 = time.perf_counter()
        try:
            for r in feed_rounds(src.chunks, step):
                now[0] = r.now
                pipe.ingest(r.batch, r.now)
                fused += _escalations(pipe.tick(r.now))
                rules += _escalations(twin.process(r.batch, r.now))
                if r.now >= next_check:
                    next_check += check_h * HOUR
                    said = job.step()
                    assert pipe.roles is not None
                    pipe.roles.check(force=True)  # a promotion: the slot loads it now
                    if not steps or steps[-1]["said"] != said:
                        steps.append({"at_day": round((r.now - cfg_sim.time.start_s) / DAY, 2),
                                      "said": said})
            assert pipe.registry is not None
            audit: list[dict[str, Any]] = [
                {"at_day": round((a.at - cfg_sim.time.start_s) / DAY, 2), "action": a.action,
                 "version": a.version, "reason": a.reason}
                for a in reversed(pipe.registry.audit(200)) if a.actor == ACTOR]
            # The windows' own refit: which calibration the fused stream ended with, and which
            # modes the model's windows were calibrated for (else it stayed advisory).
            refit = pipe.windows.status.as_dict() if pipe.windows is not None else None
            counted = {m: model_calibrated(m) for m in MIX}
            recs = pipe.windows.ledger.records(0.0, float("inf")) if pipe.windows else []
            with_model = sum(any(w.source == MODEL for w in r.windows) for r in recs)
        finally:
            pipe.close()
            twin.close()
        wall = time.perf_counter() - t0
    finally:
        srv.stop()
    start, end = float(cfg_sim.time.start_s), float(cfg_sim.time.end_s)
    promoted = [float(a["at_day"]) for a in audit if a["action"] == "promote"]
    later = start + promoted[0] * DAY if promoted else start
    node_days = nodes * (end - later) / DAY
    return {"scenario": {"nodes": nodes, "gpus": nodes * 8, "days": days, "seed": seed,
                         "step_s": step, "rate_multiplier": multiplier},
            "wall_s": round(wall, 1), "job": steps, "audit": audit,
            "trainings": [t | {"at_day": round((t["at"] - start) / DAY, 2)}
                          for t in trainer.runs],
            "scored_from_day": round((later - start) / DAY, 2),
            "windows": {"refit": refit, "model_counts_for": counted,
                        "escalations_with_a_window": len(recs),
                        "of_them_with_a_model_window": with_model},
            "fused": _scores(fused, src.labels, (later, end), node_days),
            "rules": _scores(rules, src.labels, (later, end), node_days)}


def show(out: dict[str, Any]) -> None:
    sc = out["scenario"]
    print(f"loop: {sc['gpus']} GPUs, {sc['days']:g} days at {sc['step_s']:g} s, "
          f"rate x{sc['rate_multiplier']:g}; {out['wall_s']} s")
    for st in out["job"]:
        print(f"  day {st['at_day']:>6}: {st['said']}")
    for t in out["trainings"]:
        print(f"  training at day {t['at_day']}: {t['wall_s']} s, exit {t['rc']}: "
              f"{t['said'][-1] if t['said'] else ''}")
    w = out["windows"]
    print(f"windows: {w['escalations_with_a_window']} escalations with a window, "
          f"{w['of_them_with_a_model_window']} with the model's; refit {w['refit']}; the model "
          f"counts for {[m for m, c in w['model_counts_for'].items() if c] or 'no mode'}")
    print(f"scored from day {out['scored_from_day']} (the first promotion, or the start):")
    for view in ("watch", "warning", "critical"):
        for stream in ("rules", "fused"):
            x = out[stream].get(view)
            if x is None:
                continue
            print(f"  {view:8} {stream:5}: failures {x['failures']}, detected {x['detected']}, "
                  f"false alarms {x['false_alarms']}, F1 "
                  f"{'-' if x['f1'] is None else format(x['f1'], '.3f')}, median lead "
                  f"{'-' if x['median_lead_h'] is None else format(x['median_lead_h'], '.1f')} h")
