"""Webhook hook: hand the drain (or release) to another system by POSTing a JSON action
request signed in the Standard Webhooks scheme (service/notify/signing.py: a `whsec_` secret is
the spec's base64 key, any other is an older raw one).

Body: {"op": "drain" | "release", "action_id", "node", "alert_id", "fingerprint", "summary",
"requested_at" (Unix seconds)}; a release knows only the node, so the alert fields are null.
The `webhook-id` of a drain is "<action_id>-drain" (no '.', as the spec asks), the same on
every retry, so the receiver can deduplicate. 2xx = done (a JSON answer may list "moved" and
"left" strings, passed on); 429, 5xx and network errors = retry later; any other answer =
failed, no retry.

The far end owns the node's state: `inspect` cannot see it and says so (exists=True,
drained_by_us=False, extra {"unknown": True}); the controller must not infer anything from
it."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field

from service.notify import signing
from service.remediation.hooks.base import ActionRequest, HookResult, NodeState, Step
from service.remediation.hooks.runner import one_line

MAX_LISTED = 200  # moved/left entries taken from an answer


class WebhookHookConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: AnyHttpUrl
    secret: signing.SigningSecret
    timeout_s: float = Field(default=10.0, gt=0, le=120)


class WebhookHook:
    name = "webhook"

    def __init__(self, config: WebhookHookConfig) -> None:
        self.config = config
        self.url = str(config.url)
        parts = urlsplit(self.url)
        # Steps go to the audit log: the query string may carry a token, so it stays out.
        self._shown_url = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
        self._key = signing.key(config.secret.get_secret_value())

    def body(self, req: ActionRequest) -> dict[str, Any]:
        return {"op": "drain", "action_id": req.action_id, "node": req.node,
                "alert_id": req.alert_id, "fingerprint": req.fingerprint,
                "summary": req.summary, "requested_at": req.requested_at}

    def plan(self, req: ActionRequest) -> list[Step]:
        return [Step(call=f"POST {self._shown_url}",
                     detail="signed action request: " + json.dumps(self.body(req),
                                                                   sort_keys=True))]

    def execute(self, req: ActionRequest) -> HookResult:
        return self._post(self.body(req), f"{req.action_id}-drain", f"drain of {req.node}")

    def release(self, node: str) -> HookResult:
        body = {"op": "release", "action_id": None, "node": node, "alert_id": None,
                "fingerprint": None, "summary": None, "requested_at": time.time()}
        return self._post(body, f"release-{uuid.uuid4().hex}", f"release of {node}")

    def inspect(self, node: str) -> NodeState:
        return NodeState(node=node, exists=True, drained_by_us=False,
                         detail="webhook hook: the receiver owns the node's state; "
                                "it is not known here",
                         extra={"unknown": True})

    def _post(self, body: dict[str, Any], msg_id: str, what: str) -> HookResult:
        data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        headers = {"content-type": "application/json",
                   **signing.sign(self._key, msg_id, time.time(), data)}
        call = f"POST {self._shown_url}"
        start = time.monotonic()
        try:
            # No redirects: a 3xx elsewhere must not receive our signed request.
            with httpx.Client(timeout=self.config.timeout_s, follow_redirects=False) as client:
                resp = client.post(self.url, content=data, headers=headers)
        except httpx.HTTPError as exc:
            why = "timed out" if isinstance(exc, httpx.TimeoutException) else (
                f"network error: {type(exc).__name__}: {exc}")
            step = Step(call=call, ok=False, detail=why, duration_s=time.monotonic() - start)
            return HookResult(ok=False, retry=True, detail=f"{what}: {why}", steps=(step,))
        took = time.monotonic() - start
        said = one_line(resp.text, 200)
        detail = f"HTTP {resp.status_code}" + (f": {said}" if said else "")
        ok = resp.is_success
        retry = resp.status_code == 429 or resp.status_code >= 500
        step = Step(call=call, ok=ok, detail=detail, duration_s=took)
        moved, left = _listed(resp) if ok else ((), ())
        return HookResult(ok=ok, retry=retry, detail=f"{what}: {detail}", steps=(step,),
                          moved=moved, left=left)


def _listed(resp: httpx.Response) -> tuple[tuple[str, ...], tuple[str, ...]]:
    try:
        answer = resp.json()
    except ValueError:
        return (), ()
    if not isinstance(answer, dict):
        return (), ()

    def strings(key: str) -> tuple[str, ...]:
        items = answer.get(key)
        if not isinstance(items, list):
            return ()
        return tuple(str(i)[:300] for i in items[:MAX_LISTED])

    return strings("moved"), strings("left")
