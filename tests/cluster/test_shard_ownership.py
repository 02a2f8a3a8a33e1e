"""A shard never stores, scores, alerts on or drains a node it does not own, whatever a
sender says (issue 29, defect 6): real shard services on loopback (tests/cluster/shards.py),
remediation in auto mode through a command hook that logs each drain."""

from __future__ import annotations

import gzip
import stat
from collections.abc import Iterator

import httpx
import pytest

from collectors.arrow_batch import MEDIA_TYPE, encode
from collectors.collector_status import CollectorReport
from collectors.schema import SchemaMapper
from service.api.shard_route import FORWARDED_HEADER, NODE_HEADER
from service.remediation.controller import MigrationRequest
from service.settings import Settings
from tests.cluster.shards import TOKEN, Shards
from tests.support.fleet import T0

AUTH = {"Authorization": f"Token {TOKEN}"}
GPUS = 2


def lines(host: str, ts: float, dbe: int = 0) -> str:
    ns = int(ts * 1e9)
    return "".join(f"gpu,host={host},gpu={g} gpu_temp=50.5,ecc_dbe_volatile={dbe if g == 0 else 0}i"
                   f",ecc_sbe_volatile=0i {ns}\n" for g in range(GPUS))


class Acting(Shards):
    """Shards in remediation mode auto, each draining through a hook that logs to its dir."""

    def settings(self, sid: str) -> Settings:
        base = super().settings(sid)
        d = self.root / sid
        d.mkdir(parents=True, exist_ok=True)
        script = d / "drain.sh"
        script.write_text(f'#!/bin/sh\necho "$@" >> "{d / "drains.log"}"\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        return base.model_copy(update={"remediation": base.remediation.model_validate({
            "mode": "auto", "hook": "command", "breaker_max_fraction": 1.0,
            "hook_config": {"drain": [str(script), "drain", "{node}"],
                            "release": [str(script), "release", "{node}"]}})})

    def drains(self, sid: str) -> list[str]:
        log = self.root / sid / "drains.log"
        return log.read_text().splitlines() if log.exists() else []


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Acting]:
    s = Acting(tmp_path_factory.mktemp("owned"), ids=("a", "b"))
    for sid in s.ids:
        s.start(sid)
    try:
        yield s
    finally:
        s.stop_all()


def _pipe(shards: Shards, sid: str):  # type: ignore[no-untyped-def]
    return shards.apps[sid].state.gpuhealth.pipeline


def _alerts(shards: Shards, sid: str, node: str) -> list[str]:
    return [a.name for a in _pipe(shards, sid).alerts.find(node=node, limit=100)]


def test_a_header_naming_this_shards_node_cannot_smuggle_a_foreign_node(
        shards: Acting) -> None:
    hosts = shards.hosts(per_shard=3)
    own, foreign = hosts["a"][0], hosts["b"][0]
    url = shards.urls["a"] + "/write?precision=ns"
    for k in range(4):  # rounds of the attack, each scored
        t = T0 - 15 + 5 * k
        r = httpx.post(url, content=lines(own, t) + lines(foreign, t, dbe=1),
                       headers={**AUTH, NODE_HEADER: own})
        assert r.status_code == 400, r.text  # the sender is told, by entity, who owns it
        said = r.json()
        assert said["accepted"] == 3 * GPUS and said["rejected"] == 3 * GPUS
        assert {x["entity"] for x in said["rejections"]} == {f"{foreign}:gpu{g}"
                                                            for g in range(GPUS)}
        assert all("belongs to shard b" in x["reason"] for x in said["rejections"])
        for sid in shards.ids:
            _pipe(shards, sid).tick(T0 + 1)
    assert _pipe(shards, "a").controller.wait(10)
    assert shards.holders(f"{foreign}:gpu0") == [] and shards.holders(f"{own}:gpu0") == ["a"]
    assert _alerts(shards, "a", foreign) == [] and shards.drains("a") == []
    assert foreign not in _pipe(shards, "a").store.registry.nodes  # no double count


def test_every_write_form_keeps_foreign_nodes_out(shards: Acting) -> None:
    hosts = shards.hosts(per_shard=6)
    own, foreign = hosts["a"][1], hosts["b"][1:]
    url = shards.urls["a"] + "/write?precision=ns"
    t = T0
    forms = [  # (body, headers): what a hostile or confused sender may try
        (gzip.compress((lines(own, t) + lines(foreign[0], t, 1)).encode()),
         {NODE_HEADER: own, "Content-Encoding": "gzip"}),
        (encode(SchemaMapper().parse(lines(own, t) + lines(foreign[1], t, 1))),
         {NODE_HEADER: own, "Content-Type": MEDIA_TYPE}),
        (gzip.compress((lines(own, t) + lines(foreign[2], t, 1)).encode())[:-6],  # cut short
         {"Content-Encoding": "gzip"}),
        ((lines(own, t) + lines(foreign[3], t, 1)).encode(),  # no host name: "this shard's"
         {NODE_HEADER: f"{own},{foreign[3]}"}),
    ]
    for body, headers in forms:
        r = httpx.post(url, content=body, headers={**AUTH, **headers})
        assert r.status_code in (400, 413, 415), (headers, r.status_code, r.text)
    # spoofing a peer's forwarding: never forwarded, never stored
    r = httpx.post(url, content=lines(own, t) + lines(foreign[4], t, 1),
                   headers={**AUTH, FORWARDED_HEADER: "b", NODE_HEADER: own})
    assert r.status_code in (400, 421), r.text
    _pipe(shards, "a").tick(T0 + 1)
    for h in foreign:
        assert shards.holders(f"{h}:gpu0") == [], h
        assert _alerts(shards, "a", h) == []
    assert shards.drains("a") == []


def test_a_foreign_nodes_collector_report_is_not_kept(shards: Acting) -> None:
    hosts = shards.hosts(per_shard=7)
    own, foreign = hosts["a"][6], hosts["b"][6]
    reports = [CollectorReport(h, "nvml", False, 0.5, 0, "driver gone", T0) for h in (own,
                                                                                   foreign)]
    body = encode(SchemaMapper().parse(lines(own, T0) + lines(foreign, T0, 1)), reports)
    r = httpx.post(shards.urls["a"] + "/write", content=body,
                   headers={**AUTH, NODE_HEADER: own, "Content-Type": MEDIA_TYPE})
    assert r.status_code == 400, r.text
    held = {s.host for s in shards.apps["a"].state.gpuhealth.remote.statuses(T0 + 1)}
    assert own in held and foreign not in held


def test_the_controller_refuses_another_shards_node(shards: Acting) -> None:
    foreign = shards.hosts(per_shard=8)["b"][7]
    ctl = _pipe(shards, "a").controller
    got = ctl.request(MigrationRequest(foreign, 99, "fp", 3, 1.0, "forged", T0), T0)
    assert got is None and ctl.store.find(node=foreign) == []
    assert [e.event for e in ctl.store.audit() if e.node == foreign] == ["not_owned"]
