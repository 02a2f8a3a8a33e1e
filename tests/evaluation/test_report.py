"""The generated docs/evaluation.md tables that issue 28 added: critical false alarms per
family, and the pages that rode on combined signals."""

from __future__ import annotations

from typing import Any

from models.evaluation.aggregate import combine
from models.evaluation.report import render


def seed(gpu: float, nvlink: float, combined: int, rule: str) -> dict[str, Any]:
    crit = {"fa_per_1000_node_days": gpu + nvlink,
            "fa_per_1000_node_days_by_family": {"gpu": gpu, "nvlink": nvlink, "ib_port": 0.0},
            "false_alarms_by_rule": {rule: 2}}
    return {"views": {"critical": crit},
            "combined_pages": {"pages": 10, "judged": 10, "combined": combined, "by_rule": {}}}


def test_critical_false_alarms_per_family_are_a_table_of_their_own() -> None:
    ours = combine([seed(2.0, 1.0, 0, "dbe"), seed(4.0, 1.0, 0, "dbe")])
    old = {"views": {"critical": {"fa_per_1000_node_days": 9.0}}}  # nothing judged
    text = render({"results": {"ours": ours, "before": old}, "seeds": [0, 1]})
    lines = text.splitlines()
    at = lines.index("### Critical (level 3) false alarms per 1,000 node-days per family")
    head, _, row, other = lines[at + 2: at + 6]
    assert head == ("| Detector | GPU | NVLink | IB port | all | main causes (per seed) | "
                    "pages on combined signals |")
    assert row == "| ours | 3.00 ± 12.71 | 1.00 | 0.00 | 4.00 ± 12.71 | dbe 2.0 | 0.0 of 10.0 |"
    assert other == "| before | – | – | – | 9.00 | – | – |"


def test_failure_windows_are_reported_per_mode_against_the_constants() -> None:
    from models.evaluation.windows import PreFailure, window_scores
    from models.predictor.interval import GROWTH, Calibration, RawWindow

    raw = RawWindow(GROWTH, "M1_hbm", 2.5, 10.0, 5.0, 0.6)
    pres = [PreFailure((raw,), 15.0, "M1_hbm"), PreFailure((raw,), 8.0, "M1_hbm")]
    cal = Calibration(0.8, growth={"*": (1.0, 4.0)}, constant={"*": (0.0, 48.0)})
    text = render({"results": {"fused": {}}, "seeds": [0],
                   "windows": {"fused": window_scores(pres, cal)},
                   "window_calibration": "train-family seeds 1010"})
    assert "Stated coverage 80%; calibrated on train-family seeds 1010." in text
    assert ("| fused | M1_hbm | 2 | 0.50 / 7.5 | 1.00 / 15.0 | growth 2 | 0 | 1.00 / 48.0 | "
            "1.00 / 23.0 |") in text
