"""Every parser on what no tool prints: an error with a reason, never a crash or a pass."""

from __future__ import annotations

import pytest

from collectors.diagnostics.output import MAX_OUTPUT_CHARS, bounded
from collectors.diagnostics.parsers import PARSERS
from collectors.diagnostics.result import Status
from tests.collectors.diagnostics.helpers import run
from tests.collectors.own_captures import NCCL_PASS, read

SUITE_OF = {"dcgm_diag": "dcgm_r3", "nccl_tests": "nccl_allreduce",
            "nvbandwidth": "nvbandwidth", "gpu_burn": "gpu_burn"}
GARBAGE = {
    "binary": bytes(range(256)).decode("latin-1") * 40,
    "empty": "",
    "blank": "\n\n   \n",
    "json_list": "[1, 2, 3]",
    "json_null": "{}",
    "a_shell_error": "bash: line 1: tool: command not found\n",
    "nul_bytes": "\x00" * 5000,
    "deep_json": "[" * 100000,
}


def test_every_parser_is_covered() -> None:
    assert set(PARSERS) == set(SUITE_OF)


@pytest.mark.parametrize("parser", sorted(SUITE_OF))
@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_is_an_error_with_a_reason(parser: str, kind: str) -> None:
    r = run(GARBAGE[kind], SUITE_OF[parser], exit_code=1)
    assert r.status is Status.ERROR and r.error, r
    assert len(r.error) < 600


@pytest.mark.parametrize("parser", sorted(SUITE_OF))
def test_huge_garbage_is_bounded(parser: str) -> None:
    r = run("x" * (3 * MAX_OUTPUT_CHARS), SUITE_OF[parser], exit_code=0)
    assert r.status is Status.ERROR


def test_the_cap_keeps_the_head_and_the_tail() -> None:
    text = read(NCCL_PASS)
    lines = text.splitlines(keepends=True)
    head, tail = "".join(lines[:17]), "".join(lines[17:])
    huge = head + "# padding line\n" * (MAX_OUTPUT_CHARS // 10) + tail
    kept, cut = bounded(huge)
    assert cut and len(kept) <= MAX_OUTPUT_CHARS + 1
    assert kept.startswith(head) and kept.endswith(tail)
    r = run(huge, "nccl_allreduce")
    assert r.status is Status.FAIL or r.status is Status.ERROR
    assert "the output was over the size cap" in r.error
    assert bounded(text) == (text, False)
