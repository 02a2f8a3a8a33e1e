"""Names from the wire never reach a command line or an API as anything but one plain node
name: a hostlist (`gpu[001-512]`, `a,b`), an option (`--all`, `-h`), whitespace, shell syntax
or an over-long name is refused by every verb of every hook before any call is made, and the
controller ends such an action at once. Valid names reach Slurm only in forms that cannot be
read as an option or an expression. Hypothesis fuzzes names through every hook."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.remediation.hooks import build_hook
from service.remediation.hooks.base import ActionRequest, Hook
from service.remediation.hooks.runner import Completed
from service.remediation.hooks.slurm import SlurmConfig, SlurmHook
from service.remediation.hooks.target import GuardedHook, target_problem
from tests.remediation.fake_kube_api import FakeKubeApi

HOSTILE = ["gpu[001-512]", "a,b", "--all", "-h", "n 1", "n\t1", "n1\n", "n1;reboot",
           "$(touch x)", "`id`", "", "x" * 300, ("a" * 64) + ".b", "nöde", "n1/../n2",
           "n1=x", "*", "n1..n2", ".n1", "n1.", "-n1", "n1\x00"]
VALID = ["n0012", "gpu-001.cluster.local", "node_7", "a", "dgx-h100-42", "N1"]


class Recording:
    """A CommandRunner that records argv and answers as Slurm would for one node."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def run(self, argv: list[str], timeout_s: float) -> Completed:
        self.calls.append(argv)
        if argv[1:3] == ["show", "node"]:
            node = argv[-1]
            return Completed(0, f"NodeName={node} Arch=x86_64 State=IDLE Reason=(null)\n", "",
                             0.0)
        return Completed(0, "", "", 0.0)


def request(node: str) -> ActionRequest:
    return ActionRequest("act-1", node, 7, "fp", "XID 79", time.time())


@pytest.fixture
def kube() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        yield fake


def hooks(tmp_path: Path, kube: FakeKubeApi) -> dict[str, tuple[Hook, object]]:
    """Every registered hook type, built through the registry, with what records its calls."""
    slurm_runner = Recording()
    marker = tmp_path / "called"
    out: dict[str, tuple[Hook, object]] = {
        "slurm": (GuardedHook(SlurmHook(SlurmConfig(), runner=slurm_runner)), slurm_runner),
        "command": (build_hook("command", {
            "drain": ["/bin/sh", "-c", f"echo \"$1\" >> {marker}", "sh", "{node}"],
            "release": ["/bin/sh", "-c", f"echo \"$1\" >> {marker}", "sh", "{node}"]}),
            marker),
        "kubernetes": (build_hook("kubernetes", {"host": kube.url,
                                                 "eviction_timeout_s": 1.0}), kube),
        "webhook": (build_hook("webhook", {"url": "http://127.0.0.1:9/never",
                                           "secret": "s" * 32}), None),
    }
    return out


def made_calls(recorder: object) -> int:
    if isinstance(recorder, Recording):
        return len(recorder.calls)
    if isinstance(recorder, Path):
        return len(recorder.read_text().splitlines()) if recorder.exists() else 0
    if isinstance(recorder, FakeKubeApi):
        return len(recorder.requests)
    return 0


@pytest.mark.parametrize("name", HOSTILE)
def test_the_grammar_refuses_hostile_names(name: str) -> None:
    assert target_problem(name) is not None


@pytest.mark.parametrize("name", VALID)
def test_the_grammar_takes_plain_host_names(name: str) -> None:
    assert target_problem(name) is None


@pytest.mark.slow
@pytest.mark.parametrize("name", HOSTILE)
def test_every_verb_of_every_hook_refuses_before_any_call(name: str, tmp_path: Path,
                                                          kube: FakeKubeApi) -> None:
    for kind, (hook, recorder) in hooks(tmp_path, kube).items():
        for result in (hook.execute(request(name)), hook.release(name)):
            assert not result.ok and not result.retry, kind
            assert "refusing to act" in result.detail, (kind, result.detail)
            assert result.steps == (), kind
        assert not hook.inspect(name).exists
        assert not hook.plan(request(name))[0].ok
        assert made_calls(recorder) == 0, kind


names = st.text(st.characters(codec="utf-8"), min_size=0, max_size=40) | \
    st.from_regex(r"[A-Za-z0-9_\-\[\],. ]{1,20}", fullmatch=True)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=names)
def test_fuzzed_names_reach_slurm_only_as_one_plain_name(name: str) -> None:
    runner = Recording()
    hook = GuardedHook(SlurmHook(SlurmConfig(), runner=runner))
    hook.execute(request(name))
    hook.release(name)
    if target_problem(name) is not None:
        assert runner.calls == []
        return
    # nothing Slurm could read as an option or a hostlist expression
    assert not name.startswith("-") and not set(name) & set("[],= \t\n")
    assert runner.calls, name
    for argv in runner.calls:  # the name only in its slot, whole or behind a fixed key
        if argv[1:3] == ["show", "node"]:
            assert argv[3:] == ["-o", name]
        elif argv[1] == "update":
            assert argv[2] == f"NodeName={name}"
        elif argv[0] == "squeue":
            assert argv[2] == f"--nodelist={name}"
