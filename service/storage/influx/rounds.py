"""Stored raw samples read back from InfluxDB as rounds (one Batch per step), for the warm
start. Each query covers a chunk of time per measurement; rows become Points and go through
the same SchemaMapper as any line-protocol write, so what comes back is what went in."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from collectors.frames import Batch
from collectors.lineprotocol import FieldValue, Point
from collectors.schema import SchemaMapper
from service.storage.influx.client import InfluxClient
from service.storage.influx.influxql import ident, string, time_ns
from service.storage.influx.reader import RawReader
from service.storage.influx.sparse import MASK_FIELD

MEASUREMENTS = ("gpu", "nvlink", "ib_port", "xid")


class InfluxRounds:
    def __init__(self, client: InfluxClient, cluster: str, chunk_s: float = 600.0) -> None:
        self.client = client
        self.cluster = cluster
        self.chunk_s = chunk_s
        self.raw = RawReader(client, cluster)

    def _points(self, start: float, end: float) -> list[Point]:
        out: list[Point] = []
        cond = f"{ident('cluster')} = {string(self.cluster)}"
        for m in MEASUREMENTS:
            if m == "nvlink":  # the rounds the sink did not write, filled in
                series = self.raw.links(cond + f" AND time >= {time_ns(start)} AND time < "
                                        f"{time_ns(end)}", int(time_ns(start)), int(time_ns(end)))
            else:
                q = (f"SELECT * FROM {ident(m)} WHERE {cond} "
                     f"AND time >= {time_ns(start)} AND time < {time_ns(end)} GROUP BY *")
                series = [s for statement in self.client.query(q, epoch="ns") for s in statement]
            for s in series:
                tags = {k: v for k, v in s.tags.items() if k != "cluster" and v != ""}
                names = s.columns[1:]
                for row in s.values:
                    fields: dict[str, FieldValue] = {
                        k: v for k, v in zip(names, row[1:], strict=True)
                        if v is not None and k != MASK_FIELD}
                    if fields:
                        out.append(Point(m, tags, fields, int(row[0])))
        return out

    def rounds(self, start: float, end: float, step_s: float) -> Iterator[tuple[float, Batch]]:
        mapper = SchemaMapper(strict=False)  # extra tags or fields from newer versions: skip
        t = start
        while t < end:
            stop = min(t + self.chunk_s, end)
            buckets: dict[int, list[Point]] = defaultdict(list)
            for p in self._points(t, stop):
                assert p.ts_ns is not None
                buckets[int(p.ts_ns // round(step_s * 1e9))].append(p)
            for k in sorted(buckets):
                yield k * step_s, mapper.to_batch(buckets[k])
            t = stop
