"""The fuzz benchmark's silences class (issue 29, defects 1 and 10): what an operator, or a
script gone wrong, can type into `POST /v1/silences` with an operate token: regexes that
backtrack exponentially (`(.*.*.*)*X`), 10,000 matchers, a NaN duration, an expiry written
`²`, and ordinary silences. Each created silence is expired again (`DELETE`), so the table
stays small and nothing it holds outlives the run.

No silence here can mute a real alert: every one also carries `fuzz_never="1"`, a label no
alert has (last, so the hostile matchers before it still run against every alert), so the
pages the run counts are never hidden by its own silences."""

from __future__ import annotations

import json
import random

import httpx

from bench.fuzz_run_surfaces import ClassStats, Target, call

NEVER = 'fuzz_never="1"'
PACE_S = 2.0  # a silence and its expiry each 2 s: within the token's 60 writes a minute
# Nested quantifiers over a value that cannot end the way the pattern asks: exponential work
# for a backtracking engine, linear for RE2 (Alertmanager's choice).
_HOSTILE_RE = ("(.*.*.*)*ZQZ", "(.*.*)*ZQZ", "(a|aa)*ZQZ", "((.*)*)*ZQZ", "(x+x+)+ZQZ",
               "(.*){1,32}ZQZ", "(?:.*?){20}ZQZ")
_LABELS = ("alertname", "node", "entity", "level", "instance")


def _hostile(r: random.Random) -> tuple[str, dict[str, object]]:
    """(what, the JSON body) of one silence."""
    base: dict[str, object] = {"comment": "fuzz", "duration_s": 60}
    match r.randrange(8):
        case 0 | 1:
            rx = r.choice(_HOSTILE_RE)
            return "hostile regex", {**base, "matchers": [f"{r.choice(_LABELS)}=~{rx}", NEVER]}
        case 2:
            many = [f"node=fz{i:05d}" for i in range(10_000)]
            return "10,000 matchers", {**base, "matchers": [*many, NEVER]}
        case 3:
            return "NaN duration", {"comment": "fuzz", "duration_s": float("nan"),
                                    "matchers": ["node=fz00", NEVER]}
        case 4:
            return "expiry '²'", {"comment": "fuzz", "ends_at": r.choice(("²", "1²", "²³")),
                                  "matchers": ["node=fz00", NEVER]}
        case 5:
            return "huge duration", {"comment": "fuzz", "duration_s": r.choice((1e308, 1e18)),
                                     "matchers": ["node=fz00", NEVER]}
        case 6:
            return "bad matcher", {**base, "matchers": [r.choice(("node", "=x", "node=~(",
                                                                  "level>=x", "a" * 5000)),
                                                        NEVER]}
        case _:
            return "ordinary", {**base, "matchers": ["level>=2", "node=~fz0[0-9]", NEVER]}


def run(target: Target, rng: random.Random, stats: ClassStats) -> None:
    auth = {"Authorization": f"Bearer {target.token}"}
    with httpx.Client(headers=auth) as client:
        while not target.stop.is_set():
            what, body = _hostile(rng)
            # json.dumps writes NaN as the bare token NaN, as a careless sender would.
            r = call(client, target, stats, "POST", "/v1/silences", f"silence: {what}",
                     content=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
            if r is not None and r.status_code == 201:
                stats.count(f"accepted: {what}")
                sid = r.json().get("id")
                if sid:
                    call(client, target, stats, "DELETE", f"/v1/silences/{sid}",
                         f"expire: {what}")
            target.stop.wait(PACE_S)
