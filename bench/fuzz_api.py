"""Hostile API requests for the fuzz benchmark (issue 29, defect 10): one generator per class of
request that once answered 500, each a (method, path, body) a service must answer 4xx (or 2xx
where the request is harmless). bench.fuzz sends them beside its /write bodies; the tests send
a few of each (tests/api/test_hostile_requests.py).

Classes (`ApiRequest.kind`):

- `big_id`: alert ids past 64 bits, negative or float-like, on every alert-id route;
- `big_gpu`: GPU, link and port keys whose index no device has (10**30, 1e400);
- `forged_cursor`: cursors with an unkeyed digest (the old format), another key, keys past a
  store's range, NaN, a listing's name that is not the route's, or no base64 at all;
- `non_finite`: NaN, Infinity and 1e400 in JSON bodies (verdicts, acknowledgements, silences);
- `big_query`: integer and time query parameters past their range;
- `verdict_link`: signed-link pages and forms with forged, huge or missing exp and sig;
- `boolean_field`: /write lines with booleans on counters and gauges (defect 9), which must be
  refused and never raise a level or drain a node.

The generator is deterministic for a seed. Mutating routes need an operate (or admin) token:
the caller adds its Authorization header; without one they answer 401, which proves less."""

from __future__ import annotations

import base64
import hashlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

S = 10**9
HUGE_INTS = ("99999999999999999999", "-99999999999999999999", str(10**30), str(2**63),
             str(-(2**63) - 1), "1e400", "-0", "0x10", "١٢")  # Arabic-Indic digits too
NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e400", "-1e400")
LISTINGS = ("alerts", "labels", "silences", "actions", "groups", "fleet", "nodes:risk:desc")
ROUTE_OF = {"alerts": "/v1/alerts", "labels": "/v1/labels", "silences": "/v1/silences",
            "actions": "/v1/actions", "groups": "/v1/groups", "fleet": "/v1/fleet",
            "nodes:risk:desc": "/v1/nodes"}


@dataclass(frozen=True, slots=True)
class ApiRequest:
    method: str
    path: str
    body: str | None  # JSON text (non-finite numbers written as Python's JSON reader takes
    kind: str         # them), a form, line protocol, or None


Gen = Callable[[random.Random, float], ApiRequest]


def big_id(r: random.Random, now: float) -> ApiRequest:
    n = r.choice(HUGE_INTS)
    method, path, body = r.choice([
        ("GET", f"/v1/alerts/{n}", None), ("GET", f"/v1/alerts/{n}/verdicts", None),
        ("POST", f"/v1/alerts/{n}/ack", '{"comment": "fuzz"}'),
        ("POST", f"/v1/alerts/{n}/verdict", '{"verdict": "unknown"}'),
        ("GET", f"/verdict/{n}?exp=1&sig=x", None), ("POST", f"/verdict/{n}", "exp=1&sig=x"),
        ("GET", f"/v1/actions/{n}", None), ("DELETE", f"/v1/silences/{n}", None)])
    return ApiRequest(method, path, body, "big_id")


def big_gpu(r: random.Random, now: float) -> ApiRequest:
    n = r.choice(HUGE_INTS)
    path = r.choice([f"/v1/gpus/n001:gpu{n}", f"/v1/gpus/n001:gpu{n}/metrics",
                     f"/v1/gpus/n001:gpu{n}/risk", f"/v1/links/n001:gpu0:nvlink{n}/metrics",
                     f"/v1/ports/n001:mlx5_0:{n}/metrics", f"/v1/nodes/n001:gpu{n}"])
    return ApiRequest("GET", path, None, "big_gpu")


def _cursor(listing: str, key: list[object], digest: Callable[[bytes], bytes]) -> str:
    payload = json.dumps([listing, key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(digest(payload) + payload).rstrip(b"=").decode()


def forged_cursor(r: random.Random, now: float) -> ApiRequest:
    listing = r.choice(LISTINGS)
    key: list[object] = r.choice([
        [1.0, 10**20], [1e308, "x"], [float("nan"), 1], [float("inf"), "n001"],
        [-(2**63) - 1, 1], ["n001"], [], [None, None], [[1], {"a": 1}]])
    cursor = r.choice([
        _cursor(listing, key, lambda p: hashlib.sha256(p).digest()[:8]),  # the old, unkeyed
        _cursor(listing, key, lambda p: hashlib.sha256(b"guess" + p).digest()[:16]),
        base64.urlsafe_b64encode(r.randbytes(r.randint(1, 64))).decode().rstrip("="),
        "!!", "A" * r.randint(1, 200)])
    route = ROUTE_OF[r.choice(LISTINGS)]  # often another listing's route
    return ApiRequest("GET", f"{route}?cursor={cursor}", None, "forged_cursor")


def non_finite(r: random.Random, now: float) -> ApiRequest:
    x = r.choice(NON_FINITE)
    path, body = r.choice([
        ("/v1/alerts/1/verdict", f'{{"verdict": "failed", "mode": "M1_hbm", "failed_at": {x}}}'),
        ("/v1/alerts/1/ack", f'{{"comment": {x}}}'),
        ("/v1/silences", f'{{"matchers": ["node=n001"], "comment": "f", "duration_s": {x}}}'),
        ("/v1/silences", f'{{"matchers": ["node=n001"], "comment": "f", "ends_at": {x}}}'),
        ("/v1/silences", f'{{"matchers": ["node=n001"], "comment": "f", "starts_at": {x}, '
                         '"duration_s": 60}'),
        ("/v1/breaker/reset", f'{{"comment": {x}}}'),
        ("/v1/models/promote", f'{{"force": {x}}}')])
    return ApiRequest("POST", path, body, "non_finite")


def big_query(r: random.Random, now: float) -> ApiRequest:
    n = r.choice(HUGE_INTS + NON_FINITE + ("1²", "²"))
    path = r.choice([f"/v1/alerts?limit={n}", f"/v1/alerts?level={n}", f"/v1/fleet?top={n}",
                     f"/v1/nodes?limit={n}", f"/v1/alerts?since={n}", f"/v1/labels?until={n}",
                     f"/v1/gpus/n001:gpu0/metrics?step={n}",
                     f"/v1/gpus/n001:gpu0/metrics?from={n}", f"/v1/alerts?offset={n}"])
    return ApiRequest("GET", path, None, "big_query")


def verdict_link(r: random.Random, now: float) -> ApiRequest:
    exp = r.choice([str(int(now) + 3600), "99999999999999999999", "-1", "", "1e9", "NaN"])
    sig = r.choice(["", "x", "A" * 43, base64.urlsafe_b64encode(r.randbytes(32)).decode()])
    by = r.choice(["", "mallory", "link:admin", "x" * 300])
    query = f"exp={exp}&sig={sig}&by={by}"
    if r.random() < 0.5:
        return ApiRequest("GET", f"/verdict/1?{query}", None, "verdict_link")
    form = f"{query}&verdict={r.choice(['failed', 'false_alarm', 'x'])}&name={by}"
    return ApiRequest("POST", "/verdict/1", form, "verdict_link")


def boolean_field(r: random.Random, now: float) -> ApiRequest:
    ts = int(now * S)
    word = r.choice(["true", "t", "T", "TRUE", "True", "false", "F"])
    line = r.choice([
        f"gpu,host=fz00,gpu={r.randrange(8)} ecc_dbe_volatile={word},gpu_temp=40 {ts}",
        f"gpu,host=fz00,gpu={r.randrange(8)} retired_pages_dbe={word} {ts}",
        f"nvlink,host=fz00,gpu=0,link={r.randrange(18)} nvlink_crc_flit={word} {ts}",
        f"ib_port,host=fz00,device=mlx5_0,port=1 ib_state={word},ib_link_downed={word} {ts}",
        f"prometheus,Hostname=fz00,gpu=0 DCGM_FI_DEV_ECC_DBE_VOL_TOTAL={word} {ts}",
        f"DCGM_FI_DEV_XID_ERRORS,Hostname=fz00,gpu=0 gauge={word} {ts}"])
    return ApiRequest("POST", "/write", line, "boolean_field")


CLASSES: tuple[Gen, ...] = (big_id, big_gpu, forged_cursor, non_finite, big_query,
                            verdict_link, boolean_field)


def hostile_requests(seed: int, count: int, now: float | None = None) -> Iterator[ApiRequest]:
    """`count` requests, the classes in turn (so every class is covered from the first few)."""
    r = random.Random(seed)
    t = 1.7e9 if now is None else now
    for i in range(count):
        yield CLASSES[i % len(CLASSES)](r, t)
