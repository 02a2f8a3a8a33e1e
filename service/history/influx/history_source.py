"""InfluxDB history as a training source: where a cluster's data begins and ends within a range,
the sample step it was written at, its raw samples as Batches one chunk of time at a time
(service.history.influx.reader.RawReader) and its labels (service.history.influx.labels).

`evaluation_input()` is the whole range as an EvaluationInput, for anything that replays one;
`gpuhealth train --from-influx` reads it a day at a time instead (service/commands/
train_days.py), so that the recording can resume."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from collectors.catalog import Scope
from collectors.frames import Batch
from models.evaluation.sources import EvaluationInput
from service.history.influx.client import InfluxClient
from service.history.influx.influxql import ident, string, time_ns
from service.history.influx.labels import LabelReader
from service.history.influx.reader import RawReader, _series
from service.stages.windows import STORED

SCOPES = STORED  # every measured scope, the chassis' too: its rules replay as the GPUs' do


class NoHistory(ValueError):
    """Nothing stored for the cluster in the range asked for."""


@dataclass(slots=True)
class InfluxSource:
    client: InfluxClient
    cluster: str
    start: float
    end: float
    chunk_s: float = 3600.0
    labels: list[dict[str, Any]] = field(default_factory=list)
    reader: RawReader = field(init=False)

    def __post_init__(self) -> None:
        self.reader = RawReader(self.client, self.cluster)

    def _cond(self, start: float, end: float) -> str:
        return (f"{ident('cluster')} = {string(self.cluster)} AND time >= {time_ns(start)} "
                f"AND time < {time_ns(end)}")

    def data_span(self) -> tuple[float, float]:
        """The first and last GPU sample's time in [start, end); NoHistory when none."""
        cond = self._cond(self.start, self.end)
        found = []
        for order in ("ASC", "DESC"):
            series = _series(self.client, f"SELECT * FROM {ident(Scope.GPU.value)} WHERE "
                             f"{cond} ORDER BY time {order} LIMIT 1", "ns")
            found += [row[0] / 1e9 for s in series for row in s.values]
        if not found:
            raise NoHistory(f"no samples of cluster {self.cluster!r} between "
                            f"{_iso(self.start)} and {_iso(self.end)}")
        return min(found), max(found)

    def infer_step(self, first: float, points: int = 12) -> float:
        """The smallest gap between the first few samples of one GPU, in whole seconds (the
        service writes a round's samples at its collection time, within a second)."""
        cond = self._cond(first, min(self.end, first + 6 * 3600.0))
        series = _series(self.client, f"SELECT * FROM {ident(Scope.GPU.value)} WHERE {cond} "
                         f"GROUP BY * LIMIT {points} SLIMIT 1", "ns")
        times = sorted({row[0] / 1e9 for s in series for row in s.values})
        gaps = [b - a for a, b in itertools.pairwise(times) if b - a >= 0.5]
        return float(max(1, round(min(gaps)))) if gaps else 5.0

    def batches(self, start: float, end: float) -> Iterator[Batch]:
        """Samples and events of [start, end), one chunk of `chunk_s` per query."""
        for _, _, batch in self.reader.batches(start, end, SCOPES, self.chunk_s):
            yield batch

    def evaluation_input(self, step_s: float) -> EvaluationInput:
        return EvaluationInput(f"influx:{self.cluster}", step_s, self.labels,
                               self.batches(self.start, self.end), self.start, self.end,
                               {"cluster": self.cluster})

    def read_labels(self) -> list[dict[str, Any]]:
        self.labels = LabelReader(self.client, self.cluster).read(self.start, self.end)
        return self.labels

    def close(self) -> None:
        self.reader.close()


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    if not math.isfinite(ts):
        return str(ts)
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
