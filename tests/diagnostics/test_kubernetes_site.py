"""The Kubernetes site through the official client against the FAKE API server the hook tests
use (tests/remediation/fake_kube_api.py; a real kube-apiserver cannot run here). The fake
"runs" each Job as scripted per node, printing our captures of the real tools' output; the
node is cordoned for a gate by the real Kubernetes hook, as in production."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from collectors.diagnostics.output import MAX_OUTPUT_BYTES
from collectors.diagnostics.result import Status
from collectors.frames import Batch
from service.diagnostics.gate import Diagnostics
from service.diagnostics.kubernetes_site import (
    LABEL_JOB,
    KubernetesSite,
    KubernetesSiteConfig,
    job_name,
)
from service.diagnostics.runs import RunStore
from service.diagnostics.settings import DiagnosticsServiceSettings
from service.diagnostics.site import Purpose, Ran
from service.remediation.hooks import build_hook
from service.remediation.hooks.base import ActionRequest
from service.remediation.hooks.kubernetes import TAINT_KEY
from tests.remediation.fake_kube_api import FakeKubeApi, JobRun

CAPTURES = Path(__file__).resolve().parents[1] / "collectors" / "captures" / "diagnostics"
PASS = (CAPTURES / "dcgm" / "diag-r3-pass-v4.json").read_text()
FAIL = (CAPTURES / "dcgm" / "diag-r3-memory-fail-v4.json").read_text()
KILLED = (CAPTURES / "nccl" / "all-reduce-8xh100-killed.txt").read_text()
ARGV = ["dcgmi", "diag", "-r", "3", "-j"]
NS = "gpuhealth"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        yield fake


def site_for(api: FakeKubeApi, **config: Any) -> KubernetesSite:
    return KubernetesSite(KubernetesSiteConfig.model_validate({
        "host": api.url, "image": "registry.example/gpu-diag:1.0", "poll_interval_s": 0.01,
        "request_timeout_s": 5, "start_within_s": 10, **config}))


def cordon_by_us(api: FakeKubeApi, node: str = "gpu-1") -> None:
    """Drain the node as gpuhealth does in production: through the Kubernetes hook."""
    req = ActionRequest(action_id="act-1", node=node, alert_id=7, fingerprint="fp7",
                        summary="dbe: uncorrectable ECC error in HBM", requested_at=time.time())
    result = build_hook("kubernetes", {"host": api.url}).execute(req)
    assert result.ok, result.detail


def deleted_in_the_background(api: FakeKubeApi) -> None:
    """The Job was deleted, with its pod, and nothing of ours is left on the server."""
    [delete] = api.calls("DELETE", JOBS)
    assert delete.query["propagationPolicy"] == ["Background"]
    assert not api.jobs
    assert not [p for p in api.pods.values() if LABEL_JOB in p["metadata"].get("labels", {})]


def test_a_gate_run_that_passes(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    api.add_pod("kube-system", "coredns", "gpu-1", owner_kind="ReplicaSet")  # not evicted
    cordon_by_us(api)
    api.add_pod("gpu-operator", "dcgm-exporter", "gpu-1", owner_kind="DaemonSet")
    api.add_pod("kube-system", "kube-proxy-gpu-1", "gpu-1", mirror=True)
    api.add_pod("team-a", "done", "gpu-1", phase="Succeeded")
    api.job_runs["gpu-1"] = JobRun(log=PASS, exit_code=0, polls=3)
    requests_before = len(api.requests)

    ran = site_for(api).run("gpu-1", ARGV, 600, Purpose.GATE)

    assert not ran.refused, ran
    assert ran.exit_code == 0 and not ran.timed_out
    assert ran.stdout == PASS  # the JSON log byte for byte, never parsed by the client
    deleted_in_the_background(api)
    # One Step per API call, the repeated reads of the Job as one.
    job = api.calls("POST", JOBS)[0].body["metadata"]["name"]
    assert [s.call for s in ran.steps] == [
        "GET /api/v1/nodes/gpu-1",
        "GET /api/v1/pods?fieldSelector=spec.nodeName=gpu-1",
        f"POST {JOBS}",
        f"GET {JOBS}/{job}",
        f"GET /api/v1/namespaces/{NS}/pods?labelSelector={LABEL_JOB}={job}",
        f"GET /api/v1/namespaces/{NS}/pods/{job}-00001/log",
        f"DELETE {JOBS}/{job}?propagationPolicy=Background"]
    assert all(s.ok for s in ran.steps)
    assert ran.steps[3].detail == "read 3 times; Complete"
    assert len(api.requests) - requests_before == len(ran.steps) - 1 + 3
    assert "4 pod(s), 0 of them work" in ran.steps[1].detail
    [log_read] = api.calls("GET", "/log")
    assert log_read.query["limitBytes"] == [str(MAX_OUTPUT_BYTES)]
    assert log_read.query["container"] == ["diag"]


def gate_with(api: FakeKubeApi) -> Diagnostics:
    settings = DiagnosticsServiceSettings.model_validate({
        "enabled": True, "suites": {"dcgm_r3": {"command": ARGV, "parser": "dcgm_diag",
                                                "timeout_s": 600}},
        "gate": {"default": ["dcgm_r3"]}})
    published: list[Batch] = []
    return Diagnostics(settings, RunStore(":memory:"), site_for(api), audit=lambda e: None,
                       publish=published.append)


def test_the_gate_reads_a_pass_and_a_failure_through_the_site(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    api.add_node("gpu-2")
    cordon_by_us(api, "gpu-1")
    cordon_by_us(api, "gpu-2")
    api.job_runs["gpu-1"] = JobRun(log=PASS)
    api.job_runs["gpu-2"] = JobRun(log=FAIL, exit_code=226)
    gate = gate_with(api)
    spec = gate.settings.suites["dcgm_r3"]

    passed = gate.run_suite("gpu-1", spec, Purpose.GATE, "d1")
    failed = gate.run_suite("gpu-2", spec, Purpose.GATE, "d2")

    assert passed.status == "pass", passed.result
    assert failed.status == "fail" and failed.result is not None
    assert "memory" in {c.name for c in failed.result.checks if c.status is Status.FAIL}
    assert passed.site == "kubernetes"
    gate.close()


def test_a_failing_run_gives_its_exit_code_and_log(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    cordon_by_us(api)
    api.job_runs["gpu-1"] = JobRun(log=FAIL, exit_code=226, polls=2)

    ran = site_for(api).run("gpu-1", ARGV, 600, Purpose.GATE)

    assert (ran.exit_code, ran.timed_out, ran.refused) == (226, False, "")
    assert ran.stdout == FAIL
    assert "Failed (BackoffLimitExceeded)" in ran.steps[3].detail
    assert "exit code 226" in ran.steps[4].detail
    deleted_in_the_background(api)


def test_a_job_past_its_deadline_timed_out_with_its_partial_log(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    cordon_by_us(api)
    api.job_runs["gpu-1"] = JobRun(log=KILLED, polls=2, deadline=True)

    ran = site_for(api).run("gpu-1", ["all_reduce_perf", "-g", "8"], 120, Purpose.GATE)

    assert ran.timed_out and ran.exit_code is None and not ran.refused
    assert ran.stdout == KILLED
    assert "Failed (DeadlineExceeded)" in ran.steps[3].detail
    deleted_in_the_background(api)


def test_a_job_the_controller_never_ends_is_timed_out_by_us(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    cordon_by_us(api)
    api.job_runs["gpu-1"] = JobRun(log=KILLED, polls=10**9)  # runs on, past any deadline

    ran = site_for(api, grace_s=0).run("gpu-1", ["all_reduce_perf"], 0.3, Purpose.GATE)

    assert ran.timed_out and ran.exit_code is None
    assert ran.stdout == KILLED[:len(KILLED) // 2]  # what it had printed so far
    deleted_in_the_background(api)


def test_a_node_with_a_users_pod_is_refused_and_no_job_made(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    cordon_by_us(api)
    api.add_pod("team-a", "train-0", "gpu-1", owner_kind="StatefulSet", gpus=8)
    api.add_pod("team-b", "notebook", "gpu-1")
    api.add_pod("team-a", "dcgm-exporter", "gpu-1", owner_kind="DaemonSet")
    api.add_pod("team-c", "elsewhere", "gpu-2")
    api.job_runs["gpu-1"] = JobRun(log=PASS)

    ran = site_for(api).run("gpu-1", ARGV, 600, Purpose.GATE)

    assert ran.exit_code is None
    assert ran.refused == ("gpu-1 has 2 pod(s) on it (team-a/train-0, team-b/notebook); "
                           "not testing it")
    assert not api.calls("POST", JOBS) and not api.jobs
    listing = api.calls("GET", "/api/v1/pods")[-1]  # the hook's, then ours
    assert listing.query["fieldSelector"] == ["spec.nodeName=gpu-1"]
    assert [s.call for s in ran.steps] == ["GET /api/v1/nodes/gpu-1",
                                           "GET /api/v1/pods?fieldSelector=spec.nodeName=gpu-1"]


def test_a_gate_needs_a_node_cordoned_by_us(api: FakeKubeApi) -> None:
    api.add_node("free")
    api.add_node("theirs", unschedulable=True)
    site = site_for(api)

    not_held = site.run("free", ARGV, 600, Purpose.GATE)
    theirs = [site.run("theirs", ARGV, 600, p) for p in Purpose]
    ghost = site.run("ghost", ARGV, 600, Purpose.GATE)

    assert "free is not cordoned by gpuhealth" in not_held.refused
    assert "a gate tests only nodes gpuhealth holds" in not_held.refused
    for ran in theirs:
        assert "theirs is cordoned, but not by gpuhealth" in ran.refused
    assert ghost.refused == "node ghost not found"
    assert not api.calls("POST", JOBS)
    assert not api.calls("GET", "/api/v1/pods")  # refused on reading the node


def test_a_sweep_only_on_a_schedulable_node_and_without_our_tolerations(
        api: FakeKubeApi) -> None:
    api.add_node("held")
    cordon_by_us(api, "held")
    api.add_node("idle")
    api.job_runs["idle"] = JobRun(log=PASS)
    site = site_for(api)

    api.add_pod("team-a", "web", "")  # waits, but not for GPUs
    api.add_pod("team-a", "trainer", "", gpus=8)  # waits for GPUs: a sweep would delay it

    held = site.run("held", ARGV, 600, Purpose.SWEEP)
    queued = site.run("idle", ARGV, 600, Purpose.SWEEP)
    del api.pods[("team-a", "trainer")]
    idle = site.run("idle", ARGV, 600, Purpose.SWEEP)

    assert "held is held by gpuhealth" in held.refused
    assert refused(queued) == ("1 pod(s) wait for nvidia.com/gpu (team-a/trainer); a sweep "
                               "takes only idle capacity nobody waits for")
    assert queued.steps[-1].call == "GET /api/v1/pods?fieldSelector=status.phase=Pending"
    assert idle.exit_code == 0 and idle.stdout == PASS
    [post] = api.calls("POST", JOBS)
    pod = post.body["spec"]["template"]["spec"]
    assert "tolerations" not in pod  # a node cordoned meanwhile gets no test
    assert post.body["metadata"]["labels"]["gpuhealth/diag-purpose"] == "sweep"


HOSTILE = ["gpu[001-512]", "a,b", "--all", "-h", "n 1", "n1\n", "n1;reboot", "$(touch x)", "",
           "x" * 300, "n1/../n2", "n1/log", "*", ".n1", "-n1", "n1\x00", "nöde"]


@pytest.mark.parametrize("node", HOSTILE)
def test_a_hostile_node_name_makes_no_request(api: FakeKubeApi, node: str) -> None:
    ran = site_for(api).run(node, ARGV, 600, Purpose.MANUAL)

    assert ran.refused and ran.exit_code is None and not ran.steps
    assert api.requests == []


def test_the_job_body(api: FakeKubeApi) -> None:
    api.add_node("dgx-h100-042.cluster.local")
    cordon_by_us(api, "dgx-h100-042.cluster.local")
    api.job_runs["dgx-h100-042.cluster.local"] = JobRun(log=PASS)

    ran = site_for(api, gpus=4, service_account="diag", ttl_after_finished_s=600).run(
        "dgx-h100-042.cluster.local", ARGV, 899.5, Purpose.GATE)

    assert ran.exit_code == 0
    [post] = api.calls("POST", JOBS)
    job = post.body
    name = job["metadata"]["name"]
    assert name.startswith("gpuhealth-diag-dgx-h100-042-cluster-local-")
    labels = {"app.kubernetes.io/managed-by": "gpuhealth", "gpuhealth/diag-job": name,
              "gpuhealth/diag-node": "dgx-h100-042.cluster.local",
              "gpuhealth/diag-purpose": "gate"}
    assert job == {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": labels,
                     "annotations": {"gpuhealth/node": "dgx-h100-042.cluster.local"}},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 900,
                 "ttlSecondsAfterFinished": 600,
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "restartPolicy": "Never", "automountServiceAccountToken": False,
                     "serviceAccountName": "diag",
                     "affinity": {"nodeAffinity": {
                         "requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": [{"matchFields": [
                                 {"key": "metadata.name", "operator": "In",
                                  "values": ["dgx-h100-042.cluster.local"]}]}]}}},
                     "tolerations": [
                         {"key": TAINT_KEY, "operator": "Equal", "value": "true",
                          "effect": "NoSchedule"},
                         {"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                          "effect": "NoSchedule"}],
                     "containers": [{"name": "diag", "image": "registry.example/gpu-diag:1.0",
                                     "imagePullPolicy": "IfNotPresent", "command": ARGV,
                                     "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}}


def test_pinned_by_node_name_when_configured(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    cordon_by_us(api)
    api.job_runs["gpu-1"] = JobRun(log=PASS)

    assert site_for(api, pin="node_name", gpus=0).run("gpu-1", ARGV, 60, Purpose.GATE
                                                      ).exit_code == 0

    pod = api.calls("POST", JOBS)[0].body["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-1" and "affinity" not in pod
    assert "resources" not in pod["containers"][0]


def refused(ran: Ran) -> str:
    assert ran.exit_code is None and not ran.timed_out and ran.refused, ran
    return ran.refused


def test_forbidden_and_failing_api_calls_are_refusals_with_the_reason(
        api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    cordon_by_us(api)
    api.job_runs["gpu-1"] = JobRun(log=PASS)
    site = site_for(api)

    api.answer_with = [("GET", "/api/v1/nodes/", 403)]
    assert refused(site.run("gpu-1", ARGV, 60, Purpose.GATE)) == (
        "cannot read node gpu-1: HTTP 403: scripted 403 for /api/v1/nodes/gpu-1; "
        "not testing it")

    api.answer_with = [("GET", "/api/v1/pods", 500)]
    assert refused(site.run("gpu-1", ARGV, 60, Purpose.GATE)).startswith(
        "cannot list the pods on gpu-1: HTTP 500: scripted 500")

    api.answer_with = [("POST", JOBS, 403)]
    ran = site.run("gpu-1", ARGV, 60, Purpose.GATE)
    assert refused(ran).startswith("could not create the Job gpuhealth-diag-gpu-1-")
    assert "in namespace gpuhealth: HTTP 403: scripted 403" in ran.refused
    assert not api.calls("DELETE")  # refused outright: nothing was made
    assert not ran.steps[-1].ok and "HTTP 403" in ran.steps[-1].detail

    api.answer_with = [("POST", JOBS, 500)]
    ran = site.run("gpu-1", ARGV, 60, Purpose.GATE)
    assert "HTTP 500" in refused(ran)
    assert len(api.calls("DELETE", JOBS)) == 1  # it may exist: deleted to be sure
    assert "already gone" in ran.steps[-1].detail

    api.answer_with = [("GET", JOBS, 503)]
    ran = site.run("gpu-1", ARGV, 60, Purpose.GATE)
    assert refused(ran).startswith("lost track of the Job gpuhealth-diag-gpu-1-")
    assert "HTTP 503" in ran.refused
    assert len(api.calls("GET", JOBS)) == 5
    assert not api.jobs and ran.steps[-1].call.startswith("DELETE")

    api.answer_with = [("GET", "/log", 403)]
    ran = site.run("gpu-1", ARGV, 60, Purpose.GATE)
    assert "its log could not be read: HTTP 403" in refused(ran)
    assert not api.jobs


def test_unreachable_api_server_is_a_refusal() -> None:
    with FakeKubeApi() as fake:
        url = fake.url
    site = KubernetesSite(KubernetesSiteConfig(host=url, image="img", request_timeout_s=2))
    assert "cannot read node gpu-1: network error" in refused(
        site.run("gpu-1", ARGV, 60, Purpose.GATE))


def test_a_pod_that_never_starts_is_refused_and_its_job_deleted(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    cordon_by_us(api)
    api.job_runs["gpu-1"] = JobRun(waiting="ErrImagePull")

    ran = site_for(api, start_within_s=0.1).run("gpu-1", ARGV, 60, Purpose.GATE)

    assert "pod did not start within 0.1 s: ErrImagePull" in refused(ran)
    deleted_in_the_background(api)


def test_the_log_is_bounded(api: FakeKubeApi) -> None:
    api.add_node("gpu-1")
    cordon_by_us(api)
    api.job_runs["gpu-1"] = JobRun(log="x" * (MAX_OUTPUT_BYTES + 1000), exit_code=1)

    ran = site_for(api).run("gpu-1", ["gpu_burn"], 60, Purpose.GATE)

    assert ran.exit_code == 1 and len(ran.stdout) == MAX_OUTPUT_BYTES
    assert "(cut at the limit)" in ran.steps[-2].detail


def test_job_names_are_bounded_dns_labels() -> None:
    long_name = "Node_" + "a" * 58 + ".example.org"
    name = job_name(long_name)
    assert len(name) <= 63 and name.startswith("gpuhealth-diag-node-aaa")
    assert job_name("n1") != job_name("n1")  # a unique suffix each run
    assert job_name("gpu-1", "abc123") == "gpuhealth-diag-gpu-1-abc123"
    with pytest.raises(ValueError, match="cannot make a Job name"):
        job_name("gpu-1", "UPPER")


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="`image` is required"):
        KubernetesSite(KubernetesSiteConfig(host="http://127.0.0.1:1"))
    with pytest.raises(ValidationError, match="extra"):
        KubernetesSiteConfig.model_validate({"image": "i", "nodeSelector": {}})
    with pytest.raises(ValidationError, match="namespace"):
        KubernetesSiteConfig(image="i", namespace="Not_A_Namespace")
    with pytest.raises(ValidationError, match="host excludes"):
        KubernetesSiteConfig(image="i", host="http://127.0.0.1:1", in_cluster=True)
    with pytest.raises(ValueError, match="kubernetes diagnostics site: cannot load the "
                                         "kubeconfig /nonexistent"):
        KubernetesSite(KubernetesSiteConfig(image="i", kubeconfig="/nonexistent/kubeconfig"))
