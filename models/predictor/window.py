"""When, not only whether: a predicted failure window from the model's horizon heads.

Each mode's heads are cumulative probabilities of failing within 1 h, 24 h and 7 days. The
window is the first horizon whose probability reaches `likely`, after the horizon before it:
"HBM failure likely within 1-7 days (80 %)". Calibrated heads are fitted one by one, so a
longer horizon can read a little lower than a shorter one; the running maximum makes them
cumulative again. Of several modes, the earliest window wins (then the likelier).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

LIKELY = 0.5  # a window names when a failure is more likely than not

MODE_TEXT = {"M1_hbm": "HBM failure", "M2_gpu_hard": "GPU hard failure",
             "M3_nvlink": "NVLink link failure", "M4_ib_link": "InfiniBand link failure",
             "M5_thermal": "thermal failure", "M6_sram": "SRAM failure"}


@dataclass(frozen=True, slots=True)
class PredictedWindow:
    mode: str
    after_h: float  # the failure is expected after this many hours (0: from now) ...
    within_h: float  # ... and within this many
    probability: float  # of failing within `within_h`

    def text(self) -> str:
        what = MODE_TEXT.get(self.mode, self.mode)
        when = (f"within {_hours(self.within_h)}" if self.after_h <= 0
                else f"in {_hours(self.after_h)} to {_hours(self.within_h)}")
        return f"{what} likely {when} ({self.probability:.0%})"


def _hours(h: float) -> str:
    return f"{h:g} h" if h < 48 else f"{h / 24:g} days"


def predicted_window(probabilities: Mapping[str, float],
                     likely: float = LIKELY) -> PredictedWindow | None:
    """From heads named "<mode>@<h>h"; None when no mode reaches `likely` at any horizon."""
    by_mode: dict[str, list[tuple[float, float]]] = {}
    for head, p in probabilities.items():
        mode, sep, horizon = head.rpartition("@")
        if not sep or not horizon.endswith("h") or p != p:  # NaN: no prediction
            continue
        try:
            h = float(horizon[:-1])
        except ValueError:
            continue
        by_mode.setdefault(mode, []).append((h, float(p)))
    best: PredictedWindow | None = None
    for mode, heads in by_mode.items():
        before, running = 0.0, 0.0
        for h, p in sorted(heads):
            running = max(running, p)
            if running >= likely:
                found = PredictedWindow(mode, before, h, running)
                if best is None or (found.within_h, -found.probability) < (
                        best.within_h, -best.probability):
                    best = found
                break
            before = h
    return best
