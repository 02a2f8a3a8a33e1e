"""Stored raw samples read back from InfluxDB as rounds (one Batch per step), for the warm
start. Each query covers a chunk of time per measurement; rows become Points and go through
the same SchemaMapper as any line-protocol write, so what comes back is what went in."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterator

from collectors.frames import Batch
from collectors.lineprotocol import FieldValue, Point
from collectors.schema import SchemaMapper
from service.history.influx.client import InfluxClient
from service.history.influx.influxql import ident, string, time_ns
from service.history.influx.reader import RawReader
from service.history.influx.sparse import MASK_FIELD

MEASUREMENTS = ("gpu", "nvlink", "ib_port", "xid")
HOSTS_PER_QUERY = 200  # a host filter's names per statement (an OR of equalities)


class InfluxRounds:
    """`hosts`: only these nodes' samples (a shard's gained nodes); None: every node."""

    def __init__(self, client: InfluxClient, cluster: str, chunk_s: float = 600.0,
                 hosts: Collection[str] | None = None) -> None:
        self.client = client
        self.cluster = cluster
        self.chunk_s = chunk_s
        self.raw = RawReader(client, cluster)
        names = sorted(hosts) if hosts is not None else None
        self._host_conds = [""] if names is None else [
            " AND (" + " OR ".join(f"{ident('host')} = {string(h)}"
                                   for h in names[i:i + HOSTS_PER_QUERY]) + ")"
            for i in range(0, len(names), HOSTS_PER_QUERY)]

    def _points(self, start: float, end: float) -> list[Point]:
        out: list[Point] = []
        for hosts in self._host_conds:
            out += self._points_of(start, end, hosts)
        return out

    def _points_of(self, start: float, end: float, hosts: str) -> list[Point]:
        out: list[Point] = []
        cond = f"{ident('cluster')} = {string(self.cluster)}{hosts}"
        for m in MEASUREMENTS:
            if m == "nvlink":  # the rounds the sink did not write, filled in
                series = self.raw.links(cond + f" AND time >= {time_ns(start)} AND time < "
                                        f"{time_ns(end)}", int(time_ns(start)), int(time_ns(end)),
                                        hosts)
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


def stored_hosts(client: InfluxClient, cluster: str) -> set[str]:
    """Every host InfluxDB holds GPU samples of for `cluster` (within its retention)."""
    q = (f"SHOW TAG VALUES FROM {ident('gpu')} WITH KEY = {ident('host')} "
         f"WHERE {ident('cluster')} = {string(cluster)}")
    return {str(row[1]) for statement in client.query(q) for s in statement
            for row in s.values if len(row) > 1}
