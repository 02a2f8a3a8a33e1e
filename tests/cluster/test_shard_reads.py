"""Reads across real shard services on loopback (tests/cluster/shards.py): any shard answers
every fleet read for the whole fleet (service.api.peers, service.api.fleet_merge)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.api import cursor_key
from service.api.peers import LOCAL_HEADER
from service.settings import Settings
from tests.cluster.shards import TOKEN, Shards
from tests.console.cdp import CHROMIUM, Browser
from tests.console.serve import unexpected
from tests.support.fleet import T0

NS = int(T0 * 1e9)
WRITE = {"Authorization": f"Token {TOKEN}"}
GPUS = 2


class ReadShards(Shards):
    """Shards whose reads need a token (api.read_requires_token)."""

    def settings(self, sid: str) -> Settings:
        s = super().settings(sid)
        s.api.read_requires_token = True
        return s


def lines(host: str, dbe: int) -> str:
    """`host`'s GPUs, the first `dbe` of them with a double-bit ECC error (a hard rule: risk
    1 and an alert each)."""
    return "".join(f"gpu,host={host},gpu={g} gpu_temp=50,ecc_dbe_volatile={int(g < dbe)}i "
                   f"{NS}\n" for g in range(GPUS))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ReadShards, dict[str, str],
                                                                        dict[str, list[str]]]]:
    s = ReadShards(tmp_path_factory.mktemp("shards"))
    for sid in s.ids:
        s.start(sid)
    try:
        hosts = s.hosts(per_shard=4)
        # A read token every shard knows (as a shared PostgreSQL gives it): made on a, its row
        # copied to the others' own SQLite state.
        auth = {sid: app.state.gpuhealth_auth.tokens for sid, app in s.apps.items()}
        _, secret = auth["a"].create("reader", "read", T0)
        row = auth["a"]._db.execute("SELECT id, name, scope, secret_sha256, created_at FROM "
                                    "api_tokens").fetchone()
        for sid in ("b", "c"):
            with auth[sid].transaction() as db:
                db.execute("INSERT INTO api_tokens (id, name, scope, secret_sha256, created_at) "
                           "VALUES (?,?,?,?,?)", tuple(row))
        # The fleet's cursor key likewise (service.api.cursor_key): one for every shard.
        key = cursor_key.load(s.apps["a"].state.gpuhealth.settings.storage.state_target)
        for sid in ("b", "c"):
            keys = cursor_key.KeyStore(s.apps[sid].state.gpuhealth.settings.storage.state_target)
            with keys.transaction() as db:
                db.execute("INSERT INTO api_keys (name, secret) VALUES (?, ?)",
                           ("cursor", key.hex()))
            keys.close()
        read = {"Authorization": f"Bearer {secret}"}
        # Each shard: a node at zero risk, one with one failing GPU, one with two; all
        # posted to shard a (split and forwarded by owner), then every shard scores.
        body = "".join(lines(h[0], 0) + lines(h[1], 1) + lines(h[2], 2) for h in hosts.values())
        r = httpx.post(s.urls["a"] + "/write?precision=ns", content=body, headers=WRITE)
        assert r.status_code == 204, r.text
        for app in s.apps.values():
            app.state.gpuhealth.scheduler.score_once()
        # ... and a fourth node seen after the tick: not scored yet (risk null)
        body = "".join(lines(h[3], 0) for h in hosts.values())
        r = httpx.post(s.urls["b"] + "/write?precision=ns", content=body, headers=WRITE)
        assert r.status_code == 204, r.text
        yield s, read, hosts
    finally:
        s.stop_all()


def _get(url: str, read: dict[str, str], **params: Any) -> dict[str, Any]:
    r = httpx.get(url, params=params, headers=read)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _expected(rows: list[dict[str, Any]], sort: str, order: str) -> list[str]:
    """The order one process holding every node lists them in (service.api.views)."""
    desc = order == "desc"
    if sort == "node":
        return sorted((r["node"] for r in rows), reverse=desc)
    sign = -1 if desc else 1

    def key(r: dict[str, Any]) -> tuple[float, str]:
        v = r["alerts"] if sort == "alerts" else (-1.0 if r["risk"] is None else r["risk"])
        return (sign * v, r["node"])

    return [r["node"] for r in sorted(rows, key=key)]


@pytest.mark.slow
def test_every_shard_lists_every_node_once_in_order(cluster: Any) -> None:
    s, read, hosts = cluster
    every = sorted(h for hs in hosts.values() for h in hs)
    for sid in s.ids:
        url = s.urls[sid] + "/v1/nodes"
        whole = _get(url, read, limit=1000)
        rows = whole["nodes"]
        assert sorted(r["node"] for r in rows) == every and whole["total"] == len(every)
        assert whole["missing_shards"] == [] and whole["next_cursor"] is None
        by = {r["node"]: r for r in rows}
        for h in hosts.values():  # each node as its owner scored it
            assert [by[n]["alerts"] for n in h] == [0, 1, 2, 0]
            assert [by[n]["risk"] for n in h][1:] == [1.0, 1.0, None]
            assert by[h[2]]["gpus"] == GPUS and by[h[0]]["risk"] is not None
        for sort in ("risk", "node", "alerts"):
            for order in ("asc", "desc"):
                want = _expected(rows, sort, order)
                got = _get(url, read, sort=sort, order=order, limit=1000)["nodes"]
                assert [r["node"] for r in got] == want, (sid, sort, order)
                # paged by 2 through the merged cursor: each node once, in the same order
                seen: list[str] = []
                cursor = None
                while True:
                    page = _get(url, read, sort=sort, order=order, limit=2,
                                **({"cursor": cursor} if cursor else {}))
                    assert len(page["nodes"]) <= 2
                    seen += [r["node"] for r in page["nodes"]]
                    cursor = page["next_cursor"]
                    if cursor is None:
                        break
                assert seen == want, (sid, sort, order)


def test_a_merged_cursor_works_on_every_shard(cluster: Any) -> None:
    s, read, hosts = cluster
    first = _get(s.urls["a"] + "/v1/nodes", read, sort="node", limit=5)
    rest = [_get(s.urls[sid] + "/v1/nodes", read, sort="node", limit=1000,
                 cursor=first["next_cursor"])["nodes"] for sid in s.ids]
    every = sorted(h for hs in hosts.values() for h in hs)
    assert [r["node"] for r in first["nodes"]] == every[:5]
    assert all([r["node"] for r in got] == every[5:] for got in rest)
    # a shard's own part, paged from the same cursor: its nodes after the fifth
    for sid in s.ids:
        mine = _get(s.urls[sid] + "/v1/nodes", {**read, LOCAL_HEADER: "1"}, sort="node",
                    cursor=first["next_cursor"])
        assert [r["node"] for r in mine["nodes"]] == [n for n in every[5:] if n in hosts[sid]]


def test_the_local_header_gives_the_shards_own_part(cluster: Any) -> None:
    s, read, hosts = cluster
    for sid in s.ids:
        mine = _get(s.urls[sid] + "/v1/nodes", {**read, LOCAL_HEADER: "1"}, limit=1000)
        assert sorted(r["node"] for r in mine["nodes"]) == sorted(hosts[sid])
        assert mine["total"] == len(hosts[sid])
        grid = _get(s.urls[sid] + "/v1/fleet", {**read, LOCAL_HEADER: "1"})
        assert [n["node"] for n in grid["nodes"]] == sorted(hosts[sid])
        other = next(h[1] for o, h in hosts.items() if o != sid)
        r = httpx.get(s.urls[sid] + f"/v1/nodes/{other}", headers={**read, LOCAL_HEADER: "1"})
        assert r.status_code == 404, r.text  # this shard never saw it


@pytest.mark.slow
def test_node_and_gpu_details_come_from_the_owner(cluster: Any) -> None:
    s, read, hosts = cluster
    for sid in s.ids:
        for owner, h in hosts.items():
            node = _get(s.urls[sid] + f"/v1/nodes/{h[2]}", read)
            own = _get(s.urls[owner] + f"/v1/nodes/{h[2]}", {**read, LOCAL_HEADER: "1"})
            assert node == own and node["node"] == h[2] and node["risk"] == 1.0
            assert [g["entity"] for g in node["gpus"]] == [f"{h[2]}:gpu{g}" for g in range(GPUS)]
            gpu = _get(s.urls[sid] + f"/v1/gpus/{h[1]}:gpu0", read)
            assert gpu["gpu"] == f"{h[1]}:gpu0" and gpu["explanation"][0]["rule"] == "dbe"
            # the history endpoints read the owner's own SQLite store
            risk = _get(s.urls[sid] + f"/v1/gpus/{h[1]}:gpu0/metrics", read,
                        metric="gpu_temp", **{"from": T0 - 60, "to": T0 + 60})
            assert any(v == 50.0 for v in risk["series"][0]["values"]), risk
        # an unknown node: its owner's 404, passed through
        r = httpx.get(s.urls[sid] + "/v1/nodes/nosuchnode", headers=read)
        assert r.status_code == 404 and "nosuchnode" in r.json()["detail"]


def test_the_fleet_grid_holds_every_node(cluster: Any) -> None:
    s, read, hosts = cluster
    every = sorted(h for hs in hosts.values() for h in hs)
    for sid in s.ids:
        grid = _get(s.urls[sid] + "/v1/fleet", read, top=4)
        assert [n["node"] for n in grid["nodes"]] == every and grid["total"] == len(every)
        assert all(len(n["gpus"]) == GPUS for n in grid["nodes"])
        # 9 failing GPUs across the shards, riskiest first and cut at top
        assert len(grid["riskiest"]) == 4 and all(e["risk"] == 1.0 for e in grid["riskiest"])
        failing = sorted(f"{h[i]}:gpu{g}" for h in hosts.values() for i in (1, 2)
                         for g in range(i))
        assert [e["entity"] for e in grid["riskiest"]] == failing[:4]
        paged: list[str] = []
        cursor = None
        while True:
            page = _get(s.urls[sid] + "/v1/fleet", read, limit=5,
                        **({"cursor": cursor} if cursor else {}))
            paged += [n["node"] for n in page["nodes"]]
            if (cursor := page["next_cursor"]) is None:
                break
        assert paged == every
        collectors = _get(s.urls[sid] + "/v1/collectors", read)
        assert collectors == {} or all(k.split("/")[0] in s.ids for k in collectors)


def test_a_read_token_is_required_and_passed_on(cluster: Any) -> None:
    s, read, hosts = cluster
    for path in ("/v1/nodes", "/v1/fleet", f"/v1/nodes/{hosts['b'][1]}",
                 f"/v1/gpus/{hosts['c'][1]}:gpu0", f"/v1/gpus/{hosts['c'][1]}:gpu0/risk"):
        r = httpx.get(s.urls["a"] + path)
        assert r.status_code == 401, (path, r.text)  # refused here, before any peer is asked
        assert httpx.get(s.urls["a"] + path, headers=read).status_code == 200, path
    # a token only shard a knows: the others refuse it, so the fleet cannot be read
    auth = s.apps["a"].state.gpuhealth_auth.tokens
    _, only_a = auth.create("a-only", "read", T0)
    mine = {"Authorization": f"Bearer {only_a}"}
    r = httpx.get(s.urls["a"] + "/v1/nodes", headers=mine)
    assert r.status_code == 503 and r.json()["missing"] == {"b": "answered 401",
                                                            "c": "answered 401"}
    r = httpx.get(s.urls["a"] + f"/v1/nodes/{hosts['b'][1]}", headers=mine)
    assert r.status_code == 401 and "www-authenticate" in r.headers  # b's own answer
    assert httpx.get(s.urls["a"] + f"/v1/nodes/{hosts['a'][1]}", headers=mine
                     ).status_code == 200


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install "
                    "chromium; .ci/run does)")
def test_the_console_on_one_shard_shows_the_whole_fleet(cluster: Any, tmp_path: Path) -> None:
    s, read, hosts = cluster
    b = Browser(tmp_path / "chromium")
    try:
        b.goto(s.urls["b"] + "/")
        b.wait_for("document.readyState === 'complete'", "the console")
        b.eval("sessionStorage.setItem('gpuhealth-token', "
               f"{read['Authorization'].split()[1]!r})")
        b.errors.clear()  # the first load's 401s, before it had the token
        cells = 3 * 4 * GPUS  # every shard's nodes
        b.goto(s.urls["b"] + "/#/fleet")
        b.wait_for(f"document.querySelectorAll('#grid .cell').length === {cells}", "the grid")
        node = hosts["c"][2]  # another shard's node, two failing GPUs
        b.goto(s.urls["b"] + f"/#/node/{node}")
        b.wait_for("document.querySelectorAll('#entities tr[data-entity]').length === "
                   f"{GPUS}", "the node page")
        rows = b.eval("[...document.querySelectorAll('#entities tr[data-entity]')]"
                      ".map(r => r.dataset.entity)")
        assert rows == [f"{node}:gpu{g}" for g in range(GPUS)]
        assert unexpected(b) == []  # a history's 501, diagnostics' 503 (off) are expected
    finally:
        b.close()


def test_a_stopped_shard_gives_503_unless_partial(cluster: Any) -> None:
    s, read, hosts = cluster
    s.stop("c")
    try:
        for path in ("/v1/nodes", "/v1/fleet", "/v1/collectors"):
            r = httpx.get(s.urls["a"] + path, headers=read)
            assert r.status_code == 503, (path, r.text)
            said = r.json()
            assert r.headers["retry-after"] == "5" and list(said["missing"]) == ["c"]
            assert "shard c" in said["detail"]
        part = _get(s.urls["b"] + "/v1/nodes", read, partial="true", limit=1000)
        assert part["missing_shards"] == ["c"]
        assert sorted(r["node"] for r in part["nodes"]) == sorted(hosts["a"] + hosts["b"])
        grid = _get(s.urls["a"] + "/v1/fleet", read, partial="true")
        assert grid["missing_shards"] == ["c"] and len(grid["nodes"]) == 8
        got = _get(s.urls["a"] + "/v1/collectors", read, partial="true")
        assert got["c/*"]["up"] is False and "shard c" in got["c/*"]["reason"]
        r = httpx.get(s.urls["a"] + f"/v1/nodes/{hosts['c'][1]}", headers=read)
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert "shard c" in r.json()["detail"]
        # another shard's node still answers
        assert _get(s.urls["a"] + f"/v1/nodes/{hosts['b'][1]}", read)["node"] == hosts["b"][1]
    finally:
        s.start("c")
