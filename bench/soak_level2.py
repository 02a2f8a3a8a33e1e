"""The invariants of the soak's level-2 faults (docs/soak.md): a failed power supply and the
redundancy it takes, a fan below its lower critical speed, a PCIe link at half width. Each must
reach level 2, and no higher, on its own entity within its rule's wait and the level's
for-duration of its evidence reaching the service; reach the mail receiver and Alertmanager at
level 2; and never have a node drained for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.soak_alertmanager import AmSample
from bench.soak_ledger import Push, level2_evidence
from bench.soak_mail import MailAlert
from bench.soak_plan import Level2Fault, Plan
from bench.soak_receiver import Received
from bench.soak_verdict import JITTER_S, TICKS_LATE, Api, Check
from models.detectors.chassis import ChassisRuleConfig

LEVEL = 2


def budget_s(plan: Plan) -> float:
    """From the evidence complete (the fan's second reading, the PCIe width's hold) to level 2:
    the ticks a hard failure's evidence may take to show (TICKS_LATE, as for level 3), the
    level's for-duration, one tick more (the for-duration is checked at ticks: the first at or
    after it elapsed, and tick times jitter) and the scheduler's latency."""
    return plan.level2_for_s + (TICKS_LATE + 1) * plan.step_s + JITTER_S


def _readings(f: Level2Fault) -> int:
    return ChassisRuleConfig().fan_readings if f.evidence == "fan" else 1


def _entered(api: Api, alerts: Sequence[dict[str, Any]]) -> tuple[float, dict[str, Any]] | None:
    """When the first of `alerts` entered level 2 or above, and which."""
    best: tuple[float, dict[str, Any]] | None = None
    for a in alerts:
        for h in api.history(int(a["id"])):
            if h["new_level"] >= LEVEL and (best is None or h["at"] < best[0]):
                best = (float(h["at"]), a)
    return best


def _explains(alert: dict[str, Any], rule: str) -> bool:
    return any(isinstance(e, dict) and e.get("rule") == rule
               for e in alert.get("explanation") or ())


def level2(api: Api, plan: Plan, pushes: list[Push], lives: dict[int, float],
           am: Sequence[AmSample], am_now: AmSample | None, mail: Sequence[MailAlert],
           t0: float) -> tuple[list[Check], list[dict[str, Any]]]:
    """Two rows per fault (level 2 in time on its entity; delivered to mail and Alertmanager)
    and the alerts the faults raised, for the drain row."""
    out: list[Check] = []
    raised: list[dict[str, Any]] = []
    budget = budget_s(plan)
    starts = sorted(lives.values())
    for f in plan.level2:
        ev = level2_evidence(pushes, f, _readings(f))
        name = f"level 2 within {budget:.0f} s: {f.name}"
        node = f.entity.split(":")[0]
        since = ev.happened_at if ev.happened_at is not None else t0
        mine = [a for a in api.alerts(node=node) if a["alertname"] == f.alertname
                and (a["resolved_at"] is None or a["resolved_at"] >= since)]
        ours = [a for a in mine if a["entity"] == f.entity]
        # The right entity: no other supply, fan or GPU of the node alerted for this rule.
        others = sorted({a["entity"] for a in mine if a["entity"] != f.entity
                         and a["started_at"] >= since and _explains(a, f.rule)})
        raised += ours
        if ev.complete_at is None:
            out.append(Check(name, False, "no evidence sent",
                             f"{f.entity}: the senders never delivered the {f.evidence} fault"))
            out.append(Check(f"level 2 to mail and Alertmanager: {f.name}", False, "no evidence"))
            continue
        got = _entered(api, ours)
        peak = max((int(a["peak_level"]) for a in ours), default=0)
        wrong = f"; also on {', '.join(others)}" if others else ""
        if got is None:
            out.append(Check(name, False, "never", f"{f.entity} {f.alertname}: evidence at "
                             f"+{ev.complete_at - t0:.0f} s, peak level {peak}{wrong}"))
            out.append(Check(f"level 2 to mail and Alertmanager: {f.name}", False,
                             "never at level 2"))
            continue
        at, alert = got
        if not _explains(alert, f.rule):
            wrong += f"; its explanation does not name {f.rule}"
        # A restart starts every pending for-duration again: counted from the restarted
        # service's first tick where that came after the evidence.
        life = max((s for s in starts if s <= at), default=ev.complete_at)
        start = max(ev.complete_at, life)
        delay = max(0.0, at - start)
        ok = delay <= budget and peak == LEVEL and not wrong
        restart = f", after a restart at +{life - t0:.0f} s" if life > ev.complete_at else ""
        out.append(Check(name, ok, f"{delay:.1f} s",
                         f"{f.entity} {f.alertname} peak level {peak}; evidence complete at "
                         f"+{ev.complete_at - t0:.0f} s{restart}, level 2 at +{at - t0:.0f} s"
                         f"{wrong}"))
        out.append(_delivered(f, alert, at, am, am_now, mail, t0))
    return out, raised


def _delivered(f: Level2Fault, alert: dict[str, Any], at: float, am: Sequence[AmSample],
               am_now: AmSample | None, mail: Sequence[MailAlert], t0: float) -> Check:
    """A mail listing the entity firing at level 2, and Alertmanager holding the alert at level
    2 at some probe while the service had it firing at level 2 (or at the end)."""
    name = f"level 2 to mail and Alertmanager: {f.name}"
    mailed = [m for m in mail if m.entity == f.entity and m.status == "firing"
              and m.level == LEVEL and m.at >= at - 1.0]
    fp = alert["fingerprint"]
    samples = [*am, *([am_now] if am_now is not None else [])]
    in_am = [s for s in samples if s.at >= at and any(
        x.fingerprint == fp and x.level == LEVEL for x in s.firing) and s.present(fp, LEVEL)]
    parts = [f"mail +{mailed[0].at - at:.0f} s" if mailed else "no mail",
             f"Alertmanager at +{in_am[0].at - t0:.0f} s" if in_am else
             "not in Alertmanager at level 2"]
    return Check(name, bool(mailed) and bool(in_am), f"{len(mailed)} mail, {len(in_am)} probes",
                 f"{f.entity}: {'; '.join(parts)}")


def no_drain(requests: Sequence[Received], raised: Sequence[dict[str, Any]]) -> Check:
    """No drain request names a level-2 fault's alert (by id or fingerprint)."""
    ids = {int(a["id"]) for a in raised}
    fps = {str(a["fingerprint"]) for a in raised}
    bad = [r for r in requests if r.body.get("op", "drain") == "drain"
           and (r.body.get("alert_id") in ids or r.body.get("fingerprint") in fps)]
    nodes = sorted({str(r.body.get("node")) for r in bad})
    return Check("drains: none for a level-2 fault", not bad and bool(raised),
                 f"{len(bad)} requests",
                 f"nodes {', '.join(nodes)}" if bad else
                 f"{len(raised)} alerts of the PSU, fan and PCIe faults; "
                 f"{len(requests)} drain requests in all")
