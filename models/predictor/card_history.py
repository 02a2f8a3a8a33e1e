"""The model card's section for a model retrained from a fleet's own history (`gpuhealth train
--from-influx`): the span, the failure labels per mode and where they came from, how they fell
into the time split, and which modes had too few to learn or to be scored."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

_PARTS = ("train", "val", "test")


def _iso(ts: Any) -> str:
    try:
        return datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (TypeError, ValueError, OverflowError):
        return "–"


def history_lines(h: dict[str, Any]) -> list[str]:
    counts: dict[str, dict[str, int]] = h.get("label_counts", {})
    periods: dict[str, dict[str, int]] = h.get("label_periods", {})
    sources = sorted({s for c in counts.values() for s in c})
    split = h.get("split_times", {})
    lines = ["## Learned from the fleet's history", "",
             f"Cluster `{h.get('cluster')}` (database `{h.get('database')}`), data span "
             f"**{_iso(h.get('from'))} to {_iso(h.get('to'))}** ({h.get('days')} day(s); "
             f"samples stored from {_iso(h.get('data_from'))} to {_iso(h.get('data_to'))}, "
             f"every {h.get('step_s')} s). Split by time: training from "
             f"{_iso(split.get('train_from'))}, validation from {_iso(split.get('val_from'))}, "
             f"test (held out by time) from {_iso(split.get('test_from'))} to "
             f"{_iso(split.get('test_to'))}."
             + (f" Labels file added: `{h['labels_file']}`." if h.get("labels_file") else ""),
             "", "Failure labels per mode (auto: the hard rules; verdict: an operator's; "
             "file: --labels), and per period of the split:", "",
             "| Mode | " + " | ".join(sources) + " | total | train | validation | test |",
             "|---|" + "---|" * (len(sources) + 4)]
    for mode in sorted(set(counts) | set(periods)):
        c = counts.get(mode, {})
        p = periods.get(mode, {})
        lines.append(f"| {mode} | " + " | ".join(str(c.get(s, 0)) for s in sources)
                     + f" | {sum(c.values())} | " + " | ".join(str(p.get(x, 0)) for x in _PARTS)
                     + " |")
    if not counts:
        lines.append("| (no failure labels) |" + " |" * (len(sources) + 4))
    lines.append("")
    notes = h.get("notes") or []
    if notes:
        lines += ["**Too few labels.** Metrics below are left empty (–) where a head had no "
                  "positive to score; nothing is estimated in their place:", ""]
        lines += [f"- {n}" for n in notes]
        lines.append("")
    return lines
