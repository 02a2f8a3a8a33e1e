"""The fuzz benchmark's auth-failure class (issue 29, defect 5): one client at the run's own
address sends wrong bearer tokens (and `X-Forwarded-For` addresses it makes up) about five
times a second, while the valid clients at that same address go on: reads with the run's
operate token and anonymous reads. A valid request refused (401, 403 or 429) while the
guesser is refused is counted (`valid_refused`); the guesser's own answers are expected to
be 401 or 429."""

from __future__ import annotations

import random
import secrets

import httpx

from bench.fuzz_run_surfaces import ClassStats, Target, call

GUESS_S = 0.2  # a wrong token every 0.2 s
VALID_EVERY = 5  # a valid read after every 5 guesses
_READS = ("/v1/silences", "/v1/alerts", "/v1/fleet")
_REFUSED = (401, 403, 429)


def run(target: Target, rng: random.Random, stats: ClassStats) -> None:
    with httpx.Client() as client:
        k = 0
        while not target.stop.is_set():
            headers = {"Authorization": f"Bearer {secrets.token_urlsafe(rng.randint(8, 48))}"}
            if rng.random() < 0.5:  # a forged client address: must not choose whose budget
                headers["X-Forwarded-For"] = (f"{rng.randrange(1, 255)}.{rng.randrange(256)}."
                                              f"{rng.randrange(256)}.{rng.randrange(1, 255)}")
            call(client, target, stats, "GET", rng.choice(_READS), "bad token",
                 headers=headers)
            k += 1
            if k % VALID_EVERY == 0:
                _valid(client, target, rng, stats)
            target.stop.wait(GUESS_S)


def _valid(client: httpx.Client, target: Target, rng: random.Random,
           stats: ClassStats) -> None:
    for headers, who in (({"Authorization": f"Bearer {target.token}"}, "valid token"),
                         ({}, "anonymous")):
        r = call(client, target, stats, "GET", rng.choice(_READS), f"read: {who}",
                 headers=headers)
        stats.count("valid_sent")
        if r is not None and r.status_code in _REFUSED:
            stats.count("valid_refused")
