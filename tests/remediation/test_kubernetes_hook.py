"""The Kubernetes hook through the official client against a FAKE API server
(tests/remediation/fake_kube_api.py; a real kube-apiserver cannot run here)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from service.remediation.hooks import build_hook
from service.remediation.hooks.base import ActionRequest, Hook
from service.remediation.hooks.kubernetes import LABEL_BY, LABEL_REASON, TAINT_KEY, label_safe
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
    assert notes["gpuhealth/cordon-reason"] == "gpuhealth:42:XID 79: GPU fell off the bus (gpu 3)"
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
