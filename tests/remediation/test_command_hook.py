"""The command hook with real programs (small shell scripts in tmp_path; our side passes an
argv list, never a shell line), and the hook registry."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from service.remediation.hooks import HOOK_TYPES, build_hook, register
from service.remediation.hooks.base import ActionRequest, Hook
from service.remediation.hooks.command import CommandConfig, CommandHook
from service.remediation.hooks.slurm import SlurmConfig, SlurmHook
from service.remediation.hooks.target import GuardedHook

# Writes each argument NUL-terminated to $1, then exits with $2.
RECORDER = """#!/bin/sh
out="$1"; code="$2"; shift 2
for a in "$@"; do printf '%s\\0' "$a"; done > "$out"
echo "did it" ; echo "a complaint" >&2
exit "$code"
"""


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(body)
    path.chmod(0o755)
    return str(path)


def recorded(path: Path) -> list[str]:
    return [a.decode() for a in path.read_bytes().split(b"\0")[:-1]]


def request(summary: str = "XID 79: it's \"gone\" $(touch pwned); rm -rf {node}") -> ActionRequest:
    return ActionRequest(action_id="act-9", node="gpu-7", alert_id=5, fingerprint="fp5",
                         summary=summary, requested_at=time.time())


def command_hook(tmp_path: Path, code: int = 0, **extra: Any) -> tuple[Hook, Path]:
    out = tmp_path / "argv.bin"
    rec = script(tmp_path, "recorder.sh", RECORDER)
    config = {"drain": [rec, str(out), str(code), "--node={node}", "{reason}", "{action_id}",
                        "alert={alert_id}", "{unknown}"],
              "release": [rec, str(out), str(code), "release", "{node}"], **extra}
    return build_hook("command", config), out


def test_placeholders_fill_single_arguments_without_a_shell(tmp_path: Path) -> None:
    hook, out = command_hook(tmp_path)

    result = hook.execute(request())

    assert result.ok and not result.retry, result.detail
    assert recorded(out) == [
        "--node=gpu-7",
        "gpuhealth XID 79 #5: it's \"gone\" $(touch pwned); rm -rf {node}",  # one argument
        "act-9", "alert=5", "{unknown}"]
    assert not (tmp_path / "pwned").exists()
    [step] = result.steps
    assert step.ok and step.detail == "did it" and step.duration_s > 0
    assert hook.plan(request())[0].call == step.call


def test_release_gets_the_node(tmp_path: Path) -> None:
    hook, out = command_hook(tmp_path)
    assert hook.release("gpu-7").ok
    assert recorded(out) == ["release", "gpu-7"]


def test_exit_75_means_retry_other_codes_fail(tmp_path: Path) -> None:
    hook, _ = command_hook(tmp_path, code=75)
    result = hook.execute(request())
    assert not result.ok and result.retry
    assert "exit 75" in result.detail and "a complaint" in result.detail

    hook, _ = command_hook(tmp_path, code=3)
    result = hook.release("gpu-7")
    assert not result.ok and not result.retry and "exit 3: a complaint" in result.detail


@pytest.mark.slow
def test_timeout_kills_the_program_and_its_children(tmp_path: Path) -> None:
    marker = tmp_path / "survived"
    slow = script(tmp_path, "slow.sh", f"#!/bin/sh\n(sleep 1; touch {marker}) &\nsleep 30\n")
    hook = build_hook("command", {"drain": [slow], "release": [slow], "timeout_s": 0.5})

    start = time.monotonic()
    result = hook.execute(request())

    assert time.monotonic() - start < 1
    assert not result.ok and result.retry and "timed out after 0.5 s" in result.detail
    time.sleep(1.5)
    assert not marker.exists()  # the whole process group was killed


def test_missing_program_is_a_permanent_failure(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    hook = build_hook("command", {"drain": [missing], "release": [missing]})
    result = hook.execute(request())
    assert not result.ok and not result.retry
    assert f"cannot run '{missing}'" in result.detail


def test_inspect_reads_json(tmp_path: Path) -> None:
    good = script(tmp_path, "inspect.sh", '#!/bin/sh\n'
                  'echo \'{"exists": true, "drained_by_us": true, "detail": "\'$1\'"}\'\n')
    hook = build_hook("command", {"drain": [good], "release": [good],
                                  "inspect": [good, "{node}"]})
    state = hook.inspect("gpu-7")
    assert state.exists and state.drained_by_us and not state.drained_by_other
    assert state.detail == "gpu-7"

    bad = script(tmp_path, "bad.sh", "#!/bin/sh\necho not json\n")
    state = build_hook("command", {"drain": [bad], "release": [bad],
                                   "inspect": [bad]}).inspect("gpu-7")
    assert "no JSON object" in state.extra["error"]

    unknown = build_hook("command", {"drain": [bad], "release": [bad]}).inspect("gpu-7")
    assert unknown.extra == {"unknown": True} and not unknown.drained_by_us


def test_env_is_added_to_the_inherited_environment(tmp_path: Path) -> None:
    out = tmp_path / "env.txt"
    show = script(tmp_path, "env.sh", f'#!/bin/sh\necho "$SITE_TOKEN:$PATH" > {out}\n')
    hook = CommandHook(CommandConfig(drain=[show], release=[show], env={"SITE_TOKEN": "t1"}))
    assert hook.execute(request()).ok
    token, path = out.read_text().strip().split(":", 1)
    assert token == "t1" and path  # PATH still inherited


@pytest.mark.parametrize(("config", "message"), [
    ({"drain": ["x"], "release": ["x", "{reason}"]}, "release may only use {node}"),
    ({"drain": ["{node}"], "release": ["x"]}, "argv[0] must be a fixed program"),
    ({"drain": [], "release": ["x"]}, "drain: List should have at least 1 item"),
    ({"drain": ["x"], "release": ["x"], "timout_s": 3}, "timout_s: Extra inputs"),
])
def test_config_errors_are_clear(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=r"^remediation hook 'command': ") as err:
        build_hook("command", config)
    assert message in str(err.value)


def test_registry() -> None:
    assert set(HOOK_TYPES) == {"slurm", "kubernetes", "webhook", "command"}
    with pytest.raises(ValueError, match="already registered"):
        register("slurm", SlurmConfig, SlurmHook)
    with pytest.raises(ValueError, match=r"unknown remediation hook 'lsf' \(known: command, "
                                         r"kubernetes, slurm, webhook\)"):
        build_hook("lsf", {})
    built = build_hook("slurm", {})
    assert isinstance(built, GuardedHook) and isinstance(built.inner, SlurmHook)
