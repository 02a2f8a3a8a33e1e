"""The raw failure windows the detectors hold for one entity, before calibration
(models/predictor/interval.py): the model's, from its horizon heads, and each growth rule's
soonest time-to-failure estimate per mode."""

from __future__ import annotations

from collections.abc import Mapping

from models.detectors.fusion import ScopeRisk
from models.detectors.growth import window_of
from models.predictor.interval import GROWTH, MODEL, RawWindow
from models.predictor.window import predicted_window


def candidates(probs: Mapping[str, float] | None, sr: ScopeRisk | None,
               slot: int) -> tuple[RawWindow, ...]:
    """Every raw window the detectors hold for one entity: the model's (from its heads) and the
    soonest growth estimate of each mode."""
    out: list[RawWindow] = []
    found = predicted_window(probs) if probs is not None else None
    if found is not None:
        out.append(RawWindow(MODEL, found.mode, found.after_h, found.within_h, found.within_h,
                             found.probability))
    if sr is not None and slot < len(sr.risk):
        soonest: dict[str, tuple[float, float]] = {}
        for f in sr.findings:
            ttf = f.ttf_at(slot)
            if ttf is None or f.mode is None:
                continue
            if f.mode not in soonest or ttf < soonest[f.mode][0]:
                soonest[f.mode] = (ttf, float(f.risk[slot]))
        for mode, (ttf, risk) in sorted(soonest.items()):
            lo, hi = window_of(ttf)
            out.append(RawWindow(GROWTH, mode, lo, hi, ttf, risk))
    return tuple(out)
