"""The storm phase's invariants (docs/soak.md): the storm was raised, every firing alert (level 3
at its level) stayed in Alertmanager while it fired, the page receiver got every hard fault
(its own page, or listed as hard in the FleetStorm page), and the delivery state the API shows
per receiver (`deliveries`) agrees with what the receivers got."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from bench.soak_alertmanager import PERIOD_S, AmAlert, AmSample
from bench.soak_ledger import Push, evidence
from bench.soak_plan import HardFailure, Plan
from bench.soak_probe import Snapshot
from bench.soak_receiver import Received
from bench.soak_verdict import JITTER_S, TICKS_LATE, Api, Check
from service.api.timefmt import parse_instant
from service.notify.receivers.webhook import rfc3339

STORM = "FleetStorm"
PAGER, ALERTMANAGER = "pager", "am"  # the receivers' names in the soak's config
SENT_SLACK_S = 10.0  # a delivery's sent_at against when the receiver had it
DELIVERY_FIELD = "deliveries"


def lag_s(plan: Plan) -> float:
    """From a change of an alert to its post in Alertmanager: the group's wait or interval, a
    scoring tick and the send."""
    return 2 * plan.step_s + 2.0


def page_budget_s(plan: Plan) -> float:
    """From a hard failure's evidence to its page: level 3 within TICKS_LATE ticks, then a
    tick for the storm page to list it, the group's interval and the send."""
    return (TICKS_LATE + 2) * plan.step_s + JITTER_S + 2.0


def first_ticks(snaps: Sequence[Snapshot]) -> dict[int, float]:
    """When each life of the service (by pid) had scored once: until then (and one flush
    after) Alertmanager may lack what it let expire while the service was down."""
    out: dict[int, float] = {}
    for s in snaps:
        if s.pid is not None and s.up and s.ticks >= 1 and s.pid not in out:
            out[s.pid] = s.at
    return out


# ---- the storm ------------------------------------------------------------------------------

def storm_raised(api: Api, plan: Plan, t0: float) -> Check:
    storms = [a for a in api.alerts() if a["alertname"] == STORM]
    start = t0 + plan.storm_at
    during = [a for a in storms if a["started_at"] >= start]
    before = [a for a in storms if a["started_at"] < start]
    name = "storm: FleetStorm raised"
    note = (f"; {len(before)} raised before the storm phase (first at "
            f"+{min(a['started_at'] for a in before) - t0:.0f} s)" if before else "")
    nodes = f"storm nodes {', '.join(plan.storm_nodes)}; trips at {plan.storm_min_nodes} of " \
            f"{len(plan.nodes)} within {plan.storm_window_s:g} s"
    if not during:
        return Check(name, False, "never", nodes + note)
    first = min(during, key=lambda a: a["started_at"])
    return Check(name, True, f"+{first['started_at'] - start:.0f} s",
                 f"after the phase began; {nodes}{note}")


# ---- Alertmanager ---------------------------------------------------------------------------

def _level3_since(api: Api, cache: dict[int, list[tuple[float, int]]], alert_id: int,
                  at: float) -> float | None:
    """When the alert last entered level 3 at or before `at`."""
    if alert_id not in cache:
        cache[alert_id] = [(float(h["at"]), int(h["new_level"])) for h in api.history(alert_id)]
    since: float | None = None
    for when, level in sorted(cache[alert_id]):
        if when > at:
            break
        if level != 3:
            since = None
        elif since is None:
            since = when
    return since


def _states(found: list[AmAlert]) -> str:
    return "/".join(sorted({f"{a.state}@{a.level}" for a in found})) or "absent"


def in_alertmanager(api: Api, plan: Plan, samples: Sequence[AmSample],
                    starts: dict[int, float], t0: float) -> list[Check]:
    """Two rows: every level-3 alert present in Alertmanager at level 3 while firing; no
    firing alert (any level) absent from it (resolved there, or never posted). An alert is
    judged once `lag_s` passed since it started (or entered level 3), and not before the
    service's life has scored once plus that lag."""
    lag = lag_s(plan)
    history: dict[int, list[tuple[float, int]]] = {}
    l3_judged = l3_bad = 0
    l3_examples: list[str] = []
    any_judged = 0
    absent: dict[tuple[str, float], tuple[Any, float, bool]] = {}  # alert -> first miss
    seen: set[tuple[str, float]] = set()
    skipped = 0
    for s in samples:
        settled = s.pid is not None and s.pid in starts and s.at >= starts[s.pid] + lag
        if not settled:
            skipped += 1
            continue
        for f in s.firing:
            key = (f.fingerprint, f.started_at)
            if s.present(f.fingerprint):
                seen.add(key)
            if s.at - f.started_at >= lag:
                any_judged += 1
                if not s.present(f.fingerprint) and key not in absent:
                    absent[key] = (f, s.at, key in seen)
            if f.level != 3:
                continue
            since = _level3_since(api, history, f.id, s.at)
            if since is None or s.at - since < lag:
                continue
            l3_judged += 1
            if not s.present(f.fingerprint, 3):
                l3_bad += 1
                if len(l3_examples) < 4:
                    l3_examples.append(f"{f.alertname} {f.entity} at +{s.at - t0:.0f} s: "
                                       f"{_states(s.am.get(f.fingerprint, []))}")
    resolved = [v for v in absent.values() if v[2]]
    never = [v for v in absent.values() if not v[2]]

    def name(v: tuple[Any, float, bool]) -> str:
        return f"{v[0].alertname} {v[0].entity} L{v[0].level} +{v[1] - t0:.0f} s"

    miss_detail = "; ".join([f"resolved there: {name(v)}" for v in resolved[:3]]
                            + [f"never there: {name(v)}" for v in never[:3]])
    return [
        Check("level 3 in Alertmanager while firing", l3_bad == 0 and l3_judged > 0,
              f"{l3_bad} missing of {l3_judged}",
              "; ".join(l3_examples) or f"read every {PERIOD_S:g} s: {len(samples)} "
              f"probes ({skipped} within a restart's first tick + {lag:.0f} s)"),
        Check("resolved in Alertmanager while firing", not absent and any_judged > 0,
              f"{len(absent)} alerts", miss_detail or f"{any_judged} alert-samples judged, "
              "any level; absent from its API = resolved (or never posted)"),
    ]


# ---- the page receiver ----------------------------------------------------------------------

def _mentions(entry: Any, f: HardFailure) -> str | None:
    """'entity' or 'node' when a FleetStorm explanation entry marked hard names the failure's
    entity (or, failing that, its node as a whole word)."""
    if not isinstance(entry, dict) or not entry.get("hard"):
        return None
    text = " ".join(str(v) for v in entry.values() if isinstance(v, str | list))
    # The entity itself, not a longer key it begins (n01:gpu1 in n01:gpu10 or n01:gpu1:nvlink2)
    if re.search(rf"(?<![\w:]){re.escape(f.entity)}(?!\w|:\w)", text):
        return "entity"
    node = f.entity.split(":")[0]
    return "node" if re.search(rf"(?<![\w:]){re.escape(node)}(?![\w:])", text) else None


def hard_faults_paged(plan: Plan, notes: Sequence[Received], pushes: list[Push],
                      ib_down_s: float) -> Check:
    """Each injected hard failure reached the page receiver between its first failing sample
    reaching the service and `page_budget_s` after its evidence was complete: as a firing alert
    of its entity at level 3, or listed as hard in a firing FleetStorm alert's explanation (the
    storm page and its updates). A page held back until a storm ends is late."""
    budget = page_budget_s(plan)
    how: list[str] = []
    missing: list[str] = []
    for f in plan.failures:
        ev = evidence(pushes, f.entity, f.evidence, ib_down_s)
        since = ev.happened_at if ev.happened_at is not None else float("inf")
        until = (ev.complete_at if ev.complete_at is not None else since) + budget
        got: str | None = None
        late: float | None = None
        for n in notes:
            if n.at < since:
                continue
            for a in n.body.get("alerts", []):
                if a.get("status") != "firing":
                    continue
                labels = a.get("labels", {})
                if labels.get("alertname") == STORM:
                    hit = next((m for e in a.get("explanation") or []
                                if (m := _mentions(e, f))), None)
                    if not hit:
                        continue
                    what = f"in the storm page ({hit})"
                elif labels.get("entity") == f.entity and int(a.get("level", 0)) >= 3:
                    what = "own page"
                else:
                    continue
                if n.at <= until:
                    got = f"{what} +{n.at - since:.0f} s"
                elif late is None:
                    late = n.at - since
                break
            if got:
                break
        if got:
            how.append(f"{f.entity}: {got}")
        else:
            missing.append(f"{f.entity} ({f.evidence}" + (
                f", paged only +{late:.0f} s)" if late is not None else ")")
                if ev.happened_at is not None else f"{f.entity} (no evidence sent)")
    total = len(plan.failures)
    parts = ([f"missing: {', '.join(missing)}"] if missing else []) + how
    return Check("pages: every hard fault (grouped)", not missing,
                 f"{total - len(missing)} of {total}",
                 "; ".join([*parts, f"due within {budget:.0f} s of the evidence"]))


# ---- the delivery column --------------------------------------------------------------------

def deliveries(api: Api, pager_log: Callable[[], Sequence[Received]],
               am_read: Callable[[], AmSample | None]) -> Check:
    """The API's per-receiver delivery state against the receivers' own logs, read after the
    API (a receiver logs a message before it answers, the service calls it sent after): an
    alert firing and `sent` to the pager was received by it at `level_sent`, within
    SENT_SLACK_S of `sent_at`; one resolved and `sent` (nothing owed) that the pager had
    firing had its resolve received; one firing and `sent` to Alertmanager is there at
    `level_sent`."""
    name = "delivery column == receivers' logs"
    alerts = api.alerts()
    if alerts and not any(DELIVERY_FIELD in a for a in alerts):
        return Check(name, False, "not available",
                     f"/v1/alerts has no `{DELIVERY_FIELD}` field")
    am_now = am_read()
    fired: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    resolved: set[tuple[str, str]] = set()
    for n in pager_log():
        for a in n.body.get("alerts", []):
            key = (a["fingerprint"], a["startsAt"])
            if a.get("status") == "firing":
                fired[key].append((n.at, int(a.get("level", 0))))
            else:
                resolved.add(key)
    steady = {f.fingerprint: f for f in am_now.firing} if am_now is not None else {}
    checked = 0
    bad: list[str] = []
    for a in alerts:
        rows = {str(d.get("receiver")): d for d in a.get(DELIVERY_FIELD) or []}
        key = (a["fingerprint"], rfc3339(a["started_at"]))
        label = f"{a['alertname']} {a['entity']}"
        pager = rows.get(PAGER)
        if pager is not None and pager.get("state") == "sent":
            checked += 1
            if a["state"] == "firing":
                problem = _sent_matches(pager, fired.get(key, []))
            else:
                problem = ("says nothing owed, its resolve never received"
                           if key in fired and key not in resolved else None)
            if problem:
                bad.append(f"{label}: pager {problem}")
        amd = rows.get(ALERTMANAGER)
        fire = steady.get(a["fingerprint"])
        if (amd is not None and amd.get("state") == "sent" and am_now is not None
                and a["state"] == "firing" and fire is not None
                and fire.started_at == a["started_at"] and fire.level == a["level"]):
            checked += 1
            level = amd.get("level_sent")
            if not am_now.present(a["fingerprint"], int(level) if level is not None else None):
                bad.append(f"{label}: am sent at level {level}, Alertmanager has "
                           f"{_states(am_now.am.get(a['fingerprint'], []))}")
    return Check(name, not bad and checked > 0, f"{len(bad)} of {checked}",
                 "; ".join(bad[:4]) or f"{len(alerts)} alerts; pager and am rows that say sent")


def _sent_matches(row: dict[str, Any], got: list[tuple[float, int]]) -> str | None:
    """Why a firing alert's `sent` row disagrees with the messages the receiver got for its
    episode (arrival, level); None when it agrees."""
    if not got:
        return "says sent, never received"
    level = row.get("level_sent")
    at_level = [t for t, lv in got if level is None or lv == int(level)]
    if not at_level:
        return f"says sent at level {level}, received at {sorted({lv for _, lv in got})}"
    sent_at = row.get("sent_at")
    if sent_at is not None:
        at = parse_instant(sent_at)
        if all(abs(t - at) > SENT_SLACK_S for t in at_level):
            return (f"says sent at level {level} at {sent_at}, received at that level only "
                    f"{min(at_level, key=lambda t: abs(t - at)) - at:+.0f} s from it")
    return None
