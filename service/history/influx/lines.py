"""Line protocol of what the service stores in InfluxDB (docs/influxdb.md): samples, derived
rates and events, each point tagged with the cluster, and each GPU's identity (`gpu_info`:
string fields uuid, serial, pci_bus_id, model, vbios, driver) when it changes. NVLink rows are
written when they move (service.history.influx.sparse), with each GPU's point saying which
links reported. Field
types are the catalog's (collectors.lineprotocol_format.format_number: counters and states
integers, gauges floats) and every rate a float, so InfluxDB never refuses a type change,
whichever source the sample came from."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from collectors import identity
from collectors.catalog import CATALOG, FieldType, Scope
from collectors.catalog import EVENT_FIELD as EVENT_FIELD  # re-exported for writers
from collectors.frames import Batch, Entity, Frame
from collectors.lineprotocol_format import escape_key, format_line, format_number
from collectors.schema import ENTITY_TAGS as ENTITY_TAGS  # the tags naming an entity, per scope
from service.history.influx.sparse import MASK_FIELD, LinkGate, masks
from service.stages.ingest import Derived

RATE_SUFFIX = "_rate"


def ns(ts: float) -> int:
    # Float seconds carry about 0.2 µs at today's epoch; rounding to µs keeps ns stable, so a
    # resent point lands on the same timestamp and overwrites instead of doubling.
    return round(ts * 1e6) * 1000


def entity_tags(e: Entity) -> dict[str, str]:
    names = (e.node, e.unit, e.sub)
    return {k: v for k, v in zip(ENTITY_TAGS[e.scope], names, strict=False) if v is not None}


_TAG_ESCAPES = str.maketrans({",": "\\,", "=": "\\=", " ": "\\ "})


def tag(s: str) -> str:
    """A tag key or value as InfluxDB reads it: commas, equals signs and spaces escaped, and a
    backslash left alone (InfluxDB keeps `\\\\` as two characters in tags)."""
    if "\n" in s or "\r" in s:
        raise ValueError(f"line protocol cannot carry a newline: {s!r}")
    return s.translate(_TAG_ESCAPES)


def head(measurement: str, tags: dict[str, str]) -> str:
    """Measurement and tags, tags sorted by key (InfluxDB's preferred order)."""
    return escape_key(measurement) + "".join(
        f",{tag(k)}={tag(v)}" for k, v in sorted(tags.items()) if v != "")


class LineWriter:
    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self._heads: dict[tuple[str, Entity], str] = {}  # entities repeat every round
        self._gates = {False: LinkGate(), True: LinkGate()}  # nvlink, nvlink_rate

    def _head(self, measurement: str, e: Entity) -> str:
        h = self._heads.get((measurement, e))
        if h is None:
            if len(self._heads) > 2_000_000:  # a churning fleet must not grow this forever
                self._heads.clear()
            h = self._heads[(measurement, e)] = head(
                measurement, {"cluster": self.cluster, **entity_tags(e)})
        return h

    def frame(self, frame: Frame, *, rates: bool = False,
              extra: dict[tuple[Entity, float], str] | None = None) -> Iterator[str]:
        """`extra`: fields to add to an entity's line at a time (popped as they are used)."""
        scope = frame.scope
        metrics = CATALOG.columns(scope)
        measurement = scope.value + (RATE_SUFFIX if rates else "")
        names = [escape_key(m.name) + "=" for m in metrics]
        types = [FieldType.FLOAT if rates else m.field_type for m in metrics]
        ents = frame.entities
        for slot, ts, row in zip(frame.rows.tolist(), frame.ts.tolist(), frame.values.tolist(),
                                 strict=True):
            body = ",".join(
                names[j] + text for j, v in enumerate(row)
                if (text := format_number(types[j], v)) is not None  # NaN: not reported
            )
            if extra and (more := extra.pop((ents[slot], ts), None)):
                body = f"{body},{more}" if body else more
            if body:
                yield f"{self._head(measurement, ents[slot])} {body} {ns(ts)}"

    def derived(self, d: Derived) -> Iterator[str]:
        """Derived gauges as a line of their own in the scope's measurement (same series and
        time as the sample row, so InfluxDB merges them into one point)."""
        measurement = d.entities.scope.value
        names = [escape_key(n) + "=" for n in d.names]
        ents = d.entities
        for slot, ts, row in zip(d.rows.tolist(), d.ts.tolist(), d.values.tolist(),
                                 strict=True):
            body = ",".join(names[j] + text for j, v in enumerate(row)
                            if (text := format_number(FieldType.FLOAT, v)) is not None)
            if body:
                yield f"{self._head(measurement, ents[slot])} {body} {ns(ts)}"

    def batch(self, batch: Batch, rates: Batch | None = None,
              derived: Iterable[Derived] = ()) -> Iterator[str]:
        links = batch.frames.get(Scope.NVLINK)
        # Each GPU's mask rides on its own sample line of the same time (one point, not two).
        extra = {k: f"{MASK_FIELD}={m}i" for k, m in masks(links).items()} if links else {}
        for f in batch.frames.values():
            if f.scope is Scope.NVLINK:
                f = self._gates[False].select(f)
            yield from self.frame(f, extra=extra if f.scope is Scope.GPU else None)
        for (gpu, ts), more in extra.items():  # links of a GPU without a sample at that time
            yield f"{self._head(Scope.GPU.value, gpu)} {more} {ns(ts)}"
        for d in derived:
            yield from self.derived(d)
        if rates is not None:
            for f in rates.frames.values():
                if f.scope is Scope.NVLINK:
                    f = self._gates[True].select(f)
                yield from self.frame(f, rates=True)
        ev = batch.events
        for key, ts, metric, value in zip(ev.keys, ev.ts, ev.metrics, ev.values, strict=True):
            e = Entity.parse(key)
            yield f"{self._head(metric, e)} {EVENT_FIELD}={int(value)}i {ns(ts)}"
        for key, ident in batch.identity.items():  # only changes reach here (the pipeline)
            said = ident.as_dict()
            if said:
                yield format_line(identity.MEASUREMENT, {"cluster": self.cluster,
                                                         **entity_tags(Entity.parse(key))},
                                  dict(said), ns(ident.at))
