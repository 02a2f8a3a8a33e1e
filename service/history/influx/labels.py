"""Labels learned from the fleet, read back out of InfluxDB's `label` measurement (written by
service.history.influx.record.TickRecorder.labels; docs/influxdb.md), as labels.jsonl rows that
`gpuhealth train --from-influx` learns from.

The same rows as `LabelStore.find(overruled=False)`: withdrawn verdict labels are left out, and
so are the auto failures of an alert that a standing `false_alarm` or `maintenance` verdict
overruled. A verdict may be given long after its alert, outside the range read, so the
overruling verdicts are read over all time (they are few: one per answered alert).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from collectors.labels import Label
from service.history.influx.client import InfluxClient, Series
from service.history.influx.influxql import ident, string, time_ns
from service.history.influx.reader import _series

log = logging.getLogger(__name__)
MEASUREMENT = "label"
OVERRULING = ("false_alarm", "maintenance")  # as service.stages.label_store.OVERRULING


def _rows(series: Iterable[Series]) -> Iterable[dict[str, Any]]:
    for s in series:
        cols = s.columns
        for values in s.values:
            yield {**s.tags, **{c: v for c, v in zip(cols, values, strict=True)
                                if v is not None}}


class LabelReader:
    def __init__(self, client: InfluxClient, cluster: str) -> None:
        self.client = client
        self.cluster = cluster
        self.skipped = 0  # rows that are no label of ours (missing tags, a bad mode)

    def _query(self, cond: str) -> list[dict[str, Any]]:
        where = f"{ident('cluster')} = {string(self.cluster)}" + (f" AND {cond}" if cond else "")
        stmt = f"SELECT * FROM {ident(MEASUREMENT)} WHERE {where} GROUP BY *"
        return list(_rows(_series(self.client, stmt, "ns")))

    def overruled_alerts(self) -> set[int]:
        """Alerts whose standing verdict says their auto failures were no hardware failure."""
        rows = self._query(f"{ident('source')} = 'verdict' AND {ident('kind')} = 'benign'")
        return {int(r["alert_id"]) for r in rows
                if not r.get("withdrawn") and r.get("action") in OVERRULING
                and isinstance(r.get("alert_id"), int | float)}

    def read(self, start: float, end: float) -> list[dict[str, Any]]:
        """Labels with a time in [start, end), oldest first, as labels.jsonl rows (where
        each came from rides along: source, label_id, alert_id)."""
        overruled = self.overruled_alerts()
        rows = self._query(f"time >= {time_ns(start)} AND time < {time_ns(end)}")
        out: list[tuple[float, int, dict[str, Any]]] = []
        for r in rows:
            if r.get("withdrawn"):
                continue
            alert = r.get("alert_id")
            if (r.get("kind") == "failure" and r.get("source") != "verdict"
                    and isinstance(alert, int | float) and int(alert) in overruled):
                continue
            d = _label(r)
            if d is not None:
                try:  # as a labels file would be checked: a bad entity or mode is no label
                    Label.from_dict({k: v for k, v in d.items() if k != "_t"})
                except ValueError:
                    d = None
            if d is None:
                self.skipped += 1
                continue
            out.append((d["_t"], int(r.get("label_id", 0) or 0), d))
        out.sort(key=lambda x: (x[0], x[1]))
        for _, _, d in out:
            del d["_t"]
        return [d for _, _, d in out]


def _label(r: dict[str, Any]) -> dict[str, Any] | None:
    """One stored point as a labels.jsonl row, or None when it is not one we wrote."""
    kind, node, entity, scope = (r.get(k) for k in ("kind", "host", "entity", "scope"))
    if not (kind and node and entity and scope) or not isinstance(r.get("time"), int):
        return None
    t = r["time"] / 1e9
    extra: dict[str, Any] = {"source": r.get("source", "")}
    if str(r.get("label_id", "")).isdigit():
        extra["label_id"] = int(r["label_id"])
    if isinstance(r.get("alert_id"), int | float):
        extra["alert_id"] = int(r["alert_id"])
    mode = r.get("mode") or None
    base = {"kind": kind, "node": node, "entity": entity, "scope": scope}
    if kind == "failure":
        if mode is None:
            return None
        return {**base, "time": t, "mode": mode, "precursor_onset": None, "_t": t, **extra}
    if kind == "repair":
        return {**base, "time": t, "action": r.get("action") or "unknown", "mode": mode,
                "_t": t, **extra}
    if kind == "benign":
        end = r.get("end_time")
        return {**base, "trap": r.get("action") or "unknown", "start": t,
                "end": float(end) if isinstance(end, int | float) else None, "_t": t, **extra}
    return None
