"""The real dcgm-exporter pages in the shared fixtures, unwrapped from their markdown."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / ".." / "shared" / "fixtures" / "dcgm-exporter"
L4 = FIXTURES / "k8s-ai-conformance-kops-L4-dcgm-output.md"
T4 = FIXTURES / "k8s-ai-conformance-rafay-T4-accelator_metrics.md"

needs_pages = pytest.mark.skipif(
    not (L4.is_file() and T4.is_file()),
    reason="dcgm-exporter captures not found at ../shared/fixtures/dcgm-exporter "
           "(relative to the repo root)",
)


def exposition(path: Path) -> str:
    """The exposition text of a markdown capture: its fenced blocks that hold `# TYPE DCGM_`
    lines, joined. The L4 file repeats the page unfenced after the fence; only fences count."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return "".join(b for b in blocks if "# TYPE DCGM_" in b)
