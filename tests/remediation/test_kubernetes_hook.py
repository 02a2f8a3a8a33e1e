"""The Kubernetes hook through the official client against a FAKE API server
(tests/remediation/fake_kube_api.py; a real kube-apiserver cannot run here)."""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from service.remediation.hooks import build_hook
from service.remediation.hooks.base import ActionRequest, Hook
from service.remediation.hooks.kubernetes import (
    CONDITION_TYPE,
    LABEL_BY,
    LABEL_REASON,
    TAINT_KEY,
    KubernetesConfig,
    KubernetesHook,
    label_safe,
)
from service.remediation.hooks.target import GuardedHook
from tests.remediation.fake_kube_api import FakeKubeApi, Recorded

OTHER_TAINT = {"key": "example.com/maint", "value": "x", "effect": "NoSchedule"}


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        yield fake


def hook_for(api: FakeKubeApi, **config: Any) -> Hook:
    return build_hook("kubernetes", {"host": api.url, "backoff_initial_s": 0.02,
                                     "eviction_timeout_s": 2.0, **config})


def request(node: str = "gpu-1") -> ActionRequest:
    return ActionRequest(action_id="act-7", node=node, alert_id=42, fingerprint="fp42",
                         summary="XID 79: GPU fell off the bus\n(gpu 3)",
                         requested_at=time.time())


def node_patches(api: FakeKubeApi) -> list[Recorded]:
    """PATCHes of the Node itself (not of its status subresource)."""
    return [r for r in api.calls("PATCH") if not r.path.endswith("/status")]


def taints(api: FakeKubeApi, node: str = "gpu-1") -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api.nodes[node]["spec"].get("taints", [])
    return found


def test_cordon_taint_and_provenance_in_one_conditional_patch(api: FakeKubeApi) -> None:
    api.add_node("gpu-1", taints=[OTHER_TAINT])
    result = hook_for(api).execute(request())

    assert result.ok, result.detail
    [patch] = node_patches(api)
    assert patch.content_type == "application/strategic-merge-patch+json"
    assert patch.body["spec"]["unschedulable"] is True
    assert patch.body["metadata"]["resourceVersion"]  # conditional on what we read
    sent = patch.body["spec"]["taints"]
    assert OTHER_TAINT in sent  # someone else's taint kept
    assert {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"} in sent
    assert not any(t["effect"] == "NoExecute" for t in sent)
    labels = api.nodes["gpu-1"]["metadata"]["labels"]
    assert labels[LABEL_BY] == "gpuhealth"
    assert labels[LABEL_REASON] == "alert-42-XID-79-GPU-fell-off-the-bus-gpu-3"
    assert labels["gpuhealth/cordon-timestamp"]
    notes = api.nodes["gpu-1"]["metadata"]["annotations"]
    assert notes["gpuhealth/cordon-reason"] == "gpuhealth XID 79 #42: GPU fell off the bus (gpu 3)"
    assert notes["gpuhealth/action-id"] == "act-7"
    state = hook_for(api).inspect("gpu-1")
    assert state.exists and state.drained_by_us and not state.drained_by_other
    again = hook_for(api).execute(request())  # a retried action: nothing to patch
    assert again.ok and len(node_patches(api)) == 1
    assert "already cordoned" in again.steps[0].detail


def test_skips_daemonset_mirror_finished_and_excluded_namespaces(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    api.add_pod("team-a", "train-0", "gpu-1", owner_kind="StatefulSet")
    api.add_pod("team-a", "bare", "gpu-1")
    api.add_pod("team-a", "dcgm-exporter", "gpu-1", owner_kind="DaemonSet")
    api.add_pod("team-a", "static", "gpu-1", mirror=True)
    api.add_pod("team-a", "done", "gpu-1", phase="Succeeded")
    api.add_pod("kube-system", "coredns", "gpu-1", owner_kind="ReplicaSet")
    api.add_pod("team-b", "elsewhere", "gpu-2")

    result = hook_for(api).execute(request())

    assert result.ok and not result.left
    assert sorted(result.moved) == ["team-a/bare", "team-a/train-0"]
    evicted = sorted(r.path for r in api.calls("POST", "/eviction"))
    assert evicted == ["/api/v1/namespaces/team-a/pods/bare/eviction",
                       "/api/v1/namespaces/team-a/pods/train-0/eviction"]
    [listing] = api.calls("GET", "/api/v1/pods")
    assert listing.query["fieldSelector"] == ["spec.nodeName=gpu-1"]
    [listed] = [s for s in result.steps if s.call.startswith("GET /api/v1/pods")]
    assert "team-a/dcgm-exporter (DaemonSet)" in listed.detail
    assert "kube-system/coredns (namespace kube-system excluded)" in listed.detail
    body = api.calls("POST", "/eviction")[0].body
    assert body["kind"] == "Eviction" and body["apiVersion"] == "policy/v1"
    assert not api.calls("DELETE")


def test_gpu_pods_only_and_configured_namespaces(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    api.add_pod("team-a", "trainer", "gpu-1", gpus=8)
    api.add_pod("team-a", "sidecar-ish", "gpu-1")
    api.add_pod("ops", "tool", "gpu-1", gpus=1)

    result = hook_for(api, gpu_pods_only=True, namespaces_excluded=["ops"]).execute(request())

    assert result.moved == ("team-a/trainer",)
    assert ("team-a", "sidecar-ish") in api.pods and ("ops", "tool") in api.pods


def test_429_is_retried_with_growing_backoff_then_succeeds(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    api.add_pod("team-a", "guarded", "gpu-1", evictions=[429, 429, 429, 201])

    result = hook_for(api, backoff_initial_s=0.05).execute(request())

    assert result.ok and result.moved == ("team-a/guarded",)
    tries = api.calls("POST", "/eviction")
    assert len(tries) == 4
    gaps = [b.at - a.at for a, b in itertools.pairwise(tries)]
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and gaps[2] >= 0.2  # doubling
    assert [s.ok for s in result.steps if "eviction" in s.call] == [False, False, False, True]


def test_pod_that_keeps_answering_429_is_left_for_retry(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    api.add_pod("team-a", "pinned", "gpu-1", evictions=[429])
    api.add_pod("team-a", "free", "gpu-1")

    start = time.monotonic()
    result = hook_for(api, eviction_timeout_s=0.5, backoff_initial_s=0.05).execute(request())
    took = time.monotonic() - start

    assert not result.ok and result.retry
    assert result.moved == ("team-a/free",)  # the blocked pod did not starve the other
    [left] = result.left
    assert left.startswith("team-a/pinned: not evicted within 0.5 s")
    assert "disruption budget" in left
    assert took < 2.0
    assert ("team-a", "pinned") in api.pods
    assert not api.calls("DELETE")


def test_500_from_eviction_is_not_retried(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    api.add_pod("team-a", "two-pdbs", "gpu-1", evictions=[500])

    result = hook_for(api).execute(request())

    assert not result.ok and not result.retry
    assert len(api.calls("POST", "/eviction")) == 1
    assert "more than one PodDisruptionBudget" in result.left[0]


def test_release_only_our_cordon(api: FakeKubeApi) -> None:
    api.add_node("gpu-1", taints=[OTHER_TAINT])
    hook = hook_for(api)
    assert hook.execute(request()).ok

    released = hook.release("gpu-1")

    assert released.ok, released.detail
    node = api.nodes["gpu-1"]
    assert node["spec"]["unschedulable"] is False
    assert taints(api) == [OTHER_TAINT]
    assert not any(k.startswith("gpuhealth/") for k in node["metadata"]["labels"])
    assert not any(k.startswith("gpuhealth/") for k in node["metadata"]["annotations"])
    assert not hook.inspect("gpu-1").drained_by_us
    assert hook.release("gpu-1").ok  # again: nothing to do


def test_release_refuses_someone_elses_cordon(api: FakeKubeApi) -> None:
    api.add_node("gpu-1", unschedulable=True, taints=[OTHER_TAINT])
    hook = hook_for(api)

    result = hook.release("gpu-1")

    assert not result.ok and not result.retry
    assert "not by gpuhealth" in result.detail
    assert not api.calls("PATCH")
    state = hook.inspect("gpu-1")
    assert state.drained_by_other and not state.drained_by_us


def test_cordon_of_an_already_cordoned_node_is_kept_on_release(api: FakeKubeApi) -> None:
    api.add_node("gpu-1", unschedulable=True)
    hook = hook_for(api)
    assert hook.execute(request()).ok

    assert hook.release("gpu-1").ok

    assert api.nodes["gpu-1"]["spec"]["unschedulable"] is True  # the operator's cordon stays
    assert taints(api) == []


def test_conflict_rereads_and_keeps_a_taint_added_meanwhile(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    # Someone taints the node between the hook's read and its patch.
    api.after_node_read["gpu-1"] = lambda node: node["spec"].update(taints=[OTHER_TAINT])

    result = hook_for(api).execute(request())

    assert result.ok, result.detail
    patches = node_patches(api)
    assert len(patches) == 2  # 409 Conflict, then again from a fresh read
    assert [s.ok for s in result.steps
            if s.call == "PATCH /api/v1/nodes/gpu-1"] == [False, True]
    assert OTHER_TAINT in taints(api) and any(t["key"] == TAINT_KEY for t in taints(api))


def test_unknown_node_and_plan(api: FakeKubeApi) -> None:
    hook = hook_for(api)
    result = hook.execute(request("ghost"))
    assert not result.ok and not result.retry and "not found" in result.detail
    assert not hook.inspect("ghost").exists
    plan = hook.plan(request())
    assert [s.call for s in plan][:2] == ["GET /api/v1/nodes/gpu-1", "PATCH /api/v1/nodes/gpu-1"]
    assert not api.calls("PATCH", "gpu-1")


def test_unreachable_api_server_is_retryable() -> None:
    with FakeKubeApi() as fake:
        url = fake.url
    hook = build_hook("kubernetes", {"host": url, "request_timeout_s": 2})
    result = hook.execute(request())
    assert not result.ok and result.retry


def test_config_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="host excludes"):
        build_hook("kubernetes", {"host": "http://127.0.0.1:1", "in_cluster": True})
    with pytest.raises(ValueError, match="cannot load the kubeconfig /nonexistent"):
        build_hook("kubernetes", {"kubeconfig": "/nonexistent/kubeconfig"})


def test_label_safe() -> None:
    assert label_safe("alert-1-é bad/value!") == "alert-1--bad-value"
    assert len(label_safe("x" * 100)) == 63
    assert label_safe("--a--") == "a"


# -- GpuHealthRisk condition and Events ----------------------------------------------------------

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "message": "kubelet is posting ready status", "lastHeartbeatTime": "2023-11-14T22:00:00Z",
         "lastTransitionTime": "2023-11-01T00:00:00Z"}
NPD = {"type": "KernelDeadlock", "status": "False", "reason": "KernelHasNoDeadlock",
       "message": "kernel has no deadlock", "lastHeartbeatTime": "2023-11-14T22:00:00Z",
       "lastTransitionTime": "2023-11-01T00:00:00Z"}
INSTANCE = f"gpuhealth-{socket.gethostname()}"[:128]


class Clock:
    def __init__(self, at: float = T0) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def clocked_hook(api: FakeKubeApi, clock: Clock, **config: Any) -> Hook:
    """Built as the registry builds it (behind the name guard), with a clock we set."""
    settings = KubernetesConfig(host=api.url, backoff_initial_s=0.02, eviction_timeout_s=2.0,
                                **config)
    return GuardedHook(KubernetesHook(settings, clock=clock))


def status_patches(api: FakeKubeApi) -> list[Recorded]:
    return api.calls("PATCH", "/status")


def ours(api: FakeKubeApi, node: str = "gpu-1") -> dict[str, Any]:
    [found] = [c for c in api.nodes[node]["status"]["conditions"] if c["type"] == CONDITION_TYPE]
    return found


def event(type_: str, reason: str, action: str, message: str, at: str) -> dict[str, Any]:
    """A core/v1 Event on Node gpu-1 exactly as the hook sends it."""
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": "gpu-1.", "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "gpu-1",
                               "uid": "gpu-1"},
            "type": type_, "reason": reason, "action": action, "message": message,
            "source": {"component": "gpuhealth"}, "reportingComponent": "gpuhealth",
            "reportingInstance": INSTANCE, "firstTimestamp": at, "lastTimestamp": at,
            "count": 1}


WHY = "alert 42: XID 79: GPU fell off the bus (gpu 3)"
CORDONED = f"cordoned and tainted gpuhealth/at-risk=true:NoSchedule; {WHY}"


def test_cordon_sets_the_condition_and_writes_events(api: FakeKubeApi) -> None:
    api.add_node("gpu-1", conditions=[READY, NPD])
    api.add_pod("team-a", "train-0", "gpu-1", owner_kind="StatefulSet")
    clock = Clock()
    hook = clocked_hook(api, clock)

    result = hook.execute(request())

    assert result.ok, result.detail
    [patch] = status_patches(api)
    assert patch.path == "/api/v1/nodes/gpu-1/status"
    assert patch.content_type == "application/strategic-merge-patch+json"
    assert patch.body == {"status": {"conditions": [{
        "type": "GpuHealthRisk", "status": "True", "reason": "GpuFailureRisk", "message": WHY,
        "lastHeartbeatTime": "2023-11-14T22:13:20Z",
        "lastTransitionTime": "2023-11-14T22:13:20Z"}]}}
    # another detector's and the kubelet's conditions survive the patch
    conditions = api.nodes["gpu-1"]["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["Ready", "KernelDeadlock", "GpuHealthRisk"]
    assert conditions[:2] == [READY, NPD]
    posts = api.calls("POST", "/api/v1/namespaces/default/events")
    at = "2023-11-14T22:13:20+00:00"
    assert [p.body for p in posts] == [
        event("Warning", "Cordoned", "Cordon", CORDONED, at),
        event("Normal", "PodsEvicted", "Evict", "evicted 1 pod(s), 0 left, 0 skipped", at)]
    assert [e["metadata"]["name"] for e in api.events] == ["gpu-1.00001", "gpu-1.00002"]
    assert [s.call for s in result.steps] == [
        "GET /api/v1/nodes/gpu-1", "PATCH /api/v1/nodes/gpu-1",
        "PATCH /api/v1/nodes/gpu-1/status", "POST /api/v1/namespaces/default/events",
        "GET /api/v1/pods?fieldSelector=spec.nodeName=gpu-1",
        "POST /api/v1/namespaces/team-a/pods/train-0/eviction",
        "POST /api/v1/namespaces/default/events"]
    assert all(s.ok for s in result.steps)
    planned = [s.call for s in hook.plan(request())]
    assert planned[2:4] == ["PATCH /api/v1/nodes/gpu-1/status",
                            "POST /api/v1/namespaces/default/events"]

    # A retried action an hour later: heartbeat moves, the transition time stays, and no
    # second Cordoned event (the node did not change).
    clock.at = T0 + 3600
    assert hook.execute(request()).ok
    assert ours(api)["lastTransitionTime"] == "2023-11-14T22:13:20Z"
    assert ours(api)["lastHeartbeatTime"] == "2023-11-14T23:13:20Z"
    assert [e["reason"] for e in api.events] == ["Cordoned", "PodsEvicted", "PodsEvicted"]


def test_release_flips_the_condition_to_false_and_writes_an_event(api: FakeKubeApi) -> None:
    api.add_node("gpu-1", conditions=[READY, NPD])
    clock = Clock()
    hook = clocked_hook(api, clock)
    assert hook.execute(request()).ok
    clock.at = T0 + 600

    released = hook.release("gpu-1")

    assert released.ok, released.detail
    last = status_patches(api)[-1]
    message = "released by gpuhealth: removed gpuhealth/at-risk and uncordoned"
    assert last.body == {"status": {"conditions": [{
        "type": "GpuHealthRisk", "status": "False", "reason": "Released", "message": message,
        "lastHeartbeatTime": "2023-11-14T22:23:20Z",
        "lastTransitionTime": "2023-11-14T22:23:20Z"}]}}
    conditions = api.nodes["gpu-1"]["status"]["conditions"]
    assert conditions[:2] == [READY, NPD]  # kept, and ours is flipped, not deleted
    assert ours(api)["status"] == "False" and ours(api)["reason"] == "Released"
    assert api.calls("POST", "/events")[-1].body == event(
        "Normal", "Released", "Release", message, "2023-11-14T22:23:20+00:00")
    assert api.nodes["gpu-1"]["spec"]["unschedulable"] is False
    # released again: nothing to clear, no second Released event
    before = len(api.requests)
    assert hook.release("gpu-1").ok
    assert [r.method for r in api.requests[before:]] == ["GET"]


def test_release_after_a_manual_uncordon_still_clears_the_condition(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    hook = clocked_hook(api, Clock())
    assert hook.execute(request()).ok
    # an operator uncordons by hand and strips our labels
    node = api.nodes["gpu-1"]
    node["spec"]["unschedulable"] = False
    node["metadata"]["labels"] = {"kubernetes.io/hostname": "gpu-1"}

    result = hook.release("gpu-1")

    assert result.ok and "nothing to release" in result.detail
    assert ours(api)["status"] == "False" and ours(api)["reason"] == "Released"
    assert api.events[-1]["reason"] == "Released"


def test_a_refused_status_patch_or_event_does_not_fail_the_drain(api: FakeKubeApi) -> None:
    api.add_node("gpu-1", conditions=[READY])
    api.add_pod("team-a", "train-0", "gpu-1")
    api.answer_with.append(("PATCH", "/status", 403))
    api.answer_with.append(("POST", "/events", 403))

    result = hook_for(api).execute(request())

    assert result.ok and not result.retry
    assert result.moved == ("team-a/train-0",)
    node = api.nodes["gpu-1"]
    assert node["spec"]["unschedulable"] is True and any(
        t["key"] == TAINT_KEY for t in taints(api))
    assert node["status"]["conditions"] == [READY]
    assert "node condition GpuHealthRisk not set: HTTP 403: scripted 403" in result.detail
    assert "event Cordoned not written: HTTP 403" in result.detail
    assert "event PodsEvicted not written: HTTP 403" in result.detail
    [status_step] = [s for s in result.steps if s.call.endswith("/status")]
    assert not status_step.ok and status_step.detail.startswith("HTTP 403")
    assert [s.ok for s in result.steps if s.call.endswith("/events")] == [False, False]
    # the same on release: uncordoned, the refusals reported
    released = hook_for(api).release("gpu-1")
    assert released.ok and node["spec"]["unschedulable"] is False
    assert "node condition GpuHealthRisk not set" not in released.detail  # none to clear


def test_eviction_left_behind_is_a_warning_event(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    api.add_pod("team-a", "two-pdbs", "gpu-1", evictions=[500])

    result = hook_for(api).execute(request())

    assert not result.ok
    last = api.events[-1]
    assert (last["type"], last["reason"], last["action"]) == (
        "Warning", "EvictionIncomplete", "Evict")
    assert last["message"].startswith("evicted 0 pod(s), 1 left, 0 skipped; left: "
                                      "team-a/two-pdbs: eviction refused: HTTP 500")
    assert ours(api)["status"] == "True"  # the node is still at risk


def test_condition_and_events_can_be_turned_off(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    hook = hook_for(api, node_condition=False, events=False)

    assert hook.execute(request()).ok and hook.release("gpu-1").ok

    assert not status_patches(api) and not api.calls("POST", "/events")
    assert "conditions" not in api.nodes["gpu-1"]["status"]
    assert not any(s.call.endswith(("/status", "/events")) for s in hook.plan(request()))


def test_long_summaries_are_bounded_on_one_line(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    long = ActionRequest(action_id="act-8", node="gpu-1", alert_id=43, fingerprint="fp43",
                         summary="é\n" * 2000, requested_at=time.time())

    assert hook_for(api).execute(long).ok

    message = ours(api)["message"]
    assert len(message.encode()) <= 1024 and message.endswith("…") and "\n" not in message
    assert all(len(e["message"].encode()) <= 1024 for e in api.events)


@pytest.mark.parametrize("name", ["gpu-1/status", "default/events", "gpu-1/../gpu-2"])
def test_a_hostile_node_name_writes_no_condition_or_event(api: FakeKubeApi, name: str) -> None:
    api.add_node("gpu-1")
    hook = clocked_hook(api, Clock())

    for result in (hook.execute(request(name)), hook.release(name)):
        assert not result.ok and "refusing to act" in result.detail

    assert api.requests == [] and api.events == []
    assert "conditions" not in api.nodes["gpu-1"]["status"]
