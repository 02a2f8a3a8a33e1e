"""The predictor as a detector: calibrated failure probabilities become findings (source
"model") that fusion weighs beside the hard rules and dynamic thresholds; a model can add risk
but never take a rule's away (models/detectors/fusion.py).

The model reads hour buckets, so it runs once per newly finished hour: features, one batched
forward over every GPU and port, the post-rule, the explanation, the findings; the findings are
reused on the ticks in between (a tick costs a dictionary lookup). The post-rule
(models/predictor/post_rules.py) makes each failure mode's risk from the horizons' probabilities:
capped by how urgent each horizon is ("likely to fail within a week" alone reaches watch, never a
page), held for `persist_h` scored hours, dropped under `floor`; the alert machine's
`AlertPolicy` (service/stages/alert_machine.py) then makes levels of the fused risk. NVLink
failures are predicted per GPU and placed on the GPU's worst link of the last day, because an
NVLink alert has to name the link.

Explanations: for entities whose risk reaches watch, each metric group's inputs are set to
unknown (occlusion) and the drop in probability says how much that group drove the score.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np
import numpy.typing as npt
import torch

from collectors.catalog import Scope
from models.detectors.findings import Finding, kept
from models.detectors.view import FleetView
from models.predictor.chunks import window_start
from models.predictor.dataset import MODES
from models.predictor.features import (
    FEATURES,
    HOURLY,
    MIN_OBSERVED_H,
    HourlyUnavailable,
    hours_of,
    observed,
)
from models.predictor.hour_cache import HourCache
from models.predictor.interval import MODEL, RawWindow, active_calibration, model_calibrated
from models.predictor.model import predict
from models.predictor.policy import PredictorConfig
from models.predictor.post_rules import PostRule
from models.predictor.stateful import ChunkStates, Stateful
from models.predictor.window import MODE_TEXT, predicted_window

log = logging.getLogger(__name__)
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]



class Runtime(Protocol):
    """One scope's model at run time (the LSTM's ScopeRuntime, the trees baseline's)."""

    @property
    def scope(self) -> Scope: ...

    @property
    def heads(self) -> list[str]: ...

    def probabilities(self, x: F32) -> F32:
        """Calibrated probabilities [entity, head] for inputs [entity, T, F] (NaN: unknown)."""
        ...


class Model(Protocol):
    @property
    def version(self) -> str: ...

    @property
    def window_h(self) -> int: ...

    @property
    def horizons_h(self) -> list[int]: ...

    @property
    def scopes(self) -> Mapping[Scope, Runtime]: ...


def _windowed(rt: Stateful, start: int) -> Callable[[F32], F32]:
    """The LSTM's calibrated probabilities for windows whose memory begins at `start`: what the
    carried states give, for the few entities an explanation re-scores."""
    def score(x: F32) -> F32:
        return rt.calibrate(predict(rt.model, rt.scaler.apply(x), np.full(len(x), start)))
    return score


class PredictorDetector:
    name = "lstm"

    def __init__(self, predictor: Model, config: PredictorConfig | None = None) -> None:
        self.predictor = predictor
        self.config = config or PredictorConfig()
        self._cache: dict[Scope, tuple[int, int, list[Finding]]] = {}
        # NVLink predictions are made per GPU and placed on a link; links arrive and leave
        # apart from their GPUs, so the placement is redone when the link set changes.
        self._placed: tuple[Finding, int, Finding] | None = None  # (per GPU, links, placed)
        # The newest calibrated probabilities [entity slot, head] per scope, for the API.
        self.latest: dict[Scope, tuple[F32, list[str]]] = {}
        self._unavailable: set[Scope] = set()
        self.post_rule = PostRule(self.config)  # probabilities to risk, with its past hours
        self._hours = HourCache()  # per-hour inputs of the window, extended hour by hour
        self._states = ChunkStates()  # the LSTM's memory, hour by hour
        self.last_run_s = 0.0
        # Seconds of the last hourly run per phase, summed over scopes (bench.model reads it).
        self.timing: dict[str, float] = {}
        self.explained = 0  # entities explained in the last hourly run

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        out: list[Finding] = []
        fresh = True
        for scope, rt in self.predictor.scopes.items():
            try:
                h = hours_of(view.scope(scope))
            except HourlyUnavailable as exc:
                if scope not in self._unavailable:
                    log.warning("predictor idle for %s: %s", scope, exc)
                    self._unavailable.add(scope)
                continue
            n = len(view.scope(scope))
            cached = self._cache.get(scope)
            if h.last < 0 or n == 0:
                continue
            if cached is None or cached[0] != h.last or cached[1] != n:
                if fresh:
                    self.timing, self.explained, fresh = {}, 0, False
                cached = (h.last, n, self._score(view, scope, rt, h.length))
                self._cache[scope] = cached
            out.extend(self._placed_on_links(view, f) if f.scope is Scope.GPU
                       and f.rule.endswith("M3_nvlink") else f for f in cached[2])
        return out

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        self._hours.drop(scope)
        self._states.drop(scope)
        cached = self._cache.get(scope)
        if cached is not None:
            found = [f.kept(keep) for f in cached[2]]
            self._cache[scope] = (cached[0], len(keep), found)
        if scope in (Scope.GPU, Scope.NVLINK):
            self._placed = None  # made again from the kept per-GPU finding
        latest = self.latest.get(scope)
        if latest is not None:
            p, heads = latest
            self.latest[scope] = (kept(p, keep), heads)
        self.post_rule.forget(scope, keep)  # the persistence window's past hours

    @staticmethod
    def _when(rt: Runtime, p: F32, mode: str) -> list[str]:
        """The mode's predicted window as words for the explanation (and so the alert's
        message), when the mode is more likely than not within a horizon."""
        heads = {h: float(p[j]) for j, h in enumerate(rt.heads) if h.startswith(mode + "@")}
        found = predicted_window(heads)
        if found is None:
            return []
        cal = active_calibration()  # the fleet's, else the shipped (interval.py)
        if cal is None:
            return [found.text()]
        iv = cal.apply(RawWindow(MODEL, found.mode, found.after_h, found.within_h,
                                 found.within_h, found.probability))
        return [iv.text()] if iv is not None else []

    def _placed_on_links(self, view: FleetView, f: Finding) -> Finding:
        n_links = len(view.scope(Scope.NVLINK))
        placed = self._placed
        if placed is None or placed[0] is not f or placed[1] != n_links:
            placed = (f, n_links, self._on_worst_link(view, f))
            self._placed = placed
        return placed[2]

    def probabilities(self, scope: Scope, slot: int) -> dict[str, float] | None:
        """The newest calibrated probability per head of one entity, None before the first
        scored hour or for an entity that joined since."""
        found = self.latest.get(scope)
        if found is None or slot >= len(found[0]) or np.isnan(found[0][slot]).any():
            return None
        p, heads = found
        return {h: float(p[slot, j]) for j, h in enumerate(heads)}

    # ---- scoring ---------------------------------------------------------------------------
    def _score(self, view: FleetView, scope: Scope, rt: Runtime, kept: int) -> list[Finding]:
        """One scored hour of a scope: features -> forward -> post-rule -> explain -> findings."""
        t0 = time.perf_counter()
        torch.set_num_threads(self.config.threads)
        last = hours_of(view.scope(scope)).last
        period = self.predictor.window_h
        # The LSTM reads the hours since its older chunk state restarted (P + 1 to 2P of them),
        # carried hour by hour; other runtimes (the trees baseline) read the last P hours.
        chunked = isinstance(rt, Stateful)
        hourly = self._hours.window(view, scope, last, min(2 * period if chunked else period,
                                                           kept), HOURLY[scope])
        t1 = time.perf_counter()
        if isinstance(rt, Stateful):
            shape = (hourly.shape[1], len(view.scope(scope)),
                     len(view.scope(Scope.NVLINK)) if scope is Scope.GPU else 0)
            p = rt.calibrate(self._states.raw(rt, scope, hourly, last, period, shape))
            start = int(window_start(np.array([last]), hourly.shape[1], period)[0])
            score = _windowed(rt, start)
        else:
            p = rt.probabilities(hourly)
            score = rt.probabilities
        t2 = time.perf_counter()
        explain_s = 0.0
        # Too little history (a new GPU, a fresh start without warm start, a long outage): no
        # prediction at all, rather than one from inputs unlike any the model trained on.
        blind = observed(scope, hourly[:, -period:]).sum(axis=1) < MIN_OBSERVED_H
        p[blind] = np.nan
        self.latest[scope] = (p, rt.heads)
        horizons = self.predictor.horizons_h
        findings = []
        for mode in MODES[scope]:
            present = [h for h in horizons if f"{mode}@{h}h" in rt.heads]
            if not present:
                continue
            cols = [rt.heads.index(f"{mode}@{h}h") for h in present]
            by_horizon = {h: p[:, j] for h, j in zip(present, cols, strict=True)}
            risk = self.post_rule.risk(scope, mode, by_horizon)
            # Its timing unproven for the mode: explained, counted for nothing (fusion.fuse).
            advisory = not model_calibrated(mode)
            # The finding's value and explanation speak of the day's horizon.
            day = cols[horizons.index(24)] if 24 in horizons else cols[0]
            value = p[:, day].astype(np.float64)
            t3 = time.perf_counter()
            details = self._explain(rt.scope, score, hourly, p[:, day], risk, day)
            explain_s += time.perf_counter() - t3
            self.explained += len(details)
            which = "model, advisory (window not calibrated)" if advisory else "model"
            signal = f"{which}: probability of {MODE_TEXT.get(mode, mode)} within 24 h"
            f = Finding(f"{self.name}_{mode}", scope, risk, value, float("nan"), signal,
                        details={i: "; ".join([signal, *self._when(rt, p[i], mode), d])
                                 for i, d in details.items()},
                        source="model", mode=mode, advisory=advisory)
            findings.append(f)  # M3 stays per GPU here; detect() places it on a link
        self.last_run_s = time.perf_counter() - t0
        for phase, secs in (("features", t1 - t0), ("forward", t2 - t1), ("explain", explain_s),
                            ("other", self.last_run_s - (t2 - t0) - explain_s)):
            self.timing[phase] = self.timing.get(phase, 0.0) + secs
        return findings

    def _explain(self, scope: Scope, score: Callable[[F32], F32], x: F32, p: F32, risk: F32,
                 head: int) -> dict[int, str]:
        idx = np.flatnonzero(risk >= self.config.explain_from)
        if not len(idx):
            return {}
        idx = idx[np.argsort(-risk[idx], kind="stable")][: self.config.explain_max]
        groups: dict[str, list[int]] = {}
        for j, f in enumerate(FEATURES[scope]):
            if f.group != "missing":
                groups.setdefault(f.group, []).append(j)
        sub = x[idx]
        base = p[idx]  # the run's own probabilities: no second forward
        drops = np.zeros((len(idx), len(groups)), np.float32)
        for g, cols in enumerate(groups.values()):
            # Occlusion: the group unknown. The LSTM's scaler reads NaN as the training mean,
            # the trees as missing; either way "as if this group said nothing".
            occluded = sub.copy()
            occluded[:, :, cols] = np.nan
            drops[:, g] = base - score(occluded)[:, head]
        names = list(groups)
        out: dict[int, str] = {}
        for k, slot in enumerate(idx.tolist()):
            order = np.argsort(-drops[k], kind="stable")
            top = [f"{names[g]} ({drops[k, g]:+.2f})" for g in order[:3]
                   if drops[k, g] >= self.config.min_drop]
            out[slot] = ("driven by " + ", ".join(top)) if top else "no single group dominates"
        return out

    def _on_worst_link(self, view: FleetView, f: Finding) -> Finding:
        """A GPU-scope NVLink prediction moved onto the GPU's link with the most errors in the
        last day (the first link when none had errors)."""
        nv = view.scope(Scope.NVLINK)
        n = len(nv)
        risk = np.zeros(n, np.float32)
        value = np.zeros(n, np.float64)
        details: dict[int, str] = {}
        if n == 0:
            return Finding(f.rule, Scope.NVLINK, risk, value, f.threshold, f.signal,
                           source=f.source, mode=f.mode, advisory=f.advisory)
        gpu_of = np.asarray(nv.gpu_of[:n])
        try:
            hn = hours_of(nv)
            errs = np.nansum(nv.window("nvlink_crc_flit", 24, tier=hn.tier), axis=1) + \
                np.nansum(nv.window("nvlink_replay", 24, tier=hn.tier), axis=1)
        except HourlyUnavailable:
            errs = np.zeros(n)
        order = np.lexsort((np.arange(n), -errs, gpu_of))  # per GPU: most errors first
        first = np.r_[True, gpu_of[order][1:] != gpu_of[order][:-1]]
        for link in order[first].tolist():
            g = int(gpu_of[link])
            if 0 <= g < len(f.risk):
                risk[link] = f.risk[g]
                value[link] = f.value[g]
                if f.details and g in f.details:
                    details[link] = f.details[g]
        return Finding(f.rule, Scope.NVLINK, risk, value, f.threshold, f.signal,
                       details=details or None, source=f.source, mode=f.mode,
                       advisory=f.advisory)
