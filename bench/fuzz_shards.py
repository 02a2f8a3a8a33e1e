"""Hostile shard headers (issue 29, defect 6): writes to one shard of a sharded service whose
`X-Gpuhealth-Node` and `X-Gpuhealth-Forwarded-By` headers lie, are malformed or repeated,
with bodies that hold other shards' nodes (with a double-bit ECC error, so a node scored
on the wrong shard would page and drain there). `ShardMixer` generates them for any shard
map (bench.fuzz can mix them in); `python -m bench.fuzz_shards` runs them against two real
shards on loopback, remediation in auto mode, and checks after scoring that:

- no answer is a 5xx, and a write with a foreign node is never a 204 unless it was split
  and forwarded to the owner (the owner then holds it);
- the shard written to holds, alerts on and drains none of the other shard's nodes.

    python -m bench.fuzz_shards [--inputs 2000] [--seed 29] [--json]

Exit 0 when every check holds, 1 when one is missed."""

from __future__ import annotations

import argparse
import gzip
import json
import random
import stat
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

NODE = "X-Gpuhealth-Node"
FORWARDED = "X-Gpuhealth-Forwarded-By"
S = 10**9


@dataclass(slots=True)
class ShardRequest:
    body: bytes
    headers: list[tuple[str, str]]  # in order, repeats kept (a header given twice)
    kind: str
    foreign: list[str] = field(default_factory=list)  # other shards' nodes the body holds


def _lines(host: str, ts: float, dbe: int) -> str:
    return "".join(f"gpu,host={host},gpu={g} gpu_temp=50,ecc_dbe_volatile={dbe}i "
                   f"{int(ts * S)}\n" for g in range(2))


class ShardMixer:
    """Requests for shard `local` given hosts per shard id (`hosts[sid]`, several each)."""

    KINDS = ("own-header-foreign-body", "foreign-header", "header-list", "header-twice",
             "header-junk", "header-case", "forged-forward", "forged-forward-unknown",
             "gzip-cut", "arrow-own-header", "mixed-no-header")

    def __init__(self, seed: int, local: str, hosts: dict[str, list[str]]) -> None:
        self.r = random.Random(seed)
        self.local = local
        self.own = hosts[local]
        self.others = [h for sid, hs in hosts.items() if sid != local for h in hs]
        self.other_shards = sorted(sid for sid in hosts if sid != local)
        self.counts: Counter[str] = Counter()

    def request(self, now: float) -> ShardRequest:
        r = self.r
        kind = r.choice(self.KINDS)
        self.counts[kind] += 1
        own, foreign = r.choice(self.own), r.sample(self.others, k=r.randint(1, 3))
        text = _lines(own, now, 0) + "".join(_lines(h, now, 1) for h in foreign)
        body = text.encode()
        heads: list[tuple[str, str]] = [(NODE, own)]
        match kind:
            case "foreign-header":  # names a foreign node, body of this shard's: a redirect
                heads = [(NODE, foreign[0])]
                body, foreign = _lines(own, now, 0).encode(), []
            case "header-list":
                heads = [(NODE, ",".join([own, *foreign]))]
            case "header-twice":
                heads = [(NODE, own), (NODE, foreign[0])]
            case "header-junk":
                heads = [(NODE, r.choice(("", "*", "-bad", "a" * 300, "ñode", own.upper(),
                                          f"{own}\t", "..", own + ".")))]
            case "header-case":
                heads = [(NODE.upper(), own)]
            case "forged-forward":
                heads = [(NODE, own), (FORWARDED, r.choice(self.other_shards))]
            case "forged-forward-unknown":
                heads = [(FORWARDED, r.choice(("", "zz", self.local, "a" * 200)))]
            case "gzip-cut":
                body = gzip.compress(body)[:-r.randint(1, 8)]
                heads.append(("Content-Encoding", "gzip"))
            case "arrow-own-header":
                from collectors.arrow_batch import MEDIA_TYPE, encode
                from collectors.schema import SchemaMapper

                body = encode(SchemaMapper().parse(text))
                heads.append(("Content-Type", MEDIA_TYPE))
            case "mixed-no-header":
                heads = []
        return ShardRequest(body, heads, kind, foreign)


@dataclass
class Report:
    requests: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    by_kind: dict[str, int] = field(default_factory=dict)
    status_5xx: int = 0
    foreign_held: int = 0  # other shards' nodes the written shard holds at the end
    foreign_alerts: int = 0
    drains: int = 0
    forwarded_lost: int = 0  # foreign nodes a 204 claimed stored that their owner lacks
    send_s: float = 0.0
    missed: list[str] = field(default_factory=list)


def run(n: int, seed: int, root: Path) -> Report:
    import httpx

    from tests.cluster.shards import TOKEN, Shards
    from tests.support.fleet import T0

    class Acting(Shards):
        def settings(self, sid: str) -> Any:
            base = super().settings(sid)
            d = self.root / sid
            d.mkdir(parents=True, exist_ok=True)
            hook = d / "drain.sh"
            hook.write_text(f'#!/bin/sh\necho "$@" >> "{d / "drains.log"}"\n')
            hook.chmod(hook.stat().st_mode | stat.S_IEXEC)
            return base.model_copy(update={"remediation": base.remediation.model_validate({
                "mode": "auto", "hook": "command", "breaker_max_fraction": 1.0,
                "hook_config": {"drain": [str(hook), "drain", "{node}"],
                                "release": [str(hook), "release", "{node}"]}})})

    shards = Acting(root, ids=("a", "b"))
    rep = Report()
    for sid in shards.ids:
        shards.start(sid)
    try:
        hosts = shards.hosts(per_shard=40)
        mixer = ShardMixer(seed, "a", hosts)
        stored: set[str] = set()  # foreign nodes a 204 said were stored (forwarded)
        t0 = time.monotonic()
        with httpx.Client(timeout=30) as client:
            for i in range(n):
                req = mixer.request(T0 - 300 + 5 * (i % 60))
                heads = [(b"Authorization", f"Token {TOKEN}".encode()),
                         *((k.encode(), v.encode("utf-8")) for k, v in req.headers)]
                try:
                    resp = client.post(shards.urls["a"] + "/write?precision=ns",
                                       content=req.body, headers=heads)
                    status = str(resp.status_code)
                except httpx.HTTPError as exc:  # a header the client itself refuses to send
                    status = f"client:{type(exc).__name__}"
                rep.requests += 1
                rep.by_status[status] = rep.by_status.get(status, 0) + 1
                rep.status_5xx += status.startswith("5")
                if status == "204":
                    stored.update(req.foreign)
                if i % 50 == 49:
                    shards.apps["a"].state.gpuhealth.pipeline.tick(T0 + 1)
        rep.send_s = time.monotonic() - t0
        pipe = shards.apps["a"].state.gpuhealth.pipeline
        pipe.tick(T0 + 1)
        if pipe.controller is not None:
            pipe.controller.wait(10)
        held = set(pipe.store.registry.nodes)
        rep.foreign_held = len(held & set(hosts["b"]))
        rep.foreign_alerts = sum(len(pipe.alerts.find(node=h, limit=10)) for h in hosts["b"])
        log = root / "a" / "drains.log"
        rep.drains = len(log.read_text().splitlines()) if log.exists() else 0
        owner = set(shards.apps["b"].state.gpuhealth.pipeline.store.registry.nodes)
        rep.forwarded_lost = len(stored - owner)
        rep.by_kind = dict(mixer.counts)
    finally:
        shards.stop_all()
    for name in ("status_5xx", "foreign_held", "foreign_alerts", "drains", "forwarded_lost"):
        if getattr(rep, name):
            rep.missed.append(f"{name} = {getattr(rep, name)} (goal 0)")
    return rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rep = run(args.inputs, args.seed, Path(tmp))
    if args.json:
        print(json.dumps(asdict(rep), indent=2))
    else:
        print(f"{rep.requests} hostile shard-header writes in {rep.send_s:.1f} s: statuses "
              f"{dict(sorted(rep.by_status.items()))}; foreign nodes held {rep.foreign_held}, "
              f"alerted {rep.foreign_alerts}, drains {rep.drains}, forwarded but lost "
              f"{rep.forwarded_lost}")
        for m in rep.missed:
            print(f"MISSED: {m}")
    return 1 if rep.missed else 0


if __name__ == "__main__":
    sys.exit(main())
