"""A FAKE Kubernetes API server, for the Kubernetes hook tests only. A real kube-apiserver
(kind, envtest) cannot run on this test machine, so this loopback HTTP server implements just
the calls the hook makes, with the real wire format:

* GET   /api/v1/nodes/{name}  (`after_node_read` can script a concurrent writer)
* PATCH /api/v1/nodes/{name}  (strategic-merge patch, simplified: maps merge, null deletes a
  key, lists are replaced whole, which is what the API does for node taints; a
  metadata.resourceVersion in the patch must match or the answer is 409 Conflict)
* PATCH /api/v1/nodes/{name}/status  (only `status` is applied, as the status subresource
  does; a strategic-merge patch merges `status.conditions` by `type`, its patchMergeKey, so
  other conditions stay, while a merge-patch replaces the list whole, as RFC 7386 says)
* POST  /api/v1/namespaces/{ns}/events  (core/v1 Event: kind, involvedObject kind and name,
  reason and a name or generateName required; an object without a namespace must have its
  Events in "default", the API's legacy Event validation; stored in `events`, named)
* GET   /api/v1/pods?fieldSelector=spec.nodeName=<name>
* POST  /api/v1/namespaces/{ns}/pods/{name}/eviction  (answers from a per-pod script, e.g.
  429, 429, 201; an accepted eviction removes the pod)

and the calls of the diagnostics site (service/diagnostics/kubernetes_site.py):

* GET   /api/v1/pods and /api/v1/namespaces/{ns}/pods, with a fieldSelector on spec.nodeName
  and/or status.phase and a labelSelector of `key=value` terms
* POST  /apis/batch/v1/namespaces/{ns}/jobs: the Job is stored and its one pod made at once,
  on the node its template pins (nodeName, a nodeAffinity matchFields on metadata.name, or a
  nodeSelector on kubernetes.io/hostname); what the pod then does is scripted per node
  (`job_runs`, a `JobRun`): after that many reads of the Job it completes, fails with the
  scripted exit code, or passes its deadline (DeadlineExceeded), with the scripted log;
  unscripted, the pod stays Pending
* GET   /apis/batch/v1/namespaces/{ns}/jobs/{name}
* DELETE /apis/batch/v1/namespaces/{ns}/jobs/{name}  (propagationPolicy Background or
  Foreground deletes its pods too; none or Orphan leaves them, as the batch/v1 default does)
* GET   /api/v1/namespaces/{ns}/pods/{name}/log  (text/plain; limitBytes honoured; a pod not
  started yet answers 400 as the API server does)

`answer_with` makes any route answer an error status instead (403, 500, ...).

Every request is recorded (`requests`) with its time, so tests can check what was sent and
how retries were spaced. It is not a Kubernetes: no admission, no PodDisruptionBudget logic,
no watch."""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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


@dataclass
class JobRun:
    """What a Job's pod does on one node in the FAKE: after `polls` reads of the Job it ends
    with `exit_code` (0: Complete, else Failed/BackoffLimitExceeded), or past its deadline
    when `deadline` (Failed/DeadlineExceeded, the pod killed); `log` is what it printed by
    then. `waiting`: the pod never starts (a container waiting reason, e.g. ErrImagePull)."""

    log: str = ""
    exit_code: int = 0
    polls: int = 1
    deadline: bool = False
    waiting: str = ""
    reads: int = field(default=0, init=False)


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


def merge_status(target: dict[str, Any], patch: dict[str, Any], strategic: bool) -> None:
    """A nodes/status patch: NodeStatus.conditions is a list merged by `type` under a
    strategic-merge patch (patchStrategy=merge, patchMergeKey=type); anything else as merge."""
    conditions = patch.get("conditions")
    if not strategic or not isinstance(conditions, list):
        merge(target, patch)
        return
    merge(target, {k: v for k, v in patch.items() if k != "conditions"})
    current: list[dict[str, Any]] = target.setdefault("conditions", [])
    for entry in conditions:
        found = next((c for c in current if c.get("type") == entry.get("type")), None)
        if found is None:
            current.append(copy.deepcopy(entry))
        else:
            merge(found, entry)


def event_problem(namespace: str, event: Any) -> str | None:
    """Why the API would refuse to create this core/v1 Event, or None."""
    if not isinstance(event, dict) or event.get("kind", "Event") != "Event":
        return "not an Event"
    meta = event.get("metadata") or {}
    if not (meta.get("name") or meta.get("generateName")):
        return "metadata.name: Required value: name or generateName is required"
    if meta.get("namespace", namespace) != namespace:
        return "the namespace of the provided object does not match the namespace sent"
    involved = event.get("involvedObject") or {}
    if not involved.get("kind") or not involved.get("name"):
        return "involvedObject: Required value"
    if not involved.get("namespace") and namespace != "default":
        return "involvedObject.namespace: Invalid value: does not match event.namespace"
    if not event.get("reason"):
        return "reason: Required value"
    return None


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
        self.events: list[dict[str, Any]] = []  # created Events, as stored
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.job_runs: dict[str, JobRun] = {}  # node -> how a Job pinned there runs
        self.logs: dict[tuple[str, str], str] = {}  # (namespace, pod) -> its log
        # (method, part of the path, status): that route answers the status instead.
        self.answer_with: list[tuple[str, str, int]] = []
        self._version = 100
        self._pod_ids = itertools.count(1)
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
                 annotations: dict[str, str] | None = None,
                 conditions: list[dict[str, Any]] | None = None) -> None:
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
            if conditions:
                self.nodes[name]["status"]["conditions"] = copy.deepcopy(conditions)

    def add_pod(self, namespace: str, name: str, node: str, *, owner_kind: str | None = None,
                mirror: bool = False, phase: str = "Running", gpus: int = 0,
                evictions: list[int] | None = None) -> None:
        """`evictions`: the status codes its eviction answers, in turn; the last repeats
        (default: 201 at once). `node` "": not scheduled (Pending, Unschedulable)."""
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                                "resourceVersion": "1"}
        if owner_kind:
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind,
                                        "name": f"{name}-owner", "uid": f"uid-{name}-owner",
                                        "controller": True}]
        if mirror:
            meta["annotations"] = {"kubernetes.io/config.mirror": "abc123"}
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                               "spec": {"nodeName": node, "containers": [
                                   {"name": "main", "image": "busybox",
                                    "resources": resources}]},
                               "status": {"phase": phase}}
        if not node:
            del pod["spec"]["nodeName"]
            pod["status"] = {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]}
        with self.lock:
            self.pods[(namespace, name)] = pod
            if evictions is not None:
                self.eviction_script[(namespace, name)] = list(evictions)

    def calls(self, method: str, path_part: str = "") -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method == method and path_part in r.path]

    # -- Jobs ----------------------------------------------------------------------------------

    @staticmethod
    def pinned_node(pod_spec: dict[str, Any]) -> str:
        """The node a pod template pins, '' when none."""
        if pod_spec.get("nodeName"):
            return str(pod_spec["nodeName"])
        required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        for term in required.get("nodeSelectorTerms") or []:
            for req in term.get("matchFields") or []:
                if req.get("key") == "metadata.name" and req.get("operator") == "In":
                    return str(req["values"][0])
        return str((pod_spec.get("nodeSelector") or {}).get("kubernetes.io/hostname", ""))

    def _start_job(self, namespace: str, job: dict[str, Any]) -> None:
        """Make the Job's pod, Pending or Running as scripted (under the lock)."""
        name = job["metadata"]["name"]
        template = job["spec"]["template"]
        spec = copy.deepcopy(template["spec"])
        node = self.pinned_node(spec)
        spec["nodeName"] = node
        pod_name = f"{name}-{next(self._pod_ids):05d}"
        labels = {**(template.get("metadata") or {}).get("labels", {}),
                  "job-name": name, "batch.kubernetes.io/job-name": name,
                  "controller-uid": job["metadata"]["uid"]}
        meta = {"name": pod_name, "namespace": namespace, "uid": f"uid-{pod_name}",
                "resourceVersion": self._rv(), "labels": labels,
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                     "uid": job["metadata"]["uid"], "controller": True}]}
        run = self.job_runs.get(node)
        container = spec["containers"][0]
        status: dict[str, Any] = {"phase": "Pending"}
        if run is not None and not run.waiting:
            status = {"phase": "Running", "containerStatuses": [self._container(
                container, {"running": {"startedAt": "2025-01-01T00:00:00Z"}})]}
        elif run is not None:
            status["containerStatuses"] = [self._container(
                container, {"waiting": {"reason": run.waiting,
                                        "message": f"{run.waiting}: {container['image']}"}})]
        self.pods[(namespace, pod_name)] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                            "spec": spec, "status": status}
        job["status"] = {"active": 1, "startTime": "2025-01-01T00:00:00Z"}

    @staticmethod
    def _container(container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        return {"name": container["name"], "image": container["image"], "imageID": "",
                "ready": "running" in state, "restartCount": 0, "state": state}

    def _advance_job(self, namespace: str, job: dict[str, Any]) -> None:
        """One more read of the Job: end it when its script says (under the lock)."""
        pods = [(key, p) for key, p in self.pods.items() if key[0] == namespace and
                p["metadata"]["labels"].get("job-name") == job["metadata"]["name"]]
        if not pods or "conditions" in job["status"]:
            return
        key, pod = pods[0]
        run = self.job_runs.get(pod["spec"]["nodeName"])
        if run is None or run.waiting:
            return
        run.reads += 1
        self.logs[key] = run.log if run.reads >= run.polls else run.log[:len(run.log) // 2]
        if run.reads < run.polls:
            return
        container = pod["spec"]["containers"][0]
        if run.deadline:
            reason, message = "DeadlineExceeded", "Job was active longer than specified deadline"
            code = 137
        elif run.exit_code:
            reason, message = "BackoffLimitExceeded", "Job has reached the specified backoff limit"
            code = run.exit_code
        else:
            reason, message, code = "", "", 0
        done = {"type": "Complete" if code == 0 else "Failed", "status": "True",
                "reason": reason, "message": message}
        job["status"] = {"active": 0, "succeeded" if code == 0 else "failed": 1,
                         "conditions": [done]}
        pod["status"] = {"phase": "Succeeded" if code == 0 else "Failed",
                         "containerStatuses": [self._container(container, {"terminated": {
                             "exitCode": code, "reason": "Completed" if code == 0 else "Error"}})]}
        if run.deadline:
            pod["status"]["reason"] = "DeadlineExceeded"

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

            def _forced(self, path: str) -> bool:
                """Answer with a scripted error status (`answer_with`), if one matches."""
                with api.lock:
                    code = next((c for method, part, c in api.answer_with
                                 if method == self.command and part in path), None)
                if code is None:
                    return False
                reason = {403: "Forbidden", 404: "NotFound", 409: "AlreadyExists",
                          429: "TooManyRequests"}.get(code, "InternalError")
                self._send(code, status_body(code, reason, f"scripted {code} for {path}"))
                return True

            def _send_text(self, code: int, text: str) -> None:
                data = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _list_pods(self, namespace: str | None, query: dict[str, list[str]]) -> None:
                fields = dict(t.split("=", 1) for t in
                              query.get("fieldSelector", [""])[0].split(",") if t)
                terms = [t.split("=", 1) for t in query.get("labelSelector", [""])[0].split(",")
                         if t]
                with api.lock:
                    items = [copy.deepcopy(p) for (ns, _), p in api.pods.items()
                             if (namespace is None or ns == namespace)
                             and fields.get("spec.nodeName", p["spec"].get("nodeName", ""))
                             == p["spec"].get("nodeName", "")
                             and fields.get("status.phase", p["status"]["phase"])
                             == p["status"]["phase"]
                             and all(p["metadata"].get("labels", {}).get(k) == v
                                     for k, v in terms)]
                self._send(200, {"apiVersion": "v1", "kind": "PodList",
                                 "metadata": {"resourceVersion": "1"}, "items": items})

            def _get_job(self, namespace: str, name: str) -> None:
                with api.lock:
                    job = api.jobs.get((namespace, name))
                    if job is not None:
                        api._advance_job(namespace, job)
                        job = copy.deepcopy(job)
                if job is None:
                    self._send(404, status_body(404, "NotFound",
                                                f'jobs.batch "{name}" not found'))
                else:
                    self._send(200, job)

            def _get_log(self, namespace: str, pod: str, query: dict[str, list[str]]) -> None:
                with api.lock:
                    found = copy.deepcopy(api.pods.get((namespace, pod)))
                    text = api.logs.get((namespace, pod), "")
                if found is None:
                    self._send(404, status_body(404, "NotFound", f'pods "{pod}" not found'))
                    return
                if found["status"]["phase"] == "Pending":
                    container = found["spec"]["containers"][0]["name"]
                    self._send(400, status_body(400, "BadRequest",
                                                f'container "{container}" in pod "{pod}" is '
                                                "waiting to start: ContainerCreating"))
                    return
                limit = query.get("limitBytes")
                data = text.encode()
                self._send_text(200, (data[:int(limit[0])] if limit else data).decode(
                    errors="replace"))

            def do_DELETE(self) -> None:
                path, query, _ = self._record()
                if self._forced(path):
                    return
                m = re.fullmatch(r"/apis/batch/v1/namespaces/([^/]+)/jobs/([^/]+)", path)
                if m is None:
                    self._send(404, status_body(404, "NotFound", f"no route {path}"))
                    return
                key = (m.group(1), m.group(2))
                policy = query.get("propagationPolicy", ["Orphan"])[0]
                with api.lock:
                    job = api.jobs.pop(key, None)
                    if job is not None and policy in ("Background", "Foreground"):
                        for pod_key in [k for k, p in api.pods.items() if k[0] == key[0] and
                                        p["metadata"]["labels"].get("job-name") == key[1]]:
                            del api.pods[pod_key]
                            api.logs.pop(pod_key, None)
                if job is None:
                    self._send(404, status_body(404, "NotFound", f'jobs.batch "{key[1]}" not '
                                                "found"))
                else:
                    self._send(200, status_body(200, "", ""))

            def do_GET(self) -> None:
                path, query, _ = self._record()
                if self._forced(path):
                    return
                if m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", path):
                    self._list_pods(m.group(1), query)
                elif m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log", path):
                    self._get_log(m.group(1), m.group(2), query)
                elif m := re.fullmatch(r"/apis/batch/v1/namespaces/([^/]+)/jobs/([^/]+)", path):
                    self._get_job(m.group(1), m.group(2))
                elif m := re.fullmatch(r"/api/v1/nodes/([^/]+)", path):
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
                    self._list_pods(None, query)
                else:
                    self._send(404, status_body(404, "NotFound", f"no route {path}"))

            def do_PATCH(self) -> None:
                path, _, body = self._record()
                if self._forced(path):
                    return
                if status := re.fullmatch(r"/api/v1/nodes/([^/]+)/status", path):
                    self._patch_status(status.group(1), body)
                    return
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

            def _patch_status(self, name: str, body: Any) -> None:
                ctype = self.headers.get("Content-Type", "")
                if ctype not in ("application/strategic-merge-patch+json",
                                 "application/merge-patch+json"):
                    self._send(415, status_body(415, "UnsupportedMediaType", ctype))
                    return
                if not isinstance(body, dict) or not isinstance(body.get("status"), dict):
                    self._send(400, status_body(400, "BadRequest", "bad patch"))
                    return
                with api.lock:
                    node = api.nodes.get(name)
                    if node is None:
                        code, answer = 404, status_body(404, "NotFound",
                                                        f'nodes "{name}" not found')
                    else:
                        want = (body.get("metadata") or {}).get("resourceVersion")
                        if want is not None and want != node["metadata"]["resourceVersion"]:
                            code, answer = 409, status_body(409, "Conflict",
                                                            "the object has been modified")
                        else:
                            merge_status(node.setdefault("status", {}), body["status"],
                                         ctype == "application/strategic-merge-patch+json")
                            node["metadata"]["resourceVersion"] = api._rv()
                            code, answer = 200, copy.deepcopy(node)
                self._send(code, answer)

            def _create_event(self, namespace: str, body: Any) -> None:
                why = event_problem(namespace, body)
                if why is not None:
                    self._send(422, status_body(422, "Invalid", why))
                    return
                with api.lock:
                    event = copy.deepcopy(body)
                    meta = event.setdefault("metadata", {})
                    number = len(api.events) + 1
                    meta.setdefault("name", f"{meta.get('generateName', '')}{number:05x}")
                    meta.update(namespace=namespace, uid=f"uid-event-{number}",
                                resourceVersion=api._rv())
                    api.events.append(event)
                self._send(201, copy.deepcopy(event))

            def _create_job(self, namespace: str, body: Any) -> None:
                meta = (body or {}).get("metadata") or {}
                if (body or {}).get("kind") != "Job" or not meta.get("name") or not (
                        body.get("spec") or {}).get("template"):
                    self._send(422, status_body(422, "Invalid", "not a Job"))
                    return
                key = (namespace, meta["name"])
                with api.lock:
                    if key in api.jobs:
                        code, answer = 409, status_body(
                            409, "AlreadyExists", f'jobs.batch "{key[1]}" already exists')
                    else:
                        job = copy.deepcopy(body)
                        job["metadata"].update(namespace=namespace, uid=f"uid-job-{key[1]}",
                                               resourceVersion=api._rv())
                        api.jobs[key] = job
                        api._start_job(namespace, job)
                        code, answer = 201, copy.deepcopy(job)
                self._send(code, answer)

            def do_POST(self) -> None:
                path, _, body = self._record()
                if self._forced(path):
                    return
                if m := re.fullmatch(r"/apis/batch/v1/namespaces/([^/]+)/jobs", path):
                    self._create_job(m.group(1), body)
                    return
                if m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/events", path):
                    self._create_event(m.group(1), body)
                    return
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
