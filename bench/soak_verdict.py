"""The soak's invariants (docs/soak.md says what each means), judged from what was sent (the
ledgers), what the service says (its API and the probe's snapshots), what InfluxDB holds (by
InfluxQL through the v1 `/query` API) and what the receiver got."""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from bench.soak_ledger import SCOPE_TAGS, Push, Sent, SeriesField, evidence, refusals
from bench.soak_plan import Plan
from bench.soak_probe import Snapshot
from bench.soak_receiver import Received
from collectors.catalog import CATALOG
from service.api.timefmt import parse_instant
from service.history.influx.client import Series
from service.history.influx.links import LOOKBACK_S, fill, mask_query, read_masks
from service.history.influx.sparse import MASK_FIELD
from service.notify.receivers.webhook import rfc3339
from service.stages.alert_machine import AlertPolicy

TICKS_LATE = 2  # a hard failure must be at level 3 within this many ticks of its evidence
JITTER_S = 1.0  # the scheduler's start latency, allowed on top of the ticks
STALE_AFTER_S = AlertPolicy().stale_after_s  # the soak keeps the default
RSS_RATIO, RSS_FLOOR = 1.25, 64 << 20  # flat: last/first quarter at most this, or within floor
TICK_RATIO, TICK_FLOOR = 1.5, 0.025
# Tick phases (service.tick.TickPhases) whose cost follows the alerts opened and sent, which the
# fault schedule raises over the run: reported beside the flatness check, not in it.
ALERT_WORK = ("record", "notify", "remediate")


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    value: str
    detail: str = ""
    judged: bool = True  # False: reported for information, never fails the run

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "value": self.value, "detail": self.detail,
                "judged": self.judged}


_ALERT_TIMES = ("started_at", "updated_at", "resolved_at", "acked_at")


def _epochs(d: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """The API's RFC 3339 timestamps back to epoch seconds, which the checks compare."""
    return {**d, **{k: parse_instant(d[k]) for k in keys if d.get(k) is not None}}


class Api:
    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(timeout=15.0)

    def alerts(self, **params: Any) -> list[dict[str, Any]]:
        """Every matching alert, page by page (`next_cursor`), times as epoch seconds."""
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            r = self.client.get(f"{self.url}/v1/alerts", params={
                **params, "limit": 1000, **({"cursor": cursor} if cursor else {})})
            r.raise_for_status()
            body = r.json()
            out += [_epochs(a, _ALERT_TIMES) for a in body["alerts"]]
            cursor = body["next_cursor"]
            if cursor is None:
                return out

    def history(self, alert_id: int) -> list[dict[str, Any]]:
        r = self.client.get(f"{self.url}/v1/alerts/{alert_id}")
        r.raise_for_status()
        return [_epochs(h, ("at",)) for h in r.json()["history"]]

    def close(self) -> None:
        self.client.close()


# ---- scoring and readiness ------------------------------------------------------------------

def _lives(snaps: Sequence[Snapshot]) -> dict[int, list[Snapshot]]:
    by_pid: dict[int, list[Snapshot]] = defaultdict(list)
    for s in snaps:
        if s.pid is not None and s.up:
            by_pid[s.pid].append(s)
    return by_pid


def scoring(snaps: Sequence[Snapshot]) -> list[Check]:
    lives = _lives(snaps)
    failed = sum(max(s.tick_errors for s in life) for life in lives.values())
    ran = sum(max(s.ticks for s in life) for life in lives.values())
    skipped = sum(max(s.tick_skipped for s in life) for life in lives.values())
    # Readiness against the outcome of the newest scoring attempt, read only where neither
    # count moved while /readyz was asked.
    checked = wrong = 0
    examples: list[str] = []
    for life in lives.values():
        prev: Snapshot | None = None
        state: bool | None = None
        for s in life:
            if prev is None:
                state = False if s.ticks == 0 and s.tick_errors == 0 else (
                    True if s.tick_errors == 0 else None)
            elif s.tick_errors > prev.tick_errors and s.ticks == prev.ticks:
                state = False
            elif s.ticks > prev.ticks and s.tick_errors == prev.tick_errors:
                state = True
            elif s.ticks > prev.ticks or s.tick_errors > prev.tick_errors:
                state = None  # both moved within a second: unknown which was last
            prev = s
            if state is None or s.ready is None or not s.steady:
                continue
            checked += 1
            if s.ready != state:
                wrong += 1
                if len(examples) < 3:
                    examples.append(f"ready={s.ready} while scoring {'ok' if state else 'failed'}"
                                    f" ({'; '.join(s.ready_reasons)[:120] or 'no reason'})")
    return [
        Check("scoring ticks failed", failed == 0, f"{failed:.0f} of {ran + failed:.0f}",
              f"{skipped:.0f} skipped (a tick still running)"),
        Check("readiness == could score", wrong == 0 and checked > 0,
              f"{wrong} wrong of {checked} s", "; ".join(examples)),
    ]


# ---- failures -------------------------------------------------------------------------------

def _level3_at(api: Api, entity: str, since: float) -> float | None:
    """The first time at or after `since` that the entity was at level 3 (entered then, or
    entered before and still open)."""
    best: float | None = None
    for a in api.alerts(entity=entity):
        resolved = a.get("resolved_at")
        if resolved is not None and resolved < since:
            continue
        for h in api.history(int(a["id"])):
            if h["new_level"] == 3:
                at = max(float(h["at"]), since)
                best = at if best is None else min(best, at)
    return best


def failures(api: Api, plan: Plan, pushes: list[Push], ib_down_s: float,
             t0: float) -> list[Check]:
    out: list[Check] = []
    budget = TICKS_LATE * plan.step_s + JITTER_S
    for f in plan.failures:
        ev = evidence(pushes, f.entity, f.evidence, ib_down_s)
        name = f"level 3 within {TICKS_LATE} ticks: {f.name}"
        if ev.complete_at is None:
            out.append(Check(name, False, "no evidence sent",
                             f"{f.entity}: the senders never delivered the failure"))
            continue
        late = f" (logged {ev.complete_at - ev.logged_at:.0f} s before it arrived)" if (
            f.late and ev.logged_at is not None) else ""
        at = _level3_at(api, f.entity, ev.complete_at)
        if at is None:
            out.append(Check(name, False, "never", f"{f.entity}: evidence arrived at "
                                                   f"+{ev.complete_at - t0:.0f} s"
                                                   f"{late}, no level 3 after it"))
        else:
            delay = at - ev.complete_at
            out.append(Check(name, delay <= budget, f"{delay:.1f} s",
                             f"{f.entity}; budget {budget:.0f} s{late}"))
        if f.precursor:
            pname = f"alerted before it happened: {f.name}"
            first = [a for a in api.alerts(entity=f.entity)
                     if ev.happened_at is not None and a["started_at"] < ev.happened_at]
            note = "" if f.judged else "; not judged: the rule reads the 1-h tier"
            if first:
                lead = ev.happened_at - min(a["started_at"] for a in first)
                out.append(Check(pname, True, f"{lead:.0f} s ahead",
                                 f"first alert at level {max(a['peak_level'] for a in first)}"
                                 + note, judged=f.judged))
            else:
                out.append(Check(pname, False, "no alert before", f.entity + note,
                                 judged=f.judged))
    return out


def silent_gpu(api: Api, plan: Plan, silent_at: float, stale_after_s: float) -> Check:
    host = plan.silent_gpu.split(":")[0]
    deadline = silent_at + stale_after_s + TICKS_LATE * plan.step_s + JITTER_S
    # The GPU's own alert, or a node-scope one (a "GPU missing" alert may be raised on the
    # node): the node keeps reporting, so nothing else opens on it in this window.
    hits = [a for a in api.alerts(node=host)
            if (a["entity"] == plan.silent_gpu or a["entity"].startswith(plan.silent_gpu + ":")
                or a["scope"] == "node") and silent_at <= a["started_at"] <= deadline]
    name = "GPU silent while its node reports: alerted"
    if hits:
        first = min(hits, key=lambda a: a["started_at"])
        return Check(name, True, f"{first['started_at'] - silent_at:.0f} s",
                     f"{first['scope']} {first['entity']} level {first['peak_level']}; within "
                     f"stale_after_s + {TICKS_LATE} ticks")
    return Check(name, False, "no alert", f"{plan.silent_gpu}: nothing within "
                                         f"{deadline - silent_at:.0f} s of its silence")


# ---- pages ----------------------------------------------------------------------------------

def pages(api: Api, plan: Plan, notes: list[Received], cutoff: float) -> list[Check]:
    """Duplicates: a message delivered twice (same webhook-id), or a group re-sent unchanged
    (the same alerts, statuses, levels and hard evidence; not a repeat_interval repeat). Lost
    resolves: an alert paged firing, resolved in the service before `cutoff`, whose resolve
    never arrived."""
    ids = Counter(n.webhook_id for n in notes if n.webhook_id)
    dup = sum(c - 1 for c in ids.values() if c > 1)
    last: dict[str, frozenset[tuple[str, str, str, int, frozenset[tuple[str, str]]]]] = {}
    for n in notes:
        # A firing alert whose hard evidence changed (a storm that gains a hard fault) is news.
        sig = frozenset((a["fingerprint"], a["startsAt"], a["status"], int(a.get("level", 0)),
                         frozenset((str(e.get("rule", "")), str(e.get("signal", "")))
                                   for e in a.get("explanation") or ()
                                   if isinstance(e, dict) and e.get("hard")))
                        for a in n.body.get("alerts", []))
        key = str(n.body.get("groupKey"))
        if last.get(key) == sig and n.body.get("reason") != "repeat":
            dup += 1
        last[key] = sig
    fired: set[tuple[str, str]] = set()
    resolved: set[tuple[str, str]] = set()
    for n in notes:
        for a in n.body.get("alerts", []):
            ep = (a["labels"].get("entity", ""), a["startsAt"])
            (fired if a["status"] == "firing" else resolved).add(ep)
    owed = [a for a in api.alerts(state="resolved")
            if a["resolved_at"] is not None and a["resolved_at"] <= cutoff
            and (a["entity"], rfc3339(a["started_at"])) in fired]
    lost = [a for a in owed if (a["entity"], rfc3339(a["started_at"])) not in resolved]
    restart = [a for a in api.alerts(node=plan.resolve_node) if a["peak_level"] >= 3]
    delivered = [a for a in restart if a["resolved_at"] is not None
                 and (a["entity"], rfc3339(a["started_at"])) in resolved]
    restart_ok = bool(restart) and len(delivered) == len(restart)
    return [
        Check("pages: duplicates", dup == 0, str(dup), f"{len(notes)} messages received"),
        Check("pages: lost resolves", not lost, f"{len(lost)} of {len(owed)}",
              ", ".join(a["entity"] for a in lost[:5])),
        Check("resolves after the kill -9 delivered", restart_ok,
              f"{len(delivered)} of {len(restart)}",
              f"{plan.resolve_node}: paged before the kill, cooled after the restart; "
              f"{sum(a['resolved_at'] is not None for a in restart)} resolved in the service"),
    ]


def drains(plan: Plan, requests: list[Received]) -> Check:
    """The remediation hook must only ever be asked to drain one known node by name."""
    known = {n.name for n in plan.nodes}
    asked = Counter(str(r.body.get("node")) for r in requests)
    foreign = sorted(n for n in asked if n not in known)
    return Check("drains only of known nodes", not foreign, f"{len(foreign)} unknown",
                 f"asked: {', '.join(sorted(asked)) or 'none'}")


# ---- samples and refusals -------------------------------------------------------------------

def influx_counts(influx_url: str, since: float) -> dict[SeriesField, int]:
    """Values per series and field that InfluxDB holds, less what the service derives itself
    (the IB bit-error rate, the GPUs' NVLink masks), which no sender sent. NVLink points are
    written only when a link moved (docs/influxdb.md): its rounds are counted as the readers
    see them, each stored point carried to the rounds its GPU's mask names it in."""
    derived = {m.name for m in CATALOG if m.derived} | {MASK_FIELD}
    out: dict[SeriesField, int] = defaultdict(int)
    with httpx.Client(timeout=120.0) as client:
        def query(q: str) -> list[dict[str, Any]]:
            r = client.post(f"{influx_url}/query", data={"q": q, "db": "gpuhealth",
                                                           "epoch": "ns"})
            r.raise_for_status()
            found: list[dict[str, Any]] = r.json()["results"][0].get("series", [])
            return found

        for m, tags in SCOPE_TAGS.items():
            if m == "nvlink":
                continue
            for x in query(f'SELECT count(*) FROM "{m}" WHERE time >= {int(since)}s GROUP BY *'):
                key_tags = tuple(x.get("tags", {}).get(t, "") for t in tags)
                for col, v in zip(x["columns"], x["values"][0], strict=True):
                    if col.startswith("count_") and v and col[6:] not in derived:
                        out[(m, key_tags, col[6:])] += int(v)
        start = int(since * 1e9)
        masks = read_masks([Series("gpu", x.get("tags", {}), x["columns"], x["values"])
                            for x in query(mask_query(f"time >= {start}"))])
        stored = [Series("nvlink", x.get("tags", {}), x["columns"], x["values"])
                  for x in query(f'SELECT * FROM "nvlink" WHERE time >= '
                                 f'{start - int(LOOKBACK_S * 1e9)} GROUP BY *')]
        tags = SCOPE_TAGS["nvlink"]
        for link in fill(stored, masks, start):
            key_tags = tuple(link.tags.get(t, "") for t in tags)
            for j, col in enumerate(link.columns[1:], 1):
                n = sum(1 for r in link.values if r[j] is not None)
                if n and col not in derived and col not in tags:
                    out[("nvlink", key_tags, col)] += n
    return out


def samples(sent: Sent, stored: dict[SeriesField, int], pushes: list[Push]) -> list[Check]:
    counts = sent.counts()
    lost = doubled = 0
    lost_kinds: Counter[str] = Counter()
    for key, n in counts.items():
        have = stored.get(key, 0)
        if have < n:
            lost += n - have
            # Counts cannot say which timestamps are missing; the kinds of sending the series
            # got besides plain rounds can (a resent, sub-step or late point).
            kinds = {sent.kind_of[(key, t)] for t in sent.times[key]} - {"normal"}
            lost_kinds["+".join(sorted(kinds)) or "normal"] += n - have
        doubled += max(0, have - n)
    foreign = sum(v for k, v in stored.items() if k not in counts)
    unexpected, reasons, bad_sent, bad_refused = refusals(pushes)
    why = "; ".join(f"{r} x{c}" for r, c in reasons.most_common(6))
    total = sum(counts.values())
    return [
        Check("samples lost in InfluxDB", lost == 0, f"{lost} of {total}",
              ", ".join(f"{k}: {v}" for k, v in lost_kinds.most_common())),
        Check("samples doubled in InfluxDB", doubled == 0 and foreign == 0, str(doubled),
              f"{foreign} stored that no sender sent" if foreign else ""),
        Check("refused beyond the bad lines", unexpected == 0, f"{unexpected} samples", why),
        Check("bad lines refused", bad_refused == bad_sent and bad_sent > 0,
              f"{bad_refused} of {bad_sent}", "each alone in its request; refused whole"),
    ]


# ---- flatness -------------------------------------------------------------------------------

def flat(snaps: Sequence[Snapshot], t0: float, t1: float) -> list[Check]:
    q = (t1 - t0) / 4
    first = [s for s in snaps if t0 <= s.at < t0 + q]
    last = [s for s in snaps if t1 - q <= s.at <= t1]

    def rss(xs: list[Snapshot]) -> float:
        v = [s.rss_bytes for s in xs if s.rss_bytes > 0]
        return sum(v) / len(v) if v else float("nan")

    def tick(xs: list[Snapshot]) -> float:
        """The mean tick, or where the service splits it, its phases that do not grow with
        the alerts the schedule opens (record, notify and remediate do: ALERT_WORK)."""
        split = phases(xs)
        if split:
            return sum(v for k, v in split.items() if k not in ALERT_WORK) / 1000.0
        by_pid: dict[int | None, list[Snapshot]] = defaultdict(list)
        for s in xs:
            if s.up:
                by_pid[s.pid].append(s)
        dsum = dcount = 0.0
        for life in by_pid.values():
            if len(life) > 1:
                dsum += life[-1].tick_sum - life[0].tick_sum
                dcount += life[-1].tick_count - life[0].tick_count
        return dsum / dcount if dcount else float("nan")

    def phases(xs: list[Snapshot]) -> dict[str, float]:
        """Milliseconds per tick in each phase (service.tick.TickPhases) over the quarter."""
        by_pid: dict[int | None, list[Snapshot]] = defaultdict(list)
        for s in xs:
            if s.up and s.phases:
                by_pid[s.pid].append(s)
        spent: dict[str, float] = defaultdict(float)
        count = 0.0
        for life in by_pid.values():
            if len(life) > 1:
                a, b = dict(life[0].phases), dict(life[-1].phases)
                for k in b:
                    spent[k] += b[k] - a.get(k, 0.0)
                count += life[-1].tick_count - life[0].tick_count
        return {k: v * 1000.0 / count for k, v in spent.items()} if count else {}

    def split(xs: list[Snapshot], ys: list[Snapshot]) -> str:
        a, b = phases(xs), phases(ys)
        top = sorted(set(a) | set(b), key=lambda k: -max(a.get(k, 0.0), b.get(k, 0.0)))[:4]
        return "; ".join(f"{k} {a.get(k, 0.0):.1f} -> {b.get(k, 0.0):.1f}" for k in top)

    out = []
    for name, f, ratio, floor, unit in (("RSS flat (last/first quarter)", rss, RSS_RATIO,
                                         RSS_FLOOR, 1 / (1 << 20)),
                                        ("tick time flat (last/first quarter)", tick, TICK_RATIO,
                                         TICK_FLOOR, 1000.0)):
        a, b = f(first), f(last)
        r = b / a if a and a == a and b == b else float("nan")
        ok = r == r and (r <= ratio or b - a <= floor)
        u = "MiB" if unit < 1 else "ms"
        why = f"{a * unit:.1f} -> {b * unit:.1f} {u}; limit {ratio:g}x or +{floor * unit:g} {u}"
        if f is tick and phases(last):
            why = f"without {', '.join(ALERT_WORK)}: {why} (ms per tick by phase: " \
                  f"{split(first, last)})"
        out.append(Check(name, ok, f"{r:.2f}", why))
    pa, pb = phases(first), phases(last)
    if pa and pb:
        work = [sum(p.get(k, 0.0) for k in ALERT_WORK) for p in (pa, pb)]
        out.append(Check("alert work per tick (first -> last quarter)", True,
                         f"{work[0]:.1f} -> {work[1]:.1f} ms",
                         "record, notify and remediate: grows with the open alerts, so not "
                         "judged for flatness", judged=False))
    return out


def node_no_data(api: Api, host: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return any(a["scope"] == "node" for a in api.alerts(node=host))
    return False
