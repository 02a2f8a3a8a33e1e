"""Reading back what the soak's senders pushed (the ledgers of bench.soak_agent and
bench.soak_telegraf): the samples the service was given, which InfluxDB must then hold once
each, the refusals the service answered, and when each piece of failure evidence reached the
service."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.soak_fleet import SHUTDOWN_C
from bench.soak_plan import Level2Fault
from collectors.catalog import CATALOG
from collectors.lineprotocol import Point, parse

SCOPE_TAGS = {"gpu": ("host", "gpu"), "nvlink": ("host", "gpu", "link"),
              "ib_port": ("host", "device", "port"), "xid": ("host", "gpu"),
              "psu": ("host", "psu"), "fan": ("host", "fan"), "node": ("host",),
              "sel": ("host",)}
EVENTS = ("xid", "sel")  # event measurements: one field, `code`
# Telegraf measurement -> (our measurement, its tags in our tag names' order)
_TELEGRAF = {"nvidia_smi": ("gpu", ("host", "index")),
             "infiniband": ("ib_port", ("host", "device", "port"))}
SeriesField = tuple[str, tuple[str, ...], str]  # measurement, tag values, field


def _catalog_fields() -> tuple[dict[str, set[str]], dict[str, str]]:
    ours: dict[str, set[str]] = defaultdict(set)
    telegraf: dict[str, str] = {}
    for m in CATALOG:
        if m.derived or m.name in EVENTS:
            continue
        ours[m.scope.value].add(m.name)
        if m.telegraf:
            telegraf[m.telegraf] = m.name
    for event in EVENTS:
        ours[event] = {"code"}
    return ours, telegraf


OUR_FIELDS, TELEGRAF_FIELDS = _catalog_fields()


@dataclass(slots=True)
class Push:
    at: float  # when the sender had the answer
    status: int
    kind: str  # agent, normal, resend, substep, late, bad
    source: str
    points: list[Point]
    bad_lines: int  # lines that are not line protocol at all
    answer: dict[str, Any] | None = None

    @property
    def rejected(self) -> int:
        return int((self.answer or {}).get("rejected", 0)) if self.status == 400 else 0


def read(path: Path, source: str) -> list[Push]:
    if not path.is_file():
        return []
    pushes: list[Push] = []
    cur: dict[str, Any] | None = None
    lines: list[str] = []

    def close() -> None:
        if cur is not None:
            parsed = parse(lines, max_lines=None, max_bytes=None)
            pushes.append(Push(cur["at"], cur["status"], cur["kind"], source, parsed.points,
                               len(parsed.rejected), cur.get("answer")))

    for raw in path.read_text().splitlines():
        if raw.startswith("#push "):
            close()
            _, at, status = raw.split()
            cur, lines = {"at": float(at), "status": int(status), "kind": "agent"}, []
        elif raw.startswith("#kind ") and cur is not None:
            cur["kind"] = raw[6:].strip()
        elif raw.startswith("#rej ") and cur is not None:
            cur["answer"] = json.loads(raw[5:])
        elif raw:
            lines.append(raw)
    close()
    return pushes


def _mapped(p: Point) -> tuple[str, tuple[str, ...], dict[str, float]] | None:
    """Our measurement, tag values and catalog fields of a sent point; None when the point
    carries nothing InfluxDB should hold (collector status, unknown measurements)."""
    if p.measurement in _TELEGRAF:
        ours, tags = _TELEGRAF[p.measurement]
        fields = {TELEGRAF_FIELDS[f"{p.measurement}.{k}"]: v for k, v in p.fields.items()
                  if f"{p.measurement}.{k}" in TELEGRAF_FIELDS}
    elif p.measurement in SCOPE_TAGS:
        ours, tags = p.measurement, SCOPE_TAGS[p.measurement]
        fields = {k: v for k, v in p.fields.items() if k in OUR_FIELDS[ours]}
    else:
        return None
    nums = {k: float(v) for k, v in fields.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}
    if not nums or any(t not in p.tags for t in tags):
        return None
    return ours, tuple(p.tags[t] for t in tags), nums


@dataclass(slots=True)
class Sent:
    """Distinct (series, field, timestamp) samples sent, per series and field; and per kind of
    sending, for telling where a loss comes from."""

    times: dict[SeriesField, set[int]] = field(default_factory=lambda: defaultdict(set))
    kind_of: dict[tuple[SeriesField, int], str] = field(default_factory=dict)

    def counts(self) -> dict[SeriesField, int]:
        return {k: len(v) for k, v in self.times.items()}


def sent_samples(pushes: Iterable[Push]) -> Sent:
    out = Sent()
    for push in pushes:
        if push.kind == "bad":
            continue
        for p in push.points:
            m = _mapped(p)
            if m is None or p.ts_ns is None:
                continue
            ours, tags, fields = m
            us = round(p.ts_ns / 1000)  # the service stores microseconds (lines.ns)
            for f in fields:
                key = (ours, tags, f)
                out.times[key].add(us)
                out.kind_of.setdefault((key, us), push.kind)
    return out


def refusals(pushes: Iterable[Push]) -> tuple[int, Counter[str], int, int]:
    """(samples refused outside the bad requests, their reasons, bad requests sent, bad
    requests refused whole)."""
    unexpected = 0
    reasons: Counter[str] = Counter()
    bad_sent = bad_refused = 0
    for push in pushes:
        if push.kind == "bad":
            bad_sent += 1
            accepted = int((push.answer or {}).get("accepted", 0))
            if push.status == 400 and push.rejected >= 1 and accepted == 0:
                bad_refused += 1
            continue
        if push.status == 400:
            unexpected += push.rejected
            for r in (push.answer or {}).get("rejections", []):
                reason = str(r.get("reason", "?"))
                reasons[reason.split(": ts=")[0][:120]] += 1
    return unexpected, reasons, bad_sent, bad_refused


# ---- evidence -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Evidence:
    happened_at: float | None  # arrival of the first failing sample
    complete_at: float | None  # arrival of what makes the hard rule's evidence complete
    logged_at: float | None  # data time of the first failing sample


def evidence(pushes: list[Push], entity: str, what: str, ib_down_s: float) -> Evidence:
    """When the evidence of a failure on `entity` reached the service, from the senders' view.
    `what`: dbe, hot, xid79 or ib_down (soak_plan.HardFailure.evidence)."""
    parts = entity.split(":")
    host = parts[0]
    first: tuple[float, float] | None = None  # (arrival, data time)
    for push in sorted(pushes, key=lambda x: x.at):
        for p in push.points:
            if p.tags.get("host") != host or p.ts_ns is None:
                continue
            ts = p.ts_ns / 1e9
            if what in ("dbe", "hot") and p.measurement == "gpu" and (
                    f"gpu{p.tags.get('gpu')}" == parts[1]):
                name, at_least = (("ecc_dbe_volatile", 1.0) if what == "dbe"
                                  else ("gpu_temp", SHUTDOWN_C - 2.0))
                v = p.fields.get(name)
                if isinstance(v, int | float) and v >= at_least:
                    return Evidence(push.at, push.at, ts)
            elif what == "xid79" and p.measurement == "xid" and p.fields.get("code") == 79:
                gpu = p.tags.get("gpu", "")
                # The agent may key it by bus id when the GPU left its bus map: still sent.
                if f"gpu{gpu}" == parts[1] or not gpu.isdigit():
                    return Evidence(push.at, push.at, ts)
            elif (what == "ib_down" and p.measurement == "ib_port"
                  and (p.tags.get("device"), p.tags.get("port")) == (parts[1], parts[2])):
                state = p.fields.get("ib_state")
                if not isinstance(state, int | float) or state == 4:
                    continue
                if first is None:
                    first = (push.at, ts)
                elif ts >= first[1] + ib_down_s:
                    return Evidence(first[0], push.at, first[1])
    if first is not None:
        return Evidence(first[0], None, first[1])
    return Evidence(None, None, None)


def _failing(p: Point, f: Level2Fault) -> bool:
    """Whether a sent point shows the level-2 fault `f` on its entity."""
    parts = f.entity.split(":")
    if p.tags.get("host") != parts[0]:
        return False
    v = p.fields
    if f.evidence == "psu":
        return p.measurement == "psu" and p.tags.get("psu") == f.unit and v.get(
            "psu_health") == 2
    if f.evidence == "redundancy":
        return p.measurement == "node" and v.get("psu_redundant") == 0
    if f.evidence == "fan":
        rpm, limit = v.get("fan_rpm"), v.get("fan_rpm_lower_critical")
        return p.measurement == "fan" and p.tags.get("fan") == f.unit and (
            v.get("fan_health") == 2 or (isinstance(rpm, int | float)
                                         and isinstance(limit, int | float) and rpm < limit))
    if f.evidence == "pcie":
        width, top = v.get("pcie_link_width"), v.get("pcie_link_width_max")
        return (p.measurement == "gpu" and f"gpu{p.tags.get('gpu')}" == parts[1]
                and isinstance(width, int | float) and isinstance(top, int | float)
                and width < top)
    raise ValueError(f"unknown evidence {f.evidence!r}")


def level2_evidence(pushes: list[Push], f: Level2Fault, readings: int = 1) -> Evidence:
    """When the evidence of a level-2 fault reached the service: the first failing reading
    (`happened_at`), and the one that completes what the rule asks for (`complete_at`): the
    `readings`-th failing reading in a row, then `f.hold_s` of them by data time."""
    first: tuple[float, float] | None = None  # (arrival, data time) of the first failing one
    count = 0
    for push in sorted(pushes, key=lambda x: x.at):
        for p in push.points:
            if p.ts_ns is None or p.tags.get("host") != f.entity.split(":")[0]:
                continue
            if not _failing(p, f):
                continue
            ts = p.ts_ns / 1e9
            count += 1
            if first is None:
                first = (push.at, ts)
            if count >= readings and ts >= first[1] + f.hold_s:
                return Evidence(first[0], push.at, first[1])
    if first is not None:
        return Evidence(first[0], None, first[1])
    return Evidence(None, None, None)
