"""A failure window at a stated coverage: the interval that held the failure time for that share
of the alerts that preceded a failure, on seeds the window was never fitted on.

Raw windows come from two places (models/predictor/raw_windows.py): a growth rule's
time-to-failure estimate (models/detectors/growth.py reads it as half to twice the estimate) and
the model's horizon heads (models/predictor/window.py: the first horizon whose probability passes
one half). Neither says
how often it is right. On fleets it never saw, the growth rule's window held the failure for 21 %
of pre-failure alerts, while the failure came a median 3.5 times the estimate later; the model's
window held 48 %, less than a constant "1-24 h" (issue 34). Split conformal calibration on alerts
of held-out seeds (`fit`) turns each into an interval at a stated coverage:

- growth: the failure time over the estimate, a ratio; the interval is the estimate times the
  conformal quantiles of that ratio at (1-c)/2 and (1+c)/2 (an extrapolation errs by a factor,
  not by hours);
- model: per mode and raw window, the conformal quantiles of the failure time itself;
- constant: per mode, the same quantiles of every pre-failure alert's failure time, whatever it
  showed. That is the baseline a window must beat: a calibrated (source, mode) whose intervals
  are not narrower than the constant's (median width) is hidden (`Calibration.hidden`), since it
  tells the operator less than "some time in the next N hours" would. Where every source is
  hidden, the constant itself is shown, told as when such alerts' failures came (`base_rate`).

A mode with fewer than MIN_PAIRS pairs takes its source's pooled quantiles ("*").
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from models.predictor.window import MODE_TEXT

GROWTH, MODEL = "growth", "model"
CONSTANT = "constant"  # no source sharper: the mode's base rate (`base_rate`)
POOLED = "*"
MIN_PAIRS = 20  # per key before its own quantiles are trusted (else the source's pooled ones)
COVERAGE = 0.8  # the default stated coverage
FORMAT = 1
# The shipped calibration (`python -m service.commands.windows_fit`), beside the default model.
DEFAULT_PATH = Path(__file__).resolve().parents[1] / "artifacts" / "windows.json"


@dataclass(frozen=True, slots=True)
class RawWindow:
    """What a source said, before calibration."""

    source: str  # GROWTH or MODEL
    mode: str
    lo_h: float
    hi_h: float
    estimate_h: float  # growth: its point estimate; model: the raw window's upper end
    probability: float  # the model's; the rule's risk for a growth window

    @property
    def key(self) -> str:
        """What calibration is kept per: a growth rule's mode, or a model's mode and window."""
        return self.mode if self.source == GROWTH else f"{self.mode}@{self.lo_h:g}-{self.hi_h:g}h"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> RawWindow:
        return RawWindow(str(d["source"]), str(d["mode"]), float(d["lo_h"]), float(d["hi_h"]),
                         float(d["estimate_h"]), float(d["probability"]))


@dataclass(frozen=True, slots=True)
class Interval:
    """A window as shown: `coverage` None means uncalibrated (no calibration loaded)."""

    raw: RawWindow
    lo_h: float
    hi_h: float
    coverage: float | None

    @property
    def width_h(self) -> float:
        return self.hi_h - self.lo_h

    def holds(self, hours: float) -> bool:
        return self.lo_h <= hours <= self.hi_h

    def text(self) -> str:
        what = MODE_TEXT.get(self.raw.mode, self.raw.mode)
        by = {GROWTH: "growth rule", MODEL: "model"}.get(
            self.raw.source, "no estimate sharper than that")
        # Always "expected in ...": alert annotations find the window by that phrase
        # (service/notify/refs.py).
        when = (f"in the next {_hours(self.hi_h)}" if self.lo_h <= 0
                else f"in more than {_hours(self.lo_h)}" if math.isinf(self.hi_h)
                else f"in {_hours(self.lo_h)} to {_hours(self.hi_h)}")
        if self.coverage is None:
            return f"{what} expected {when} ({by}, uncalibrated)"
        return f"{what} expected {when} ({self.coverage:.0%} of such alerts; {by})"


def _hours(h: float) -> str:
    if math.isinf(h):
        return "an unknown time"
    return f"{h:.2g} h" if h < 48 else f"{h / 24:.2g} days"


@dataclass(frozen=True, slots=True)
class Pair:
    """One pre-failure alert's raw window and when the failure came (hours after the alert)."""

    raw: RawWindow
    actual_h: float


@dataclass(slots=True)
class Calibration:
    coverage: float
    growth: dict[str, tuple[float, float]] = field(default_factory=dict)  # ratio quantiles
    model: dict[str, tuple[float, float]] = field(default_factory=dict)  # hours
    constant: dict[str, tuple[float, float]] = field(default_factory=dict)  # hours
    hidden: dict[str, str] = field(default_factory=dict)  # "source:mode" -> why
    pairs: dict[str, int] = field(default_factory=dict)  # "source:key" -> how many fitted it
    fitted_on: str = ""  # which seeds, for the record

    def apply(self, raw: RawWindow) -> Interval | None:
        """The calibrated interval, None where this source is hidden for the mode or nothing
        was fitted for it."""
        if f"{raw.source}:{raw.mode}" in self.hidden:
            return None
        if raw.source == GROWTH:
            q = self.growth.get(raw.mode) or self.growth.get(POOLED)
            if q is None:
                return None
            return Interval(raw, raw.estimate_h * q[0], raw.estimate_h * q[1], self.coverage)
        q = self.model.get(raw.key) or self.model.get(f"{POOLED}@{raw.lo_h:g}-{raw.hi_h:g}h")
        if q is None:
            return None
        return Interval(raw, q[0], q[1], self.coverage)

    def baseline(self, mode: str) -> tuple[float, float] | None:
        return self.constant.get(mode) or self.constant.get(POOLED)

    def to_json(self) -> str:
        def table(t: dict[str, tuple[float, float]]) -> dict[str, list[float | None]]:
            return {k: [lo, hi if math.isfinite(hi) else None] for k, (lo, hi) in t.items()}

        d = {"format": FORMAT, "coverage": self.coverage, "fitted_on": self.fitted_on,
             "growth": table(self.growth), "model": table(self.model),
             "constant": table(self.constant), "hidden": self.hidden, "pairs": self.pairs}
        return json.dumps(d, indent=1, sort_keys=True, allow_nan=False)

    @staticmethod
    def from_json(text: str) -> Calibration:
        d = json.loads(text)
        if d.get("format") != FORMAT:
            raise ValueError(f"window calibration format {d.get('format')!r}, not {FORMAT}")

        def table(name: str) -> dict[str, tuple[float, float]]:
            return {k: (float(v[0]), _num(v[1])) for k, v in d.get(name, {}).items()}

        return Calibration(float(d["coverage"]), table("growth"), table("model"),
                           table("constant"), dict(d.get("hidden", {})),
                           {k: int(v) for k, v in d.get("pairs", {}).items()},
                           str(d.get("fitted_on", "")))

    def save(self, path: Path) -> None:
        path.write_text(self.to_json() + "\n")

    @staticmethod
    def load(path: Path) -> Calibration:
        return Calibration.from_json(path.read_text())


class CalibrationError(ValueError):
    """A window calibration file that cannot be read."""


def load_default() -> Calibration | None:
    """The shipped calibration, None where none is shipped (windows are then shown raw).
    CalibrationError names the file when it cannot be read (a damaged install): the service
    refuses to start rather than fail every window it would show."""
    if not DEFAULT_PATH.exists():
        return None
    try:
        cal = Calibration.load(DEFAULT_PATH)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise CalibrationError(f"{DEFAULT_PATH.name}: the shipped window calibration cannot "
                               f"be read ({type(exc).__name__}: {exc}); reinstall gpuhealth or "
                               "refit it (python -m service.commands.windows_fit)") from None
    if not 0 < cal.coverage < 1:
        raise CalibrationError(f"{DEFAULT_PATH.name}: coverage {cal.coverage} is not a share")
    return cal


@functools.cache
def default_calibration() -> Calibration | None:
    """The shipped calibration, read once per process."""
    return load_default()


_FLEET: list[Calibration] = []  # the fleet's own calibration, once the service fitted one


def set_active(cal: Calibration | None) -> None:
    """Use `cal` (fitted on this fleet's own alerts, service/stages/window_refit.py) instead
    of the shipped calibration in this process; None goes back to the shipped one."""
    _FLEET[:] = [] if cal is None else [cal]


def active_calibration() -> Calibration | None:
    """The calibration windows are shown with: the fleet's own where the service fitted one,
    else the shipped one."""
    return _FLEET[0] if _FLEET else default_calibration()


def model_calibrated(mode: str) -> bool:
    """Whether the model's timing may move levels for `mode`: with no calibration, as before
    (yes); with one, only where it holds a model window for the mode that is not hidden
    (issue 34: the rule's level stands unless the model's window is calibrated)."""
    cal = active_calibration()
    if cal is None:
        return True
    return f"{MODEL}:{mode}" not in cal.hidden and any(
        key.startswith(mode + "@") for key in cal.model)


def _num(v: object) -> float:
    """An upper end written as null: no upper bound."""
    if v is None:
        return math.inf
    if not isinstance(v, int | float):
        raise ValueError(f"window calibration: not a number: {v!r}")
    return float(v)


def conformal(values: Sequence[float], coverage: float) -> tuple[float, float]:
    """The split-conformal two-sided interval: the k-th smallest and k'-th largest of n values,
    with the finite-sample correction ((n + 1) instead of n), so that a new exchangeable value
    falls inside with probability at least `coverage`. Too few values for the upper end: inf."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no values to calibrate on")
    tail = (1.0 - coverage) / 2
    lo_rank = math.floor((n + 1) * tail + 1e-9)  # 1-based; 0: no lower bound
    hi_rank = math.ceil((n + 1) * (1.0 - tail) - 1e-9)  # (1e-9: 0.1 is not exact)
    lo = xs[lo_rank - 1] if lo_rank >= 1 else 0.0
    hi = xs[hi_rank - 1] if hi_rank <= n else math.inf
    return lo, hi


def fit(pairs: Iterable[Pair], coverage: float = COVERAGE, fitted_on: str = "") -> Calibration:
    """Calibrate from pre-failure alerts of seeds that will not be scored."""
    by_growth: dict[str, list[float]] = defaultdict(list)
    by_model: dict[str, list[float]] = defaultdict(list)
    by_mode: dict[str, list[float]] = defaultdict(list)
    seen: list[Pair] = []
    for p in pairs:
        if not (p.actual_h >= 0 and math.isfinite(p.actual_h)):
            continue
        seen.append(p)
        r = p.raw
        if r.source == GROWTH and r.estimate_h > 0:
            by_growth[r.mode].append(p.actual_h / r.estimate_h)
            by_growth[POOLED].append(p.actual_h / r.estimate_h)
        elif r.source == MODEL:
            by_model[r.key].append(p.actual_h)
            by_model[f"{POOLED}@{r.lo_h:g}-{r.hi_h:g}h"].append(p.actual_h)
        by_mode[r.mode].append(p.actual_h)
        by_mode[POOLED].append(p.actual_h)
    cal = Calibration(coverage, fitted_on=fitted_on)
    for src, groups, out in ((GROWTH, by_growth, cal.growth), (MODEL, by_model, cal.model),
                             ("constant", by_mode, cal.constant)):
        for key, xs in groups.items():
            cal.pairs[f"{src}:{key}"] = len(xs)
            if len(xs) >= MIN_PAIRS:
                out[key] = conformal(xs, coverage)
    # Hidden: a (source, mode) whose calibrated windows are no narrower than the constant's.
    widths: dict[str, list[float]] = defaultdict(list)
    for p in seen:
        shown = cal.apply(p.raw)
        if shown is not None:
            widths[f"{p.raw.source}:{p.raw.mode}"].append(shown.width_h)
    for name, ws in widths.items():
        base = cal.baseline(name.split(":", 1)[1])
        if base is None:
            continue
        mine, theirs = statistics.median(ws), base[1] - base[0]
        if not mine < theirs:
            cal.hidden[name] = (f"median width {mine:.3g} h is not below the constant "
                                f"window's {theirs:.3g} h at the same coverage")
    return cal


def shown(raws: Sequence[RawWindow], cal: Calibration | None) -> Interval | None:
    """The window to show. Calibrated: the narrowest interval of the sources not hidden (each
    holds the failure at the same stated coverage, so the narrower says more); none when every
    source is hidden. Uncalibrated (no table): the model's raw window, else the soonest growth
    window, as before calibration existed."""
    if cal is None:
        for r in sorted(raws, key=lambda r: (r.source != MODEL, r.hi_h)):
            return Interval(r, r.lo_h, r.hi_h, None)
        return None
    best: Interval | None = None
    for r in raws:
        iv = cal.apply(r)
        if iv is not None and (best is None or (iv.width_h, iv.hi_h) < (best.width_h, best.hi_h)):
            best = iv
    if best is None and raws:
        best = base_rate(raws[0], cal)
    return best


def base_rate(raw: RawWindow, cal: Calibration) -> Interval | None:
    """Where no source's window is sharper than the constant, the constant itself: when such
    alerts' failures came (the mode's pre-failure alerts, at the stated coverage), told as
    that and not as an estimate for this one."""
    base = cal.baseline(raw.mode)
    if base is None:
        return None
    return Interval(RawWindow(CONSTANT, raw.mode, base[0], base[1], math.nan, raw.probability),
                    base[0], base[1], cal.coverage)


def withheld_text(raws: Sequence[RawWindow], cal: Calibration) -> str:
    """Why no window is shown for these raw windows."""
    why = [cal.hidden.get(f"{r.source}:{r.mode}") or f"no calibration for {r.source}:{r.key}"
           for r in raws]
    what = MODE_TEXT.get(raws[0].mode, raws[0].mode) if raws else "failure"
    return f"{what}: no window shown ({'; '.join(dict.fromkeys(why))})"
