"""Writes across real shard services on loopback (tests/cluster/shards.py): every sample lands
on the shard that owns its node, whichever shard was posted to, exactly once."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from collectors.agent.push import Outcome, Pusher
from collectors.arrow_batch import MEDIA_TYPE, encode
from collectors.schema import SchemaMapper
from service.api.shard_route import FORWARDED_HEADER, NODE_HEADER
from tests.cluster.shards import TOKEN, Shards
from tests.support.fleet import T0

NS = int(T0 * 1e9)
AUTH = {"Authorization": f"Token {TOKEN}"}
GPUS = 4  # per node, two values each


def lines(*hosts: str) -> str:
    return "".join(f"gpu,host={h},gpu={g} gpu_temp={40 + g}.5,ecc_sbe_volatile={g}i {NS}\n"
                   for h in hosts for g in range(GPUS))


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shards]:
    s = Shards(tmp_path_factory.mktemp("shards"))
    for sid in s.ids:
        s.start(sid)
    try:
        yield s
    finally:
        s.stop_all()


@pytest.fixture(scope="module")
def hosts(shards: Shards) -> dict[str, list[str]]:
    return shards.hosts(per_shard=12)


def _ingested(shards: Shards) -> dict[str, int]:
    return {sid: app.state.gpuhealth.pipeline.stats.samples_ingested
            for sid, app in shards.apps.items()}


def _fresh(hosts: dict[str, list[str]], sid: str) -> str:
    """A host of shard `sid` no test has written yet."""
    return hosts[sid].pop()


def test_a_write_of_another_shards_node_is_redirected(shards: Shards,
                                                      hosts: dict[str, list[str]]) -> None:
    h = _fresh(hosts, "b")
    url = shards.urls["a"] + "/write?precision=ns&db=x"
    # named in the header: redirected before the body is read
    r = httpx.post(url, content=lines(h), headers={**AUTH, NODE_HEADER: h})
    assert r.status_code == 307, r.text
    assert r.headers["location"] == shards.urls["b"] + "/write?precision=ns&db=x"
    said = r.json()
    assert said["owner"] == {"id": "b", "url": shards.urls["b"]} and h in said["detail"]
    # not named: read, and redirected all the same (line protocol, gzip, and Arrow)
    for body, headers in ((lines(h).encode(), {}),
                          (gzip.compress(lines(h).encode()), {"Content-Encoding": "gzip"}),
                          (encode(SchemaMapper().parse(lines(h))), {"Content-Type": MEDIA_TYPE})):
        r = httpx.post(url, content=body, headers={**AUTH, **headers})
        assert r.status_code == 307 and r.headers["location"].startswith(shards.urls["b"])
    assert shards.holders(f"{h}:gpu0") == []  # nothing stored anywhere yet
    # a write without a valid token is the routes' 401, naming no shard
    assert httpx.post(url, content=lines(h), headers={NODE_HEADER: h}).status_code == 401


def test_the_agent_follows_the_redirect_and_keeps_the_owner(
        shards: Shards, hosts: dict[str, list[str]]) -> None:
    for arrow in (True, False):
        h = _fresh(hosts, "c")
        pusher = Pusher(shards.urls["a"] + "/write", token=TOKEN, host=h, arrow=arrow)
        before = _ingested(shards)
        res = pusher.push(gzip.compress(lines(h).encode()))
        assert res.outcome is Outcome.SENT and res.status == 204, res
        assert pusher.url == shards.urls["c"] + "/write"  # remembered
        assert shards.holders(f"{h}:gpu3") == ["c"]
        after = _ingested(shards)
        assert {sid: after[sid] - before[sid] for sid in after} == {"a": 0, "b": 0,
                                                                     "c": 2 * GPUS}
        assert pusher.sent_arrow == int(arrow)
        pusher.close()


def test_a_mixed_body_is_split_and_every_sample_stored_once(
        shards: Shards, hosts: dict[str, list[str]]) -> None:
    for fmt in ("lines", "gzip", "arrow"):
        mine = {sid: _fresh(hosts, sid) for sid in shards.ids}
        text = lines(*mine.values())
        body, headers = {
            "lines": (text.encode(), {}),
            "gzip": (gzip.compress(text.encode()), {"Content-Encoding": "gzip"}),
            "arrow": (gzip.compress(encode(SchemaMapper().parse(text))),
                      {"Content-Type": MEDIA_TYPE, "Content-Encoding": "gzip"}),
        }[fmt]
        before = _ingested(shards)
        r = httpx.post(shards.urls["a"] + "/api/v2/write?bucket=x&precision=ns", content=body,
                       headers={**AUTH, **headers})
        assert r.status_code == 204, (fmt, r.text)
        for sid, h in mine.items():
            assert all(shards.holders(f"{h}:gpu{g}") == [sid] for g in range(GPUS)), fmt
        after = _ingested(shards)
        assert {sid: after[sid] - before[sid] for sid in after} == {
            sid: 2 * GPUS for sid in shards.ids}, fmt


def test_refused_lines_of_a_split_body_are_named(shards: Shards,
                                                 hosts: dict[str, list[str]]) -> None:
    a, b = _fresh(hosts, "a"), _fresh(hosts, "b")
    text = lines(a, b) + "gpu,host=-bad,gpu=0 gpu_temp=1 1\nnot line protocol\n"
    r = httpx.post(shards.urls["b"] + "/write", content=text, headers=AUTH)
    assert r.status_code == 400, r.text
    said = r.json()
    # b's own values kept (the 400 counts them), a's part stored whole (its 204 has no count)
    assert said["accepted"] == 2 * GPUS and said["rejected"] == 2
    assert said["stored_whole"] == ["a"] and said["error"].endswith("dropped=2")
    assert {x["shard"] for x in said["rejections"]} == {"b"}  # bad names stay here, refused
    assert shards.holders(f"{a}:gpu0") == ["a"] and shards.holders(f"{b}:gpu0") == ["b"]


def test_a_forwarded_part_is_never_forwarded_again(shards: Shards,
                                                   hosts: dict[str, list[str]]) -> None:
    h = _fresh(hosts, "c")
    r = httpx.post(shards.urls["a"] + "/write", content=lines(h),
                   headers={**AUTH, FORWARDED_HEADER: "b"})
    assert r.status_code == 421, r.text
    assert r.json()["owner"]["id"] == "c" and "location" not in r.headers
    assert shards.holders(f"{h}:gpu0") == []
    # our agent meeting it (say, a proxy that forwarded it) waits and sends again
    pusher = Pusher(shards.urls["a"] + "/write", token=TOKEN, arrow=False)
    pusher.headers[FORWARDED_HEADER] = "b"
    res = pusher.push(gzip.compress(lines(h).encode()))
    assert res.outcome is Outcome.RETRY and res.status == 421
    pusher.close()


def test_a_dead_owner_gives_503_and_the_resend_loses_nothing(
        shards: Shards, hosts: dict[str, list[str]], tmp_path: Path) -> None:
    mine = {sid: _fresh(hosts, sid) for sid in shards.ids}
    body = gzip.compress(lines(*mine.values()).encode())
    headers = {**AUTH, "Content-Encoding": "gzip"}
    shards.stop("c")
    try:
        r = httpx.post(shards.urls["a"] + "/write", content=body, headers=headers)
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "5" and r.json()["failed"] == {"c": None}
        # the agent, told its owner is gone, goes back to the configured URL and waits
        h = _fresh(hosts, "c")
        pusher = Pusher(shards.urls["a"] + "/write", token=TOKEN, host=h, arrow=False)
        assert pusher.push(gzip.compress(lines(h).encode())).outcome is Outcome.RETRY
        assert pusher.url == shards.urls["a"] + "/write"
    finally:
        shards.start("c")
    before = _ingested(shards)
    r = httpx.post(shards.urls["a"] + "/write", content=body, headers=headers)  # resent whole
    assert r.status_code == 204, r.text
    for sid, h in mine.items():
        assert shards.holders(f"{h}:gpu{GPUS - 1}") == [sid]
    after = _ingested(shards)
    assert after["c"] - before["c"] == 2 * GPUS  # c's part, stored after the restart
    assert pusher.push(gzip.compress(lines(h).encode())).status == 204
    assert pusher.url == shards.urls["c"] + "/write"
    pusher.close()
