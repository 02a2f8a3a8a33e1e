"""The webhook hook against a real loopback HTTP receiver that checks the Standard Webhooks
signature with service/notify/signing.verify, as a receiver would."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from service.notify import signing
from service.remediation.hooks import build_hook
from service.remediation.hooks.base import ActionRequest, Hook

SECRET = "s3cret-s3cret-s3cret"


@dataclass
class Receiver:
    """Answers each POST with the next scripted (status, body); the last repeats."""

    secret: bytes = SECRET.encode()
    answers: list[tuple[int, dict[str, Any]]] = field(default_factory=lambda: [(202, {})])
    delay_s: float = 0.0
    got: list[dict[str, Any]] = field(default_factory=list)  # body, headers, verdict
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/hooks/drain"

    def handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                verdict = signing.verify(receiver.secret, headers, body, time.time())
                receiver.got.append({"body": json.loads(body), "headers": headers,
                                     "verdict": verdict, "path": self.path})
                time.sleep(receiver.delay_s)
                if verdict is not None:
                    status, answer = 401, {"message": verdict}
                else:
                    status, answer = (receiver.answers.pop(0) if len(receiver.answers) > 1
                                      else receiver.answers[0])
                data = json.dumps(answer).encode()
                # The client may have timed out and gone already.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(status)
                    if 300 <= status < 400:
                        self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

        return Handler


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    rec.server = ThreadingHTTPServer(("127.0.0.1", 0), rec.handler())
    rec.server.daemon_threads = True
    thread = threading.Thread(target=rec.server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield rec
    rec.server.shutdown()
    rec.server.server_close()
    thread.join(timeout=5)


def hook_for(url: str, **extra: Any) -> Hook:
    return build_hook("webhook", {"url": url, "secret": SECRET, "timeout_s": 2, **extra})


def request() -> ActionRequest:
    return ActionRequest(action_id="act-3", node="gpu-2", alert_id=11, fingerprint="fp11",
                         summary="ECC storm on gpu 5", requested_at=1_800_000_000.5)


def test_drain_is_posted_signed(receiver: Receiver) -> None:
    receiver.answers = [(200, {"moved": ["job 12"], "left": ["job 13: pinned"]})]

    result = hook_for(receiver.url).execute(request())

    assert result.ok and not result.retry, result.detail
    [got] = receiver.got
    assert got["verdict"] is None  # signing.verify accepted it
    assert got["body"] == {"op": "drain", "action_id": "act-3", "node": "gpu-2",
                           "alert_id": 11, "fingerprint": "fp11",
                           "summary": "ECC storm on gpu 5", "requested_at": 1_800_000_000.5}
    assert got["headers"]["webhook-id"] == "act-3-drain"  # stable across retries
    assert got["headers"]["content-type"] == "application/json"
    assert result.moved == ("job 12",) and result.left == ("job 13: pinned",)
    assert result.steps[0].call == f"POST {receiver.url}"
    assert SECRET not in json.dumps(result.as_dict())


def test_release_is_posted_signed(receiver: Receiver) -> None:
    assert hook_for(receiver.url).release("gpu-2").ok
    [got] = receiver.got
    assert got["verdict"] is None
    assert got["body"]["op"] == "release" and got["body"]["node"] == "gpu-2"
    assert got["body"]["action_id"] is None and got["body"]["alert_id"] is None


@pytest.mark.parametrize(("status", "retry"), [(429, True), (500, True), (503, True),
                                               (400, False), (404, False), (409, False)])
def test_status_mapping(receiver: Receiver, status: int, retry: bool) -> None:
    receiver.answers = [(status, {"message": "nope"})]
    result = hook_for(receiver.url).execute(request())
    assert not result.ok and result.retry is retry
    assert f"HTTP {status}" in result.detail


def test_wrong_secret_is_rejected_by_the_receiver_and_not_retried(receiver: Receiver) -> None:
    result = hook_for(receiver.url, secret="another-secret-of-16").execute(request())
    assert receiver.got[0]["verdict"] == "signature does not match"
    assert not result.ok and not result.retry and "HTTP 401" in result.detail


def test_redirect_is_not_followed(receiver: Receiver) -> None:
    receiver.answers = [(307, {})]
    result = hook_for(receiver.url).execute(request())
    assert not result.ok and not result.retry and len(receiver.got) == 1


def test_network_errors_and_timeouts_are_retryable(receiver: Receiver) -> None:
    receiver.delay_s = 1.0
    slow = hook_for(receiver.url, timeout_s=0.2).execute(request())
    assert not slow.ok and slow.retry and "timed out" in slow.detail

    closed = Receiver()
    closed.server = ThreadingHTTPServer(("127.0.0.1", 0), closed.handler())
    url = closed.url
    closed.server.server_close()
    refused = hook_for(url).execute(request())
    assert not refused.ok and refused.retry and "network error" in refused.detail


def test_plan_sends_nothing_and_hides_the_query(receiver: Receiver) -> None:
    hook = hook_for(receiver.url + "?token=abc")
    [step] = hook.plan(request())
    assert step.call == f"POST {receiver.url}" and "abc" not in step.call
    assert '"op": "drain"' in step.detail
    assert receiver.got == []


def test_inspect_says_the_far_end_owns_state(receiver: Receiver) -> None:
    state = hook_for(receiver.url).inspect("gpu-2")
    assert state.exists and not state.drained_by_us and state.extra == {"unknown": True}
    assert "receiver owns" in state.detail
    assert receiver.got == []


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="secret: Value should have at least 16"):
        build_hook("webhook", {"url": "http://127.0.0.1:1/x", "secret": "short"})
    with pytest.raises(ValueError, match="url"):
        build_hook("webhook", {"url": "not a url", "secret": SECRET})
