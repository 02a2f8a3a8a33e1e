"""The relay (`gpuhealth agent relay`, collectors.agent.relay) on real loopback sockets: node
agents' pushes through it reach a real service with every sample exactly once; bad lines are
named to the agent and the good ones forwarded; a service outage loses and doubles nothing, nor
does a body the service refuses as Arrow (it goes as line protocol); hostile bodies and missing
tokens are refused with the service's statuses."""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from collectors.agent.push import Outcome, Pusher
from collectors.agent.relay import SPOOL_SUFFIX, Limits, Relay
from collectors.agent.relay_http import RelayServer
from collectors.agent.spool import Spool
from collectors.schema import SchemaMapper, batch_to_lines
from tests.collectors.agent.relay_service import SERVICE_TOKEN, Service, samples
from tests.support.fleet import T0, Fleet

pytest.importorskip("pyarrow")
AGENT_TOKEN = "relay-test-agent-token"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    svc = Service(tmp_path / "service").start()
    yield svc
    svc.stop()


def _relay(tmp_path: Path, url: str, clock: Clock | None = None,
           limits: Limits | None = None, client: httpx.Client | None = None
           ) -> tuple[Relay, RelayServer]:
    spool = Spool(tmp_path / "relay-spool", 64 << 20, suffix=SPOOL_SUFFIX)
    relay = Relay(spool, Pusher(url, token=SERVICE_TOKEN, client=client), tokens=[AGENT_TOKEN],
                  limits=limits or Limits(), clock=clock or Clock(), wall=lambda: T0)
    server = RelayServer(relay, "127.0.0.1", 0)
    server.start()
    return relay, server


@pytest.fixture
def stop() -> Iterator[list[RelayServer]]:
    servers: list[RelayServer] = []
    yield servers
    for s in servers:
        s.shutdown()
        s.server_close()


def _node_lines(node: str, ts: float = T0) -> str:
    return "".join(ln + "\n" for ln in batch_to_lines(Fleet({node: 8}).batch(ts)))


def _expected(text: str) -> Counter[tuple[str, float, str, float]]:
    return samples(SchemaMapper(strict=False).parse(text, max_bytes=None))


def _agent(relay: RelayServer, arrow: bool) -> Pusher:
    return Pusher(f"http://127.0.0.1:{relay.port}/write", token=AGENT_TOKEN, arrow=arrow)


def test_agents_through_a_relay_reach_the_service_exactly_once(
        tmp_path: Path, service: Service, stop: list[RelayServer]) -> None:
    relay, server = _relay(tmp_path, service.url)
    stop.append(server)
    expected: Counter[tuple[str, float, str, float]] = Counter()
    for i in range(6):  # half post Arrow, half line protocol, as agents with and without pyarrow
        text = _node_lines(f"n{i:03d}")
        expected += _expected(text)
        pusher = _agent(server, arrow=i % 2 == 0)
        res = pusher.push(gzip.compress(text.encode()))
        assert (res.outcome, res.status) == (Outcome.SENT, 204)
        assert (pusher.sent_arrow, pusher.sent_lines) == ((1, 0) if i % 2 == 0 else (0, 1))
    assert service.recorder.got == Counter()  # held until the flush
    assert relay.flush() == 1  # six nodes, one body
    assert relay.forward() == 1
    assert relay.pusher.sent_arrow == 1
    assert service.recorder.got == expected and set(expected.values()) == {1}
    assert relay.spool.stats.segments == 0


def test_the_same_node_twice_goes_in_two_bodies_in_order(
        tmp_path: Path, service: Service, stop: list[RelayServer]) -> None:
    relay, server = _relay(tmp_path, service.url)
    stop.append(server)
    first, second = _node_lines("n001", T0 - 5), _node_lines("n001", T0)
    for text in (first, second, _node_lines("n002")):
        assert _agent(server, arrow=True).push(gzip.compress(text.encode())).status == 204
    assert relay.flush() == 2  # n001 twice: a second body (n001 then n002; n001's next round)
    assert relay.forward() == 2
    want = _expected(first) + _expected(second) + _expected(_node_lines("n002"))
    assert service.recorder.got == want and set(want.values()) == {1}


class _CutArrow(httpx.HTTPTransport):
    """The wire to the service, cutting each Arrow body in half on its way (the service
    refuses it whole: 400 `arrow-payload-refused`, nothing written)."""

    def __init__(self) -> None:
        super().__init__()
        self.cut = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("content-type") == "application/vnd.apache.arrow.stream":
            body = request.read()
            headers = [(k, v) for k, v in request.headers.multi_items()
                       if k.lower() != "content-length"]
            request = httpx.Request(request.method, request.url, headers=headers,
                                    content=body[: len(body) // 2])
            self.cut += 1
        return super().handle_request(request)


def test_a_body_the_service_refuses_as_arrow_goes_as_line_protocol(
        tmp_path: Path, service: Service, stop: list[RelayServer]) -> None:
    """Each spooled body the service refuses as Arrow is sent at once as line protocol:
    every sample arrives once, and the next body is offered as Arrow again."""
    wire = _CutArrow()
    relay, server = _relay(tmp_path, service.url, client=httpx.Client(transport=wire))
    stop.append(server)
    want: Counter[tuple[str, float, str, float]] = Counter()
    for k, nodes in enumerate((("n030", "n031"), ("n032",))):
        for node in nodes:
            text = _node_lines(node, T0 - 5 + 5 * k)
            want += _expected(text)
            assert _agent(server, arrow=True).push(gzip.compress(text.encode())).status == 204
        assert relay.flush() == 1
        assert relay.forward() == 1
        assert (wire.cut, relay.pusher.sent_arrow, relay.pusher.sent_lines) == (k + 1, 0, k + 1)
    assert service.recorder.got == want and set(want.values()) == {1}
    assert relay.spool.stats.segments == 0 and relay.stats.bodies_dropped == 0


def test_bad_lines_are_named_by_the_relay_and_the_good_ones_forwarded(
        tmp_path: Path, service: Service, stop: list[RelayServer]) -> None:
    relay, server = _relay(tmp_path, service.url)
    stop.append(server)
    good = _node_lines("n007").splitlines()
    lines = [good[0], "gpu,host=n007,gpu=0 gpu_temp=", good[1], "not line protocol at all",
             *good[2:]]
    r = httpx.post(f"http://127.0.0.1:{server.port}/write",
                   content=gzip.compress(("\n".join(lines) + "\n").encode()),
                   headers={"Authorization": f"Token {AGENT_TOKEN}",
                            "Content-Encoding": "gzip"})
    assert r.status_code == 400
    said = r.json()
    assert said["type"] == "/problems/partial-write" and said["status"] == 400
    assert [x["line"] for x in said["rejections"]] == [2, 4]
    assert said["rejected"] == 2 and said["error"].startswith("partial write:")
    want = _expected("\n".join(good) + "\n")
    assert said["accepted"] == sum(want.values())
    relay.flush()
    relay.forward()
    assert service.recorder.got == want


def test_a_service_outage_is_spooled_and_delivered_once(tmp_path: Path,
                                                        stop: list[RelayServer]) -> None:
    svc = Service(tmp_path / "service")  # not started: nothing listens on its port
    clock = Clock()
    relay, server = _relay(tmp_path, svc.url, clock)
    stop.append(server)
    expected: Counter[tuple[str, float, str, float]] = Counter()
    for k in range(3):  # three intervals while the service is away
        text = _node_lines("n010", T0 - 10 + 5 * k) + _node_lines("n011", T0 - 10 + 5 * k)
        expected += _expected(text)
        assert _agent(server, arrow=True).push(gzip.compress(text.encode())).status == 204
        relay.flush()
        assert relay.forward() == 0
        clock.now += 100  # past the backoff
    assert relay.spool.stats.segments == 3 and relay.stats.forward_failures == 3
    svc.start()
    try:
        assert relay.forward() == 3
        assert relay.forward() == 0  # nothing left, nothing sent twice
        assert svc.recorder.got == expected and set(expected.values()) == {1}
    finally:
        svc.stop()


def test_spooled_bodies_survive_a_relay_restart(tmp_path: Path, service: Service,
                                                stop: list[RelayServer]) -> None:
    relay, server = _relay(tmp_path, "http://127.0.0.1:9/write")  # nothing listens there
    stop.append(server)
    text = _node_lines("n020")
    assert _agent(server, arrow=False).push(gzip.compress(text.encode())).status == 204
    relay.flush()
    assert relay.forward() == 0
    again, server2 = _relay(tmp_path, service.url)  # the same spool directory
    stop.append(server2)
    assert again.forward() == 1
    assert service.recorder.got == _expected(text)


def _post(server: RelayServer, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{server.port}/write", content=body,
                      headers={"Authorization": f"Token {AGENT_TOKEN}", **headers})


def test_hostile_bodies_get_the_services_answers(tmp_path: Path, service: Service,
                                                 stop: list[RelayServer]) -> None:
    relay, server = _relay(tmp_path, service.url, limits=Limits(max_body_bytes=200_000))
    stop.append(server)
    arrow = "application/vnd.apache.arrow.stream"
    for kind, (body, headers) in {
        "oversized": (b"x" * 300_000, {}),
        "bomb": (gzip.compress(b"\n" * 50_000_000), {"Content-Encoding": "gzip"}),
        "bad gzip": (b"\x1f\x8b\x08\x00not gzip at all", {"Content-Encoding": "gzip"}),
        "bad arrow": (b"\xff\xff\xff\xffnot arrow", {"Content-Type": arrow}),
        "cut arrow": (gzip.compress(b"x" * 5000)[:60],
                      {"Content-Type": arrow, "Content-Encoding": "gzip"}),
        "deflate": (b"x", {"Content-Encoding": "deflate"}),
    }.items():
        r = _post(server, body, **headers)
        status = {"oversized": 413, "bomb": 413, "deflate": 415}.get(kind, 400)
        assert r.status_code == status, kind
        said = r.json()
        assert said["status"] == status and said["accepted"] == 0 and said["error"], kind
        if kind in ("bad arrow", "cut arrow"):
            assert said["type"] == "/problems/arrow-payload-refused", kind
            assert r.headers["x-gpuhealth-payload"] == "arrow"
    # and the service answers the same bodies the same way (its limit set as the relay's)
    assert relay.flush() == 0 and relay.stats.pushes == 0


def test_the_relays_answers_match_the_services(tmp_path: Path, service: Service,
                                               stop: list[RelayServer]) -> None:
    _, server = _relay(tmp_path, service.url)
    stop.append(server)
    arrow = "application/vnd.apache.arrow.stream"
    cases = [(b"gpu,host=n1,gpu=0 gpu_temp=55 1\nnonsense\n", {}),
             (b"\x1f\x8b\x08\x00garbage", {"Content-Encoding": "gzip"}),
             (b"garbage", {"Content-Type": arrow}),
             (b"x", {"Content-Encoding": "br"})]
    for body, headers in cases:
        ours = _post(server, body, **headers)
        theirs = httpx.post(service.url, content=body,
                            headers={"Authorization": f"Token {SERVICE_TOKEN}", **headers})
        assert ours.status_code == theirs.status_code, (body, headers)
        a, b = ours.json(), theirs.json()
        assert (a["type"], a["title"], a["rejected"], a["truncated"]) == (
            b["type"], b["title"], b["rejected"], b["truncated"])
        assert [x["line"] for x in a["rejections"]] == [x["line"] for x in b["rejections"]]


def test_pushes_without_the_relays_token_are_refused(tmp_path: Path, service: Service,
                                                     stop: list[RelayServer]) -> None:
    relay, server = _relay(tmp_path, service.url)
    stop.append(server)
    body = _node_lines("n030").encode()
    for headers in ({}, {"Authorization": "Token wrong"},
                    {"Authorization": f"Token {SERVICE_TOKEN}"}):
        r = httpx.post(f"http://127.0.0.1:{server.port}/write", content=body, headers=headers)
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == 'Token realm="gpuhealth"'
    ok = httpx.post(f"http://127.0.0.1:{server.port}/api/v2/write?org=x&bucket=y&p=" +
                    AGENT_TOKEN, content=body)
    assert ok.status_code == 204
    assert relay.stats.refused == 3 and relay.stats.pushes == 1


def test_the_relay_names_nodes_in_the_sites_order(tmp_path: Path) -> None:
    """A central Telegraf scraping many nodes' exporters tags them all with its own `host`:
    such a site names nodes by `Hostname` first (ingest.node_name_from), and a relay in front
    of the service must parse with the same order (`--node-name-from`)."""
    line = (b"prometheus,Hostname=gpu-node-7,gpu=0,host=scraper-1,UUID=GPU-1 "
            b"DCGM_FI_DEV_PCIE_REPLAY_COUNTER=3 1699999200000000000\n")
    names = {}
    for order in (("host", "Hostname"), ("Hostname", "host")):
        spool = Spool(tmp_path / "-".join(order), 1 << 20, suffix=SPOOL_SUFFIX)
        relay = Relay(spool, Pusher("http://127.0.0.1:9/write"), wall=lambda: T0,
                      node_name_from=order)
        answer = relay.answer("/write", "", {}, line)
        assert answer.status == 204, answer
        [push] = relay._pending
        names[order] = {e.node for f in push.batch.frames.values() for e in f.entities}
    assert names == {("host", "Hostname"): {"scraper-1"}, ("Hostname", "host"): {"gpu-node-7"}}
