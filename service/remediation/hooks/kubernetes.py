"""Kubernetes hook: cordon the node, taint it `gpuhealth/at-risk=true:NoSchedule` and record
provenance in one PATCH, then evict its pods through the Eviction API, which honours
PodDisruptionBudgets (reference 4.2, 10.16). Never NoExecute (that evicts outside the PDBs),
never a DELETE fallback: a pod the budget keeps refusing is reported for a human.

Provenance: label `gpuhealth/cordon-by=gpuhealth` marks a cordon as ours (release acts only
on it); labels `gpuhealth/cordon-reason` (label-safe) and `gpuhealth/cordon-timestamp`, and
annotations with the full reason, the action id and whether the node was already cordoned
before us (then release leaves it cordoned). Node taints are a list the API replaces whole on
a patch, so every patch carries the resourceVersion it was computed from and is redone on a
409 Conflict rather than dropping someone else's taint.

Why, where every tool looks: each drain sets the Node condition `GpuHealthRisk` (status True,
reason `GpuFailureRisk`, the alert's summary as message) and each action writes a core/v1
Event on the Node (Cordoned, PodsEvicted or EvictionIncomplete, Released), so `kubectl
describe node`, node-problem-detector-aware tools and the cluster autoscaler see it. As
node-problem-detector does (pkg/exporters/k8sexporter/problemclient/problem_client.go,
SetConditions): a strategic-merge PATCH of `{"status": {"conditions": [...]}}` on the
nodes/status subresource, which merges the list by `type` so the kubelet's and other
detectors' conditions stay, with no resourceVersion (the kubelet writes status every few
seconds; a merge by type needs no lock). A release sets the condition to False with reason
`Released` rather than deleting it, as NPD's monitors flip a resolved condition back to
False (pkg/custompluginmonitor/custom_plugin_monitor.go, generateStatus). Node Events follow
the kubelet's and NPD's reference (involvedObject uid = the node name, namespace "default",
which is where `kubectl describe node` finds them). Both are best effort: a refused write is
a failed Step and a note in the result, never a failed drain (the cordon and the taint are
what keep pods off the node).

The `kubernetes` client is only used inside this module and kube_client.py (the connection,
error wording and call record it shares with the diagnostics site)."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import urllib3.exceptions
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from pydantic import Field

from service.remediation.hooks.base import (
    PROVENANCE,
    ActionRequest,
    HookResult,
    NodeState,
    Step,
)
from service.remediation.hooks.kube_client import (
    API_ERRORS,
    MAX_DETAIL,
    CallLog,
    KubeConnection,
    api_error,
    error_text,
    make_api_client,
    transient_status,
)
from service.remediation.hooks.slurm import drain_reason

TAINT_KEY = f"{PROVENANCE}/at-risk"
TAINT_VALUE = "true"
TAINT_EFFECT = "NoSchedule"
LABEL_BY = f"{PROVENANCE}/cordon-by"
LABEL_REASON = f"{PROVENANCE}/cordon-reason"
LABEL_TIMESTAMP = f"{PROVENANCE}/cordon-timestamp"
ANNOTATION_REASON = f"{PROVENANCE}/cordon-reason"
ANNOTATION_ACTION = f"{PROVENANCE}/action-id"
ANNOTATION_WAS_CORDONED = f"{PROVENANCE}/was-unschedulable"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
GPU_RESOURCE = "nvidia.com/gpu"
CONFLICT_RETRIES = 5
CONDITION_TYPE = "GpuHealthRisk"
CONDITION_REASON = "GpuFailureRisk"  # one stable reason; the message says which signal
RELEASED_REASON = "Released"
# A cluster-scoped object's Events live in "default" (the API's legacy Event validation).
EVENT_NAMESPACE = "default"
MAX_MESSAGE = 1024  # bytes: events.k8s.io's note limit, also used for the condition


class KubernetesConfig(KubeConnection):
    """The cluster (kube_client.KubeConnection) and how to drain a node in it."""

    namespaces_excluded: list[str] = Field(default_factory=lambda: ["kube-system"])
    gpu_pods_only: bool = False  # evict only pods requesting nvidia.com/gpu
    eviction_timeout_s: float = Field(default=300.0, gt=0, le=3600)  # all pods together
    backoff_initial_s: float = Field(default=5.0, gt=0, le=300)  # after a 429, doubled
    backoff_max_s: float = Field(default=60.0, gt=0, le=600)
    node_condition: bool = True  # set/clear the GpuHealthRisk condition (nodes/status patch)
    events: bool = True  # write an Event on the Node per action (events create)


def label_safe(text: str, limit: int = 63) -> str:
    """A valid label value: [A-Za-z0-9._-], at most 63, alphanumeric at both ends."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:limit]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def bounded(text: str, limit: int = MAX_MESSAGE) -> str:
    """One printable line of at most `limit` UTF-8 bytes (an ellipsis marks a cut)."""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if len(line.encode()) <= limit:
        return line
    cut = line.encode()[:limit - len("…".encode())].decode(errors="ignore")
    return cut + "…"


def rfc3339(at: float) -> str:
    """A metav1.Time: RFC 3339 in UTC, whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


@dataclass
class _Pending:
    """A pod still to evict, and when to try it again."""

    namespace: str
    name: str
    next_at: float = 0.0
    delay_s: float = 0.0
    last: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class _Run(CallLog):
    """What one execute/release did so far."""

    node: k8s.V1Node | None = None  # as last read
    patched: bool = False  # whether the cordon PATCH was sent (else it was ours already)
    notes: list[str] = field(default_factory=list)  # best-effort writes that failed

    def result(self, ok: bool, detail: str, retry: bool = False,
               moved: list[str] | None = None, left: list[str] | None = None) -> HookResult:
        if self.notes:
            detail = f"{detail}; {'; '.join(self.notes)}"
        return HookResult(ok=ok, retry=retry, detail=detail, steps=tuple(self.steps),
                          moved=tuple(moved or ()), left=tuple(left or ()))


class KubernetesHook:
    name = "kubernetes"

    def __init__(self, config: KubernetesConfig, api_client: k8s.ApiClient | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.api = k8s.CoreV1Api(api_client or make_api_client(config))
        self.clock = clock
        # Which gpuhealth wrote an Event (events' reportingInstance, at most 128).
        self.instance = f"{PROVENANCE}-{socket.gethostname()}"[:128]

    # -- Hook ----------------------------------------------------------------------------------

    def plan(self, req: ActionRequest) -> list[Step]:
        node = req.node
        events = f"POST /api/v1/namespaces/{EVENT_NAMESPACE}/events"
        why: list[Step] = []
        if self.config.node_condition:
            why.append(Step(call=f"PATCH /api/v1/nodes/{node}/status",
                            detail=f"condition {CONDITION_TYPE}=True reason {CONDITION_REASON} "
                                   "(strategic merge by type: other conditions kept)"))
        if self.config.events:
            why.append(Step(call=events, detail=f"Warning Cordoned on Node {node}"))
        return [
            Step(call=f"GET /api/v1/nodes/{node}", detail="read taints and labels"),
            Step(call=f"PATCH /api/v1/nodes/{node}",
                 detail=f"spec.unschedulable=true, taint {TAINT_KEY}={TAINT_VALUE}:"
                        f"{TAINT_EFFECT}, labels {LABEL_BY}={PROVENANCE}, "
                        f"{LABEL_REASON}={self._reason_label(req)}, {LABEL_TIMESTAMP}"),
            *why,
            Step(call=f"GET /api/v1/pods?fieldSelector=spec.nodeName={node}",
                 detail="skip DaemonSet, mirror and finished pods and namespaces "
                        f"{', '.join(self.config.namespaces_excluded) or '(none)'}"
                        + ("; only pods requesting nvidia.com/gpu"
                           if self.config.gpu_pods_only else "")),
            Step(call="POST /api/v1/namespaces/<ns>/pods/<pod>/eviction",
                 detail=f"per pod; 429 retried with backoff from "
                        f"{self.config.backoff_initial_s:g} s for up to "
                        f"{self.config.eviction_timeout_s:g} s"),
            *([Step(call=events, detail=f"PodsEvicted or EvictionIncomplete on Node {node}")]
              if self.config.events else []),
        ]

    def execute(self, req: ActionRequest) -> HookResult:
        run = _Run()
        try:
            cordon = self._cordon(req, run)
        except ApiException as exc:
            return run.result(False, f"cordon of {req.node} failed: {api_error(exc)}",
                              retry=transient_status(exc.status))
        except urllib3.exceptions.HTTPError as exc:
            return run.result(False, f"cordon of {req.node} failed: {exc}", retry=True)
        if cordon is not None:
            return run.result(False, cordon)
        because = bounded(f"alert {req.alert_id}: {req.summary}")
        self._set_condition(req.node, run, True, CONDITION_REASON, because)
        if run.patched:  # not again for a retried action that found the node ours already
            self._event(req.node, run, "Warning", "Cordoned", "Cordon",
                        f"cordoned and tainted {TAINT_KEY}={TAINT_VALUE}:{TAINT_EFFECT}; "
                        f"{because}")

        path = f"GET /api/v1/pods?fieldSelector=spec.nodeName={req.node}"
        try:
            pods = run.call(path, lambda: self.api.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={req.node}",
                _request_timeout=self.config.request_timeout_s)).items
        except ApiException as exc:
            return run.result(False, f"cordoned {req.node}, listing its pods failed: "
                                     f"{api_error(exc)}", retry=transient_status(exc.status))
        except urllib3.exceptions.HTTPError as exc:
            return run.result(False, f"cordoned {req.node}, listing its pods failed: {exc}",
                              retry=True)

        todo: list[_Pending] = []
        skipped: list[str] = []
        for pod in pods:
            meta = pod.metadata or k8s.V1ObjectMeta()
            why = self._skip_reason(pod)
            if why:
                skipped.append(f"{meta.namespace}/{meta.name} ({why})")
            else:
                todo.append(_Pending(str(meta.namespace), str(meta.name)))
        run.note(f"{len(pods)} pod(s); to evict: {len(todo)}"
                 + ("; not evicted: " + "; ".join(skipped) if skipped else ""))

        moved, left, retry = self._evict_all(todo, run)
        ok = not left
        counts = f"evicted {len(moved)} pod(s), {len(left)} left, {len(skipped)} skipped"
        if left:
            self._event(req.node, run, "Warning", "EvictionIncomplete", "Evict",
                        f"{counts}; left: {'; '.join(left)}")
        else:
            self._event(req.node, run, "Normal", "PodsEvicted", "Evict", counts)
        detail = f"cordoned and tainted {req.node}; {counts}"
        return run.result(ok, detail, retry=retry, moved=moved, left=left)

    def release(self, node: str) -> HookResult:
        run = _Run()
        for _ in range(CONFLICT_RETRIES):
            try:
                current = self._read(node, run)
                if current is None:
                    return run.result(False, f"node {node} not found")
                meta, spec = _parts(current)
                labels = meta.labels or {}
                annotations = meta.annotations or {}
                if labels.get(LABEL_BY) != PROVENANCE:
                    if spec.unschedulable:
                        return run.result(False, f"{node} is cordoned, but not by {PROVENANCE} "
                                                 f"(no {LABEL_BY} label); not uncordoning it")
                    # Uncordoned by hand: still clear the risk our drain reported.
                    self._clear_condition(node, run, "the node was no longer cordoned by us")
                    return run.result(True, f"{node} is not cordoned by {PROVENANCE}; "
                                            "nothing to release")
                keep_cordon = annotations.get(ANNOTATION_WAS_CORDONED) == "true"
                taints = [self._plain(t) for t in (spec.taints or [])
                          if not (t.key == TAINT_KEY and t.effect == TAINT_EFFECT)]
                body = {"metadata": {"resourceVersion": meta.resource_version,
                                     "labels": dict.fromkeys(
                                         (LABEL_BY, LABEL_REASON, LABEL_TIMESTAMP)),
                                     "annotations": dict.fromkeys(
                                         (ANNOTATION_REASON, ANNOTATION_ACTION,
                                          ANNOTATION_WAS_CORDONED))},
                        "spec": {"unschedulable": keep_cordon, "taints": taints}}
                run.call(f"PATCH /api/v1/nodes/{node}", partial(
                    self.api.patch_node, node, body,
                    _request_timeout=self.config.request_timeout_s))
            except ApiException as exc:
                if exc.status == 409:
                    continue
                return run.result(False, f"release of {node} failed: {api_error(exc)}",
                                  retry=transient_status(exc.status))
            except urllib3.exceptions.HTTPError as exc:
                return run.result(False, f"release of {node} failed: {exc}", retry=True)
            how = "left cordoned (it was before us)" if keep_cordon else "uncordoned"
            self._clear_condition(node, run, f"removed {TAINT_KEY} and {how}")
            return run.result(True, f"removed {TAINT_KEY} from {node} and {how}")
        return run.result(False, f"release of {node}: node kept changing (409 Conflict "
                                 f"{CONFLICT_RETRIES} times)", retry=True)

    def inspect(self, node: str) -> NodeState:
        run = _Run()
        try:
            current = self._read(node, run)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            why = api_error(exc) if isinstance(exc, ApiException) else str(exc)
            return NodeState(node=node, exists=True, drained_by_us=False,
                             detail=f"reading {node} failed: {why}", extra={"error": why})
        if current is None:
            return NodeState(node=node, exists=False, drained_by_us=False,
                             detail=f"node {node} not found")
        meta, spec = _parts(current)
        labels = meta.labels or {}
        ours = labels.get(LABEL_BY) == PROVENANCE
        cordoned = bool(spec.unschedulable)
        taints = [f"{t.key}={t.value or ''}:{t.effect}" for t in (spec.taints or [])]
        return NodeState(node=node, exists=True, drained_by_us=ours,
                         drained_by_other=cordoned and not ours,
                         detail=f"unschedulable={cordoned} taints={taints}",
                         extra={"unschedulable": cordoned, "taints": taints,
                                "labels": {k: v for k, v in labels.items()
                                           if k.startswith(f"{PROVENANCE}/")}})

    # -- cordon --------------------------------------------------------------------------------

    def _reason_label(self, req: ActionRequest) -> str:
        return label_safe(f"alert-{req.alert_id}-{req.summary}")

    def _read(self, node: str, run: _Run) -> k8s.V1Node | None:
        try:
            run.node = run.call(f"GET /api/v1/nodes/{node}", lambda: self.api.read_node(
                node, _request_timeout=self.config.request_timeout_s))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return run.node

    def _plain(self, model: Any) -> Any:
        """A client model as the JSON the API expects (camelCase, no nulls)."""
        return self.api.api_client.sanitize_for_serialization(model)

    def _cordon(self, req: ActionRequest, run: _Run) -> str | None:
        """Cordon + taint + provenance in one conditional PATCH; why not, or None when done."""
        for _ in range(CONFLICT_RETRIES):
            current = self._read(req.node, run)
            if current is None:
                return f"node {req.node} not found"
            meta, spec = _parts(current)
            labels = meta.labels or {}
            taints = list(spec.taints or [])
            has_taint = any(t.key == TAINT_KEY and t.effect == TAINT_EFFECT for t in taints)
            ours = labels.get(LABEL_BY) == PROVENANCE
            if ours and has_taint and spec.unschedulable:
                run.note("already cordoned and tainted by us: no patch")
                return None
            new_taints = [self._plain(t) for t in taints]
            if not has_taint:
                new_taints.append({"key": TAINT_KEY, "value": TAINT_VALUE,
                                   "effect": TAINT_EFFECT})
            now = self.clock()
            patch_meta: dict[str, Any] = {"resourceVersion": meta.resource_version}
            if not ours:
                patch_meta["labels"] = {LABEL_BY: PROVENANCE, LABEL_REASON: self._reason_label(req),
                                  LABEL_TIMESTAMP: time.strftime("%Y%m%dT%H%M%SZ",
                                                                 time.gmtime(now))}
                patch_meta["annotations"] = {
                    ANNOTATION_REASON: drain_reason(req), ANNOTATION_ACTION: req.action_id,
                    ANNOTATION_WAS_CORDONED: "true" if spec.unschedulable else "false"}
            body = {"metadata": patch_meta,
                    "spec": {"unschedulable": True, "taints": new_taints}}
            try:
                run.call(f"PATCH /api/v1/nodes/{req.node}", partial(
                    self.api.patch_node, req.node, body,
                    _request_timeout=self.config.request_timeout_s))
            except ApiException as exc:
                if exc.status == 409:  # someone changed the node since we read it
                    continue
                raise
            run.patched = True
            return None
        return f"node {req.node} kept changing (409 Conflict {CONFLICT_RETRIES} times)"

    # -- condition and events (best effort) -----------------------------------------------------

    def _set_condition(self, node: str, run: _Run, risk: bool, reason: str, message: str,
                       ) -> None:
        """Set our condition; its lastTransitionTime moves only when its status changes."""
        if not self.config.node_condition:
            return
        status = "True" if risk else "False"
        now = rfc3339(self.clock())
        since = now
        before = _condition(run.node)
        if before is not None and before.status == status and before.last_transition_time:
            since = rfc3339(before.last_transition_time.timestamp())
        body = {"status": {"conditions": [{
            "type": CONDITION_TYPE, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": since}]}}
        try:
            run.call(f"PATCH /api/v1/nodes/{node}/status", partial(
                self.api.patch_node_status, node, body,
                _content_type="application/strategic-merge-patch+json",
                _request_timeout=self.config.request_timeout_s))
        except API_ERRORS as exc:
            run.notes.append(f"node condition {CONDITION_TYPE} not set: {error_text(exc)}")

    def _clear_condition(self, node: str, run: _Run, how: str) -> None:
        """Flip a True GpuHealthRisk to False/Released (never deleted, as NPD does) and say
        so in an Event; nothing when there is none to clear."""
        before = _condition(run.node)
        if before is None or before.status == "False":
            return
        message = f"released by {PROVENANCE}: {how}"
        self._set_condition(node, run, False, RELEASED_REASON, message)
        self._event(node, run, "Normal", RELEASED_REASON, "Release", message)

    def _event(self, node: str, run: _Run, type_: str, reason: str, action: str,
               message: str) -> None:
        """One core/v1 Event on the Node, referenced as the kubelet and NPD do."""
        if not self.config.events:
            return
        now = rfc3339(self.clock())
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{node}.", "namespace": EVENT_NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
            "type": type_, "reason": reason, "action": action, "message": bounded(message),
            "source": {"component": PROVENANCE},
            "reportingComponent": PROVENANCE, "reportingInstance": self.instance,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1}
        try:
            run.call(f"POST /api/v1/namespaces/{EVENT_NAMESPACE}/events", partial(
                self.api.create_namespaced_event, EVENT_NAMESPACE,
                k8s.CoreV1Event.model_validate(body),
                _request_timeout=self.config.request_timeout_s))
        except API_ERRORS as exc:
            run.notes.append(f"event {reason} not written: {error_text(exc)}")

    # -- evict ---------------------------------------------------------------------------------

    def _skip_reason(self, pod: k8s.V1Pod) -> str | None:
        meta = pod.metadata or k8s.V1ObjectMeta()
        if meta.namespace in self.config.namespaces_excluded:
            return f"namespace {meta.namespace} excluded"
        if MIRROR_ANNOTATION in (meta.annotations or {}):
            return "mirror (static) pod"
        if any(ref.kind == "DaemonSet" for ref in meta.owner_references or []):
            return "DaemonSet"
        phase = pod.status.phase if pod.status else None
        if phase in ("Succeeded", "Failed"):
            return f"already {phase}"
        if meta.deletion_timestamp is not None:
            return "already terminating"
        if self.config.gpu_pods_only and not _requests_gpu(pod):
            return "no GPU requested"
        return None

    def _evict_all(self, todo: list[_Pending], run: _Run,
                   ) -> tuple[list[str], list[str], bool]:
        """Round-robin over the pods so one blocked by its budget does not starve the rest.
        Returns moved, left (with why) and whether a retry may help."""
        deadline = time.monotonic() + self.config.eviction_timeout_s
        moved: list[str] = []
        left: list[str] = []
        retry = False
        while todo:
            now = time.monotonic()
            for pod in [p for p in todo if p.next_at <= now]:
                outcome = self._evict(pod, run)
                if outcome == "moved":
                    todo.remove(pod)
                    moved.append(pod.key)
                elif outcome == "failed":
                    todo.remove(pod)
                    left.append(f"{pod.key}: eviction refused: {pod.last}")
                else:  # transient: back off
                    pod.delay_s = min(self.config.backoff_max_s,
                                      pod.delay_s * 2 or self.config.backoff_initial_s)
                    pod.next_at = time.monotonic() + pod.delay_s
            if not todo:
                break
            wake = min(p.next_at for p in todo)
            if wake >= deadline:
                for pod in todo:
                    left.append(f"{pod.key}: not evicted within "
                                f"{self.config.eviction_timeout_s:g} s: {pod.last}")
                retry = True
                break
            time.sleep(max(0.0, wake - time.monotonic()))
        return moved, left, retry

    def _evict(self, pod: _Pending, run: _Run) -> str:
        """"moved", "failed" (needs a human) or "retry"."""
        body = k8s.V1Eviction(api_version="policy/v1", kind="Eviction",
                              metadata=k8s.V1ObjectMeta(name=pod.name,
                                                        namespace=pod.namespace))
        what = f"POST /api/v1/namespaces/{pod.namespace}/pods/{pod.name}/eviction"
        try:
            run.call(what, lambda: self.api.create_namespaced_pod_eviction(
                pod.name, pod.namespace, body, _request_timeout=self.config.request_timeout_s))
        except ApiException as exc:
            pod.last = api_error(exc)
            if exc.status == 404:
                return "moved"  # gone already
            return "retry" if transient_status(exc.status) else "failed"
        except urllib3.exceptions.HTTPError as exc:
            pod.last = f"network error: {exc}"[:MAX_DETAIL]
            return "retry"
        return "moved"


def _parts(node: k8s.V1Node) -> tuple[k8s.V1ObjectMeta, k8s.V1NodeSpec]:
    return node.metadata or k8s.V1ObjectMeta(), node.spec or k8s.V1NodeSpec()


def _condition(node: k8s.V1Node | None) -> k8s.V1NodeCondition | None:
    """Our condition on the node as read, if any."""
    conditions = (node.status.conditions if node is not None and node.status else None) or []
    return next((c for c in conditions if c.type == CONDITION_TYPE), None)


def _requests_gpu(pod: k8s.V1Pod) -> bool:
    if pod.spec is None:
        return False
    containers = list(pod.spec.containers or []) + list(pod.spec.init_containers or [])
    for c in containers:
        res = c.resources
        for amounts in (res.requests, res.limits) if res else ():
            value = (amounts or {}).get(GPU_RESOURCE)
            if value is not None and str(value) not in ("0", ""):
                return True
    return False
