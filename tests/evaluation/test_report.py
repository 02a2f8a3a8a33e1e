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
