"""A site that runs the suite as a Kubernetes Job pinned to the node, through the API server
(the hook's client, service/remediation/hooks/kube_client.py), so no pod of anyone's shares it.

Before anything is created the node is read and its pods listed: a gate tests only a node
gpuhealth cordoned (our `cordon-by` label, as the hook's `inspect` decides `drained_by_us`), a
sweep only a schedulable node nobody holds, and any pod there other than DaemonSet pods,
mirror (static) pods, finished pods and pods of the ignored namespaces (kube-system by
default, which the hook does not evict either) means a user's workload: the run is refused.
A sweep also waits while pods the scheduler cannot place want the GPUs it would take (as the
Slurm site waits for jobs queued for capacity): a sweep only uses capacity nobody waits for.

The Job (batch/v1): one pod, `backoffLimit: 0` (a failed test is a result, not something to
retry), `activeDeadlineSeconds` = the suite's time limit, `ttlSecondsAfterFinished` as a
backstop, our labels (`app.kubernetes.io/managed-by: gpuhealth`). It is pinned by a required
node affinity on `metadata.name` (matchFields), the way DaemonSet pods are pinned: it goes
through the scheduler, so the GPUs it asks for are accounted and a sweep never lands beside a
job; `pin: node_name` sets `spec.nodeName` instead (bypasses the scheduler). On a node we hold
it tolerates our taint and the cordon's `node.kubernetes.io/unschedulable`; a sweep tolerates
neither, so a node cordoned meanwhile gets no test.

Then the Job is read every `poll_interval_s` until Complete or Failed; the pod's log (bounded,
raw bytes: a JSON log must not be parsed by the client) and its container's exit code are the
result. Past `activeDeadlineSeconds` (the Job controller says DeadlineExceeded) or our own
deadline a little later, the run timed out with whatever the log holds. The Job is deleted
(propagationPolicy Background, so its pod goes too) at the end, whatever happened. A run whose
outcome cannot be known (its pod never started, the Job vanished, the API stopped answering)
is reported as refused with why: an error, never a pass or a fail.

References: Jobs, https://kubernetes.io/docs/concepts/workloads/controllers/job/ (deadline,
backoff limit, TTL); node affinity matchFields and the unschedulable taint,
https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/; the pod log
API, https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/."""

from __future__ import annotations

import math
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from pydantic import Field

from collectors.diagnostics.output import MAX_OUTPUT_BYTES
from service.diagnostics.site import Purpose, Ran
from service.remediation.hooks.base import PROVENANCE, Step
from service.remediation.hooks.kube_client import (
    API_ERRORS,
    CallLog,
    KubeConnection,
    error_text,
    make_api_client,
    transient_status,
)
from service.remediation.hooks.kubernetes import (
    GPU_RESOURCE,
    LABEL_BY,
    MIRROR_ANNOTATION,
    TAINT_EFFECT,
    TAINT_KEY,
    TAINT_VALUE,
    label_safe,
)
from service.remediation.hooks.target import target_problem

JOB_PREFIX = "gpuhealth-diag"
CONTAINER = "diag"
MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB = f"{PROVENANCE}/diag-job"  # on the pod too: how we find it
LABEL_NODE = f"{PROVENANCE}/diag-node"
LABEL_PURPOSE = f"{PROVENANCE}/diag-purpose"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
# A Job's name goes into its pods' `job-name` label, so it must be a DNS-1123 label (<= 63).
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
SUFFIX_CHARS = 6
NODE_PART = 63 - len(JOB_PREFIX) - 2 - SUFFIX_CHARS
POLL_ERRORS = 5  # transient failures in a row reading the Job before we give it up
MAX_LISTED = 5  # pod names quoted in a refusal


def job_name(node: str, suffix: str | None = None) -> str:
    """`gpuhealth-diag-<node>-<random>`: a DNS-1123 label of at most 63 characters made from
    a node name that passed the hostname grammar; ValueError if it cannot be."""
    stem = re.sub(r"[^a-z0-9]+", "-", node.lower()).strip("-")[:NODE_PART].strip("-")
    tail = suffix if suffix is not None else secrets.token_hex(SUFFIX_CHARS // 2)
    name = "-".join(p for p in (JOB_PREFIX, stem, tail) if p)
    if not DNS_LABEL.fullmatch(name):
        raise ValueError(f"cannot make a Job name from node {node!r}: {name!r}")
    return name


class KubernetesSiteConfig(KubeConnection):
    """The cluster (kube_client.KubeConnection: host, kubeconfig, context, in_cluster,
    request_timeout_s) and the Job that runs a suite there."""

    namespace: str = Field(default="gpuhealth", pattern=f"^{DNS_LABEL.pattern}$")
    image: str = Field(default="", pattern=r"^\S*$",
                       description="the image with the diagnostic tools; required")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    gpus: int = Field(default=8, ge=0, le=64)  # the limit the pod asks for; 0: none
    gpu_resource: str = Field(default=GPU_RESOURCE, min_length=1)
    service_account: str = ""  # empty: the namespace's default
    pin: Literal["affinity", "node_name"] = "affinity"
    namespaces_ignored: list[str] = Field(default_factory=lambda: ["kube-system"])
    ttl_after_finished_s: int = Field(default=3600, ge=0, le=7 * 86400)
    start_within_s: float = Field(default=300.0, gt=0, le=3600)  # else: refused, never started
    grace_s: float = Field(default=60.0, ge=0, le=600)  # past the deadline, for the controller
    poll_interval_s: float = Field(default=2.0, gt=0, le=60)


@dataclass(frozen=True, slots=True)
class _Ended:
    """How the Job ended: "Complete", "Failed" or "Timeout" (ours), with the reason."""

    kind: str
    reason: str = ""
    message: str = ""

    @property
    def timed_out(self) -> bool:
        return self.kind == "Timeout" or self.reason == "DeadlineExceeded"


class KubernetesSite:
    name = "kubernetes"

    def __init__(self, config: KubernetesSiteConfig, api_client: k8s.ApiClient | None = None,
                 *, sleep: Callable[[float], None] = time.sleep) -> None:
        if not config.image:
            raise ValueError("kubernetes diagnostics site: `image` is required (the container "
                             "image with the diagnostic tools)")
        self.config = config
        api = api_client or make_api_client(config, who="kubernetes diagnostics site")
        self.core = k8s.CoreV1Api(api)
        self.batch = k8s.BatchV1Api(api)
        self.sleep = sleep

    # -- the Job ---------------------------------------------------------------------------------

    def job_body(self, name: str, node: str, argv: list[str], timeout_s: float,
                 purpose: Purpose, held: bool) -> dict[str, Any]:
        """The Job that runs `argv` on `node`; `held`: the node is cordoned by us."""
        cfg = self.config
        labels = {MANAGED_BY: PROVENANCE, LABEL_JOB: name, LABEL_NODE: label_safe(node),
                  LABEL_PURPOSE: str(purpose)}
        container: dict[str, Any] = {"name": CONTAINER, "image": cfg.image,
                                     "imagePullPolicy": cfg.image_pull_policy,
                                     "command": list(argv)}
        if cfg.gpus:
            container["resources"] = {"limits": {cfg.gpu_resource: str(cfg.gpus)}}
        pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container],
                               "automountServiceAccountToken": False}
        if cfg.pin == "node_name":
            pod["nodeName"] = node
        else:
            pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
        if held:
            pod["tolerations"] = [
                {"key": TAINT_KEY, "operator": "Equal", "value": TAINT_VALUE,
                 "effect": TAINT_EFFECT},
                {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
        if cfg.service_account:
            pod["serviceAccountName"] = cfg.service_account
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels,
                             "annotations": {f"{PROVENANCE}/node": node}},
                "spec": {"backoffLimit": 0,
                         "activeDeadlineSeconds": max(1, math.ceil(timeout_s)),
                         "ttlSecondsAfterFinished": cfg.ttl_after_finished_s,
                         "template": {"metadata": {"labels": labels}, "spec": pod}}}

    # -- Site -------------------------------------------------------------------------------------

    def run(self, node: str, argv: list[str], timeout_s: float, purpose: Purpose) -> Ran:
        why = target_problem(node)
        if why is not None:
            return Ran(refused=why)
        if not argv:
            return Ran(refused="no command to run")
        log = CallLog()
        held, why = self._admit(node, purpose, log)
        if why:
            return Ran(refused=why, steps=tuple(log.steps))
        name = job_name(node)
        ns = self.config.namespace
        body = k8s.V1Job.model_validate(self.job_body(name, node, argv, timeout_s, purpose,
                                                      held))
        start = time.monotonic()
        try:
            log.call(f"POST /apis/batch/v1/namespaces/{ns}/jobs", partial(
                self.batch.create_namespaced_job, ns, body,
                _request_timeout=self.config.request_timeout_s))
        except API_ERRORS as exc:
            # Answered with an error: nothing was made. No answer (or a 5xx): it may exist.
            if not isinstance(exc, ApiException) or transient_status(exc.status) or (
                    exc.status is not None and exc.status >= 500):
                self._delete(name, log)
            return Ran(refused=f"could not create the Job {name} in namespace {ns}: "
                               f"{error_text(exc)}", steps=tuple(log.steps))
        log.note(f"{name} on {node}, deadline {body.spec.active_deadline_seconds} s"
                 if body.spec else name)
        try:
            ran = self._outcome(name, timeout_s, start, log)
        finally:
            self._delete(name, log)
        return replace(ran, steps=tuple(log.steps), duration_s=time.monotonic() - start)

    # -- before: may it run there? ------------------------------------------------------------

    def _admit(self, node: str, purpose: Purpose, log: CallLog) -> tuple[bool, str]:
        """Whether we hold the node, and why not to test it ('' when it may be tested)."""
        timeout = self.config.request_timeout_s
        try:
            current = log.call(f"GET /api/v1/nodes/{node}", partial(
                self.core.read_node, node, _request_timeout=timeout))
        except API_ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return False, f"node {node} not found"
            return False, f"cannot read node {node}: {error_text(exc)}; not testing it"
        meta = current.metadata or k8s.V1ObjectMeta()
        spec = current.spec or k8s.V1NodeSpec()
        ours = (meta.labels or {}).get(LABEL_BY) == PROVENANCE
        cordoned = bool(spec.unschedulable)
        tainted = any(t.key == TAINT_KEY for t in spec.taints or [])
        log.note(f"unschedulable={cordoned} cordoned by {PROVENANCE}={ours} "
                 f"{TAINT_KEY}={tainted}")
        if cordoned and not ours:
            return False, (f"{node} is cordoned, but not by {PROVENANCE} (no {LABEL_BY} label); "
                           "not testing it")
        if purpose is Purpose.GATE and not ours:
            return False, (f"{node} is not cordoned by {PROVENANCE} (no {LABEL_BY} label); a "
                           "gate tests only nodes gpuhealth holds")
        if purpose is Purpose.SWEEP and (ours or cordoned or tainted):
            return False, (f"{node} is held by {PROVENANCE} (cordoned or tainted {TAINT_KEY}); "
                           "a sweep tests only schedulable nodes")
        try:
            pods = log.call(f"GET /api/v1/pods?fieldSelector=spec.nodeName={node}", partial(
                self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}",
                _request_timeout=timeout)).items
        except API_ERRORS as exc:
            return False, f"cannot list the pods on {node}: {error_text(exc)}; not testing it"
        busy = [f"{p.metadata.namespace}/{p.metadata.name}" for p in pods
                if p.metadata is not None and not self._not_work(p)]
        log.note(f"{len(pods)} pod(s), {len(busy)} of them work: {', '.join(busy) or 'none'}")
        if busy:
            return False, f"{node} has {len(busy)} pod(s) on it ({_some(busy)}); not testing it"
        if purpose is Purpose.SWEEP:
            return False, self._queued(log)
        return ours or tainted, ""

    def _queued(self, log: CallLog) -> str:
        """Why a sweep must wait: pods the scheduler cannot place for want of what the test
        would take (the GPU resource; with `gpus: 0`, anything), which it would delay."""
        try:
            pending = log.call("GET /api/v1/pods?fieldSelector=status.phase=Pending", partial(
                self.core.list_pod_for_all_namespaces, field_selector="status.phase=Pending",
                _request_timeout=self.config.request_timeout_s)).items
        except API_ERRORS as exc:
            return (f"cannot list the pods waiting to be scheduled: {error_text(exc)}; "
                    "not sweeping")
        resource = self.config.gpu_resource if self.config.gpus else ""
        waiting = [f"{p.metadata.namespace}/{p.metadata.name}" for p in pending
                   if p.metadata is not None and _unschedulable(p)
                   and (not resource or _asks_for(p, resource))]
        log.note(f"{len(pending)} pending, {len(waiting)} waiting for capacity")
        if waiting:
            return (f"{len(waiting)} pod(s) wait for {resource or 'capacity'} "
                    f"({_some(waiting)}); a sweep takes only idle capacity nobody waits for")
        return ""

    def _not_work(self, pod: k8s.V1Pod) -> bool:
        """A pod that is no one's workload: DaemonSet, mirror, finished, ignored namespace."""
        meta = pod.metadata or k8s.V1ObjectMeta()
        if meta.namespace in self.config.namespaces_ignored:
            return True
        if MIRROR_ANNOTATION in (meta.annotations or {}):
            return True
        if any(ref.kind == "DaemonSet" for ref in meta.owner_references or []):
            return True
        return pod.status is not None and pod.status.phase in ("Succeeded", "Failed")

    # -- during: wait for it ------------------------------------------------------------------

    def _outcome(self, name: str, timeout_s: float, start: float, log: CallLog) -> Ran:
        ended = self._wait(name, timeout_s, start, log)
        if isinstance(ended, str):
            return Ran(refused=ended)
        try:
            pod = self._pod(name, log)
        except API_ERRORS as exc:
            pod, why = None, f"its pod could not be listed: {error_text(exc)}"
        else:
            why = "its pod is gone"
        text = ""
        if pod is not None:
            text, why = self._log(pod, log)
        if ended.timed_out:  # whatever it printed by then
            return Ran(timed_out=True, stdout=text)
        if why:
            return Ran(refused=f"the Job {name} ended ({_words(ended)}) but {why}: no result")
        code = _exit_code(pod) if pod is not None else None
        if code is None and ended.kind == "Complete":
            code = 0  # a Job completes only when its pod succeeded
        return Ran(exit_code=code, stdout=text)

    def _wait(self, name: str, timeout_s: float, start: float, log: CallLog) -> _Ended | str:
        """How the Job ended, or why we cannot tell (a refusal)."""
        ns, cfg = self.config.namespace, self.config
        hard = start + timeout_s + cfg.grace_s
        start_by = start + min(cfg.start_within_s, timeout_s)
        what = f"GET /apis/batch/v1/namespaces/{ns}/jobs/{name}"
        started, errors, reads = False, 0, 0
        while True:
            try:
                job = log.call(what, partial(self.batch.read_namespaced_job, name, ns,
                                             _request_timeout=cfg.request_timeout_s))
            except API_ERRORS as exc:
                if isinstance(exc, ApiException) and exc.status == 404:
                    return f"the Job {name} vanished before it finished (deleted by someone)"
                errors += 1
                if errors >= POLL_ERRORS or (isinstance(exc, ApiException)
                                             and not transient_status(exc.status)):
                    return f"lost track of the Job {name}: {error_text(exc)}"
            else:
                errors, reads = 0, reads + 1
                ended = _ended(job)
                _merge_reads(log, reads, _words(ended) if ended else "running")
                if ended is not None:
                    return ended
            now = time.monotonic()
            if now >= hard:
                return _Ended("Timeout", "not finished within the time limit")
            if not started and now >= start_by:
                why = self._not_started(name, log)
                if why:
                    return (f"the Job {name}'s pod did not start within "
                            f"{min(cfg.start_within_s, timeout_s):g} s: {why}")
                started = True
            self.sleep(cfg.poll_interval_s)

    def _pods(self, name: str, log: CallLog) -> list[k8s.V1Pod]:
        ns = self.config.namespace
        selector = f"{LABEL_JOB}={name}"
        return list(log.call(f"GET /api/v1/namespaces/{ns}/pods?labelSelector={selector}",
                             partial(self.core.list_namespaced_pod, ns,
                                     label_selector=selector,
                                     _request_timeout=self.config.request_timeout_s)).items)

    def _not_started(self, name: str, log: CallLog) -> str:
        """Why the Job's pod is not running yet, or '' once it has started."""
        try:
            pods = self._pods(name, log)
        except API_ERRORS:
            return ""  # cannot tell: let the deadline decide
        if not pods:
            return "no pod was created (quota, admission or a missing namespace?)"
        status = pods[0].status or k8s.V1PodStatus()
        if status.phase != "Pending":
            return ""
        for cs in status.container_statuses or []:
            waiting = cs.state.waiting if cs.state else None
            if waiting is not None:
                return f"{waiting.reason}: {waiting.message or ''}".strip(": ")
        for cond in status.conditions or []:
            if cond.type == "PodScheduled" and cond.status != "True":
                return f"not scheduled: {cond.message or cond.reason or ''}"
        return "still Pending"

    # -- after: its pod, log and exit code ------------------------------------------------------

    def _pod(self, name: str, log: CallLog) -> k8s.V1Pod | None:
        """The Job's pod (the one that ran, if several); API errors pass through."""
        pods = self._pods(name, log)
        ran = [p for p in pods if _exit_code(p) is not None]
        found = (ran or pods)[-1] if pods else None
        if found is not None and found.metadata is not None:
            log.note(f"pod {found.metadata.name}, exit code {_exit_code(found)}")
        return found

    def _log(self, pod: k8s.V1Pod, log: CallLog) -> tuple[str, str]:
        """The pod's log (at most MAX_OUTPUT_BYTES), and why it could not be read."""
        meta = pod.metadata or k8s.V1ObjectMeta()
        ns, name = self.config.namespace, str(meta.name)
        what = f"GET /api/v1/namespaces/{ns}/pods/{name}/log"
        try:
            # Raw bytes: the client would otherwise decode, and may JSON-parse, the body.
            resp: Any = log.call(what, partial(
                self.core.read_namespaced_pod_log, name, ns, container=CONTAINER,
                limit_bytes=MAX_OUTPUT_BYTES, _preload_content=False,
                _request_timeout=self.config.request_timeout_s))
            try:
                data: bytes = resp.read(MAX_OUTPUT_BYTES)
            finally:
                resp.release_conn()
        except API_ERRORS as exc:
            return "", f"its log could not be read: {error_text(exc)}"
        log.note(f"{len(data)} bytes" + (" (cut at the limit)"
                                         if len(data) >= MAX_OUTPUT_BYTES else ""))
        return data.decode("utf-8", errors="replace"), ""

    def _delete(self, name: str, log: CallLog) -> None:
        ns = self.config.namespace
        try:
            log.call(f"DELETE /apis/batch/v1/namespaces/{ns}/jobs/{name}"
                     "?propagationPolicy=Background", partial(
                         self.batch.delete_namespaced_job, name, ns,
                         propagation_policy="Background",
                         _request_timeout=self.config.request_timeout_s))
        except API_ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                log.note("already gone")
            else:
                log.note(f"{error_text(exc)}; ttlSecondsAfterFinished="
                         f"{self.config.ttl_after_finished_s} removes it once it ends")


def _ended(job: k8s.V1Job) -> _Ended | None:
    for cond in (job.status.conditions or []) if job.status else []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return _Ended(cond.type, cond.reason or "", cond.message or "")
    return None


def _some(names: list[str]) -> str:
    more = f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
    return ", ".join(names[:MAX_LISTED]) + more


def _unschedulable(pod: k8s.V1Pod) -> bool:
    conditions = pod.status.conditions if pod.status else None
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in conditions or [])


def _asks_for(pod: k8s.V1Pod, resource: str) -> bool:
    containers = list(pod.spec.containers or []) if pod.spec else []
    for c in containers:
        for amounts in (c.resources.requests, c.resources.limits) if c.resources else ():
            value = (amounts or {}).get(resource)
            if value is not None and str(value) not in ("0", ""):
                return True
    return False


def _words(ended: _Ended) -> str:
    return ended.kind + (f" ({ended.reason})" if ended.reason else "")


def _exit_code(pod: k8s.V1Pod) -> int | None:
    statuses = pod.status.container_statuses if pod.status else None
    for cs in statuses or []:
        if cs.name == CONTAINER and cs.state is not None and cs.state.terminated is not None:
            return int(cs.state.terminated.exit_code)
    return None


def _merge_reads(log: CallLog, reads: int, state: str) -> None:
    """Keep one Step for the repeated reads of the Job: how many, and what the last said."""
    steps = log.steps
    if len(steps) >= 2 and steps[-2].call == steps[-1].call and steps[-2].ok:
        steps[-2:] = [Step(call=steps[-1].call, detail=f"read {reads} times; {state}",
                           duration_s=steps[-2].duration_s + steps[-1].duration_s)]
    else:
        log.note(f"read {reads} time{'s' if reads > 1 else ''}; {state}")
