"""bench.cluster's invariants, judged from what the receiver got (every notification and every
remediation call), what the senders' ledgers say was pushed, what InfluxDB holds and what the
runs measured. The soak's checks are reused where they say the same thing
(bench.soak_verdict)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench import soak_verdict
from bench.cluster_agents import Failure
from bench.cluster_failover import FailoverResult, Round
from bench.cluster_probe import Seen, double_claims, notified_moved, stale_claims, wrong_holder
from bench.cluster_rebalance import RebalanceResult
from bench.cluster_sharded import ShardedResult
from bench.soak_ledger import Push, read, sent_samples
from bench.soak_receiver import Received
from bench.soak_verdict import Check

FAILOVER_LIMIT_S = 30.0  # the bound: a standby takes over within 30 s
TICK_SLACK_S = 1.0  # a new leader pages within two ticks of taking the lease, plus this
CONTINUED_ANSWER_S = 5.0  # a continued leader says it no longer leads within this
SAMPLE_CHECKS = ("samples lost in InfluxDB", "samples doubled in InfluxDB",
                 "refused beyond the bad lines")


def pages(notes: list[Received], failures: Sequence[Failure]) -> list[Check]:
    """Duplicates: a message delivered twice (same webhook-id) or an alert's firing carried by
    more than one message. Lost resolves: a firing alert whose resolve never came."""
    ids = Counter(n.webhook_id for n in notes if n.webhook_id)
    firing: Counter[tuple[str, str]] = Counter()
    resolved: set[tuple[str, str]] = set()
    for n in notes:
        for a in n.body.get("alerts", []):
            key = (str(a.get("fingerprint")), str(a.get("startsAt")))
            if a.get("status") == "firing":
                firing[key] += 1
            else:
                resolved.add(key)
    dup = sum(c - 1 for c in ids.values() if c > 1) + sum(c - 1 for c in firing.values()
                                                           if c > 1)
    lost = [k for k in firing if k not in resolved]
    paged = {str(a.get("labels", {}).get("entity")) for n in notes
             for a in n.body.get("alerts", []) if a.get("status") == "firing"}
    missed = sorted({f.entity for f in failures} - paged)
    return [
        Check("pages: duplicates", dup == 0, str(dup),
              f"{len(notes)} messages, {len(firing)} alerts paged"),
        Check("pages: lost resolves", not lost, f"{len(lost)} of {len(firing)}"),
        Check("every injected hard failure paged", not missed,
              f"{len(failures) - len(missed)} of {len(failures)}", ", ".join(missed[:5])),
    ]


def actions(calls: list[Received]) -> Check:
    """The hook's log: each remediation action must have been run once."""
    runs = Counter(str(c.body.get("action_id")) for c in calls
                   if c.body.get("op", "drain") != "release")
    twice = sorted(a for a, c in runs.items() if c > 1)
    return Check("remediation actions run twice", not twice, str(len(twice)),
                 f"{len(runs)} actions run" + (f"; twice: {', '.join(twice[:3])}"
                                               if twice else ""))


def failover(res: FailoverResult, rounds: int) -> list[Check]:
    """`rounds`: the rounds planned (kills and the other kinds). Each round-level failure
    breaks a check of its own: no notification after the loss, a failure not paged, a resolve
    not delivered, a page carried twice, a page later than two ticks after the new leader took
    the lease."""
    lease = res.times("lease_s")
    kept = sum(r.breaker_kept for r in res.rounds)
    epochs_up = all(b > a for a, b in zip(res.epochs, res.epochs[1:], strict=False))
    s = res.summary()
    # A replica still starting takes the lease when it is up: the 30-s bound is for a standby.
    bounded = [x for r in res.rounds if r.kind != "starting" and (x := r.lease_s) is not None]
    bound = 2 * res.step_s + TICK_SLACK_S
    late = [f"{i}:{r.kind}" for i, r in enumerate(res.rounds, 1)
            if (x := r.page_after_lease_s) is None or x > bound]
    unpaged = [f"{i}:{r.kind}" for i, r in enumerate(res.rounds, 1) if r.paged < len(r.failures)]
    unresolved = [f"{i}:{r.kind}" for i, r in enumerate(res.rounds, 1)
                  if r.resolved < len(r.failures)]
    doubled = [f"{i}:{r.kind}" for i, r in enumerate(res.rounds, 1) if r.duplicates]
    silent = [f"{i}:{r.kind}" for i, r in enumerate(res.rounds, 1) if r.notify_s is None]
    n = len(res.rounds)
    out = [
        Check("failovers completed", len(lease) == rounds == n, f"{len(lease)} of {rounds}"),
        Check(f"lease taken over within {FAILOVER_LIMIT_S:g} s",
              all(x <= FAILOVER_LIMIT_S for x in bounded),
              f"max {round(max(bounded), 2) if bounded else None} s",
              f"median {s['lease_s']['median']} s"),
        Check("first notification after the kill", not silent and n > 0,
              f"max {s['notify_s']['max']} s", f"median {s['notify_s']['median']} s"
              + (f"; none in rounds {', '.join(silent)}" if silent else "")),
        Check("failover rounds: every failure paged", not unpaged and n > 0,
              f"{n - len(unpaged)} of {n} rounds", ", ".join(unpaged)),
        Check("failover rounds: every resolve delivered", not unresolved and n > 0,
              f"{n - len(unresolved)} of {n} rounds", ", ".join(unresolved)),
        Check("failover rounds: no page carried twice", not doubled,
              f"{sum(r.duplicates for r in res.rounds)}", ", ".join(doubled)),
        Check("paged within two ticks of taking the lease", not late and n > 0,
              f"max {s['page_after_lease_s']['max']} s",
              f"limit {bound:g} s; median {s['page_after_lease_s']['median']} s"
              + (f"; late or never in rounds {', '.join(late)}" if late else "")),
        Check("breaker state intact across the kill", kept == n, f"{kept} of {n}"),
        Check("leader epoch rose each round", epochs_up, " ".join(map(str, res.epochs))),
    ]
    for r in res.rounds:
        if r.kind == "starting":
            out.append(Check("starting round: the replica still starting took the lease",
                             bool(r.still_starting) and r.to != "" and r.to != r.victim,
                             r.to or "nobody", f"it answered /healthz at the kill: "
                             f"{'no' if r.still_starting else 'yes'}"))
        if r.kind == "partition":
            out += partition(r)
    return out


def partition(r: Round) -> list[Check]:
    """Fencing: the paused leader sends nothing once the next one took the lease, and says it
    does not lead as soon as it runs again."""
    return [
        Check("partition: the old leader sent nothing after the new lease",
              r.acquired_at is not None and r.old_sent_after_lease == 0
              and r.old_sent_after_continue == 0,
              f"{r.old_sent_after_lease} after the lease, {r.old_sent_after_continue} after "
              "SIGCONT", "notifications whose externalURL is the old leader's"),
        Check("partition: the old leader says it does not lead once continued",
              r.answer_leading is False and r.answer_s is not None
              and r.answer_s <= CONTINUED_ANSWER_S,
              f"{'leading' if r.answer_leading else 'not leading'} after "
              f"{r.answer_s if r.answer_s is None else round(r.answer_s, 1)} s",
              f"limit {CONTINUED_ANSWER_S:g} s"),
    ]


def truth(seen: list[Seen], res: FailoverResult) -> list[Check]:
    """What the replicas said about who leads (bench.cluster_probe), against what the rounds
    measured."""
    taken = [a for r in res.rounds if (a := r.acquired_at) is not None]
    stale = stale_claims(seen, taken)
    doubles = double_claims(seen)
    wrong = wrong_holder(seen)
    claims = sum(s.claims for s in seen)
    paged = [r for r in res.rounds if r.page_at is not None]
    unmoved = [f"{i}:{r.kind}" for i, r in enumerate(res.rounds, 1) if r.page_at is not None
               and not notified_moved(seen, r.lost_at, r.page_at, r.ended)]
    return [
        Check("/v1/cluster: never two leaders", not stale and doubles == 0 and claims > 0,
              f"{len(stale)} stale claims, {doubles} sweeps with two",
              f"{len(seen)} answers, {claims} claiming the lead"
              + "".join(f"; {s.replica} at {s.asked:.1f}" for s in stale[:3])),
        Check("/v1/cluster: the replica leading holds the lease", not wrong and claims > 0,
              f"{len(wrong)} of {sum(s.leading for s in seen)}",
              "".join(f"{s.replica} said it leads, the lease names {s.holder or 'nobody'}; "
                      for s in wrong[:3])),
        Check("/v1/cluster: last_notified moved after each round's page",
              not unmoved and len(paged) == len(res.rounds) > 0,
              f"{len(paged) - len(unmoved)} of {len(res.rounds)} rounds", ", ".join(unmoved)),
    ]


def sharding(res: ShardedResult, gpus: int) -> list[Check]:
    owned = Counter(res.owners.values())
    wrong = {s: (held, owned[s] * gpus) for s, held in res.gpus_held.items()
             if held != owned[s] * gpus}
    redirects = sum(d.get("redirects_307", 0) for d in res.per_shard.values())
    return [
        Check("each node on its owner shard only", not wrong and bool(res.gpus_held),
              f"{len(wrong)} shards wrong",
              "; ".join(f"{s}: holds {h} GPUs, owns {o}" for s, (h, o) in wrong.items())),
        Check("wrong-shard pushes redirected", redirects > 0, f"{redirects:g} 307s"),
    ]


def rebalance(res: RebalanceResult) -> list[Check]:
    """A shard joining takes nodes only for itself; every move ends with each node on exactly
    one shard; the joined shard warm-started its nodes; a killed shard's nodes moved within
    lease_ttl + renew."""
    join = next((m for m in res.moves if m.what.startswith("join")), None)
    killed = next((m for m in res.moves if "SIGKILL" in m.what), None)
    elsewhere = sorted({o for o in join.moved.values() if o != res.added}) if join else []
    unsettled = [m.what for m in res.moves if m.settled_s is None]
    return [
        Check("shard added: nodes moved to it only", join is not None and bool(join.moved)
              and not elsewhere and join.first_samples_s is not None,
              f"{len(join.moved) if join else 0} of {join.nodes if join else 0} nodes",
              f"map after {join.map_s} s, first samples after {join.first_samples_s} s"
              + (f"; also to {', '.join(elsewhere)}" if elsewhere else "") if join else
              "the shard never joined"),
        Check("moved nodes warm-started from InfluxDB", res.warm_started,
              "yes" if res.warm_started else "no log line"),
        Check("every node on exactly one shard after each move", not unsettled
              and len(res.moves) >= 4, f"{len(res.moves) - len(unsettled)} of {len(res.moves)}",
              "; ".join(unsettled)),
        Check("killed shard's nodes moved within lease ttl + renew", killed is not None
              and killed.map_s is not None and killed.map_s <= res.limit_s,
              f"{killed.map_s if killed else None} s", f"limit {res.limit_s:g} s"),
    ]


def samples(ledgers: list[Path], influx_url: str, since: float) -> list[Check]:
    """Every pushed sample in InfluxDB exactly once (the soak's reading of both sides)."""
    pushes: list[Push] = []
    for p in ledgers:
        pushes += read(p, p.stem)
    stored = soak_verdict.influx_counts(influx_url, since)
    got = soak_verdict.samples(sent_samples(pushes), stored, pushes)
    return [c for c in got if c.name in SAMPLE_CHECKS]
