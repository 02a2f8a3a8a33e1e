"""A FAKE Kubernetes API server, for the Kubernetes hook tests only. A real kube-apiserver
(kind, envtest) cannot run on this test machine, so this loopback HTTP server implements just
the calls the hook makes, with the real wire format:

* GET   /api/v1/nodes/{name}  (`after_node_read` can script a concurrent writer)
* PATCH /api/v1/nodes/{name}  (strategic-merge patch, simplified: maps merge, null deletes a
  key, lists are replaced whole, which is what the API does for node taints; a
  metadata.resourceVersion in the patch must match or the answer is 409 Conflict)
* GET   /api/v1/pods?fieldSelector=spec.nodeName=<name>
* POST  /api/v1/namespaces/{ns}/pods/{name}/eviction  (answers from a per-pod script, e.g.
  429, 429, 201; an accepted eviction removes the pod)

Every request is recorded (`requests`) with its time, so tests can check what was sent and
how retries were spaced. It is not a Kubernetes: no admission, no PodDisruptionBudget logic,
no watch."""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: Any
    at: float  # time.monotonic()


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Success" if code < 300 else "Failure", "message": message,
            "reason": reason, "code": code}


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeKubeApi:
    """A FAKE API server (see the module docstring). Use as a context manager; `url` is the
    host to give the hook."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.eviction_script: dict[tuple[str, str], list[int]] = {}
        # node -> a change applied once, right after that node is next served: another
        # writer racing the hook between its read and its patch.
        self.after_node_read: dict[str, Callable[[dict[str, Any]], None]] = {}
        self.requests: list[Recorded] = []
        self._version = 100
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeKubeApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- scripting -----------------------------------------------------------------------------

    def _rv(self) -> str:
        self._version += 1
        return str(self._version)

    def add_node(self, name: str, *, unschedulable: bool = False,
                 taints: list[dict[str, Any]] | None = None,
                 labels: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None) -> None:
        spec: dict[str, Any] = {}
        if unschedulable:
            spec["unschedulable"] = True
        if taints:
            spec["taints"] = taints
        with self.lock:
            self.nodes[name] = {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": self._rv(),
                             "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                             "annotations": dict(annotations or {})},
                "spec": spec, "status": {"phase": "Running"}}

    def add_pod(self, namespace: str, name: str, node: str, *, owner_kind: str | None = None,
                mirror: bool = False, phase: str = "Running", gpus: int = 0,
                evictions: list[int] | None = None) -> None:
        """`evictions`: the status codes its eviction answers, in turn; the last repeats
        (default: 201 at once)."""
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                                "resourceVersion": "1"}
        if owner_kind:
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind,
                                        "name": f"{name}-owner", "uid": f"uid-{name}-owner",
                                        "controller": True}]
        if mirror:
            meta["annotations"] = {"kubernetes.io/config.mirror": "abc123"}
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
               "spec": {"nodeName": node, "containers": [
                   {"name": "main", "image": "busybox", "resources": resources}]},
               "status": {"phase": phase}}
        with self.lock:
            self.pods[(namespace, name)] = pod
            if evictions is not None:
                self.eviction_script[(namespace, name)] = list(evictions)

    def calls(self, method: str, path_part: str = "") -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method == method and path_part in r.path]

    # -- serving ------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self) -> tuple[str, dict[str, list[str]], Any]:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                query = parse_qs(parts.query)
                with api.lock:
                    api.requests.append(Recorded(self.command, parts.path, query,
                                                 self.headers.get("Content-Type", ""), body,
                                                 time.monotonic()))
                return parts.path, query, body

            def do_GET(self) -> None:
                path, query, _ = self._record()
                if m := re.fullmatch(r"/api/v1/nodes/([^/]+)", path):
                    with api.lock:
                        node = copy.deepcopy(api.nodes.get(m.group(1)))
                        change = api.after_node_read.pop(m.group(1), None)
                        if change is not None and node is not None:
                            change(api.nodes[m.group(1)])
                            api.nodes[m.group(1)]["metadata"]["resourceVersion"] = api._rv()
                    if node is None:
                        self._send(404, status_body(404, "NotFound",
                                                    f'nodes "{m.group(1)}" not found'))
                    else:
                        self._send(200, node)
                elif path == "/api/v1/pods":
                    selector = query.get("fieldSelector", [""])[0]
                    want = selector.removeprefix("spec.nodeName=")
                    with api.lock:
                        items = [copy.deepcopy(p) for p in api.pods.values()
                                 if p["spec"]["nodeName"] == want]
                    self._send(200, {"apiVersion": "v1", "kind": "PodList",
                                     "metadata": {"resourceVersion": "1"}, "items": items})
                else:
                    self._send(404, status_body(404, "NotFound", f"no route {path}"))

            def do_PATCH(self) -> None:
                path, _, body = self._record()
                m = re.fullmatch(r"/api/v1/nodes/([^/]+)", path)
                if m is None or not isinstance(body, dict):
                    self._send(400, status_body(400, "BadRequest", "bad patch"))
                    return
                ctype = self.headers.get("Content-Type", "")
                if ctype not in ("application/strategic-merge-patch+json",
                                 "application/merge-patch+json"):
                    self._send(415, status_body(415, "UnsupportedMediaType", ctype))
                    return
                with api.lock:
                    node = api.nodes.get(m.group(1))
                    if node is None:
                        code, answer = 404, status_body(404, "NotFound", "node not found")
                    else:
                        want = (body.get("metadata") or {}).get("resourceVersion")
                        if want is not None and want != node["metadata"]["resourceVersion"]:
                            code, answer = 409, status_body(
                                409, "Conflict", "the object has been modified; please apply "
                                "your changes to the latest version and try again")
                        else:
                            merge(node, body)
                            node["metadata"]["resourceVersion"] = api._rv()
                            code, answer = 200, copy.deepcopy(node)
                self._send(code, answer)

            def do_POST(self) -> None:
                path, _, body = self._record()
                m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction", path)
                if m is None:
                    self._send(404, status_body(404, "NotFound", f"no route {path}"))
                    return
                key = (m.group(1), m.group(2))
                meta = (body or {}).get("metadata") or {}
                if (body or {}).get("kind", "Eviction") != "Eviction" or meta.get("name") != key[1]:
                    self._send(400, status_body(400, "BadRequest", "not an Eviction for it"))
                    return
                with api.lock:
                    if key not in api.pods:
                        code = 404
                    else:
                        script = api.eviction_script.get(key) or [201]
                        code = script.pop(0) if len(script) > 1 else script[0]
                        if code in (200, 201):
                            del api.pods[key]
                if code in (200, 201):
                    self._send(code, status_body(code, "", ""))
                elif code == 404:
                    self._send(404, status_body(404, "NotFound", f'pods "{key[1]}" not found'))
                elif code == 429:
                    self._send(429, status_body(429, "TooManyRequests", PDB_MESSAGE))
                else:
                    self._send(code, status_body(code, "InternalError",
                                                 "This pod has more than one "
                                                 "PodDisruptionBudget, which the eviction "
                                                 "subresource does not support."))

        return Handler
