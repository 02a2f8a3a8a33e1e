"""The agent's Pusher meeting redirects (httpx's own MockTransport answers as a shard would):
the token kept only on the configured scheme, hops bounded, only http(s) followed."""

from __future__ import annotations

import gzip

import httpx

from collectors.agent.push import MAX_HOPS, NODE_HEADER, Outcome, Pusher

BODY = gzip.compress(b"gpu,host=n1,gpu=0 gpu_temp=40 1\n")


def _pusher(routes: dict[str, httpx.Response], seen: list[httpx.Request],
            url: str = "http://a:8080/write") -> Pusher:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return routes.get(str(request.url), httpx.Response(204))

    return Pusher(url, token="tok", host="n1", arrow=False,
                  client=httpx.Client(transport=httpx.MockTransport(answer)))


def test_the_node_is_named_and_the_token_kept_on_the_same_scheme() -> None:
    seen: list[httpx.Request] = []
    p = _pusher({"http://a:8080/write": httpx.Response(
        307, headers={"Location": "http://b:8080/write"})}, seen)
    assert p.push(BODY).outcome is Outcome.SENT
    assert [str(r.url) for r in seen] == ["http://a:8080/write", "http://b:8080/write"]
    assert all(r.headers[NODE_HEADER] == "n1" and r.headers["authorization"] == "Token tok"
               and r.content == BODY for r in seen)
    assert p.url == "http://b:8080/write"


def test_the_token_does_not_follow_a_change_of_scheme() -> None:
    seen: list[httpx.Request] = []
    p = _pusher({"https://a/write": httpx.Response(
        308, headers={"Location": "http://b/write"})}, seen, url="https://a/write")
    assert p.push(BODY).outcome is Outcome.SENT
    assert "authorization" in seen[0].headers and "authorization" not in seen[1].headers


def test_a_redirect_elsewhere_than_http_or_round_and_round_is_a_retry() -> None:
    seen: list[httpx.Request] = []
    p = _pusher({"http://a:8080/write": httpx.Response(
        307, headers={"Location": "file:///etc/passwd"})}, seen)
    res = p.push(BODY)
    assert res.outcome is Outcome.RETRY and "not http(s)" in res.detail and len(seen) == 1
    seen.clear()
    loop = {f"http://s{i}/write": httpx.Response(
        307, headers={"Location": f"http://s{i + 1}/write"}) for i in range(10)}
    p = _pusher(loop, seen, url="http://s0/write")
    res = p.push(BODY)
    assert res.outcome is Outcome.RETRY and "redirects" in res.detail
    assert len(seen) == MAX_HOPS + 1 and p.url == "http://s0/write"


def test_the_owner_is_kept_until_a_push_there_fails() -> None:
    seen: list[httpx.Request] = []
    routes = {"http://a:8080/write": httpx.Response(307, headers={"Location": "/b/write"})}
    p = _pusher(routes, seen)
    assert p.push(BODY).outcome is Outcome.SENT and p.url == "http://a:8080/b/write"
    routes["http://a:8080/b/write"] = httpx.Response(503)
    assert p.push(BODY).outcome is Outcome.RETRY and p.url == "http://a:8080/write"
