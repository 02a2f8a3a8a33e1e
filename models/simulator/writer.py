"""Write a simulated trace: line-protocol files plus labels.jsonl (docs/trace-format.md).

The line protocol and the label format belong to collectors.trace; this only feeds it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from collectors.frames import Batch
from collectors.labels import Label
from collectors.trace import TraceWriter
from models.simulator.config import SimConfig
from models.simulator.simulator import Simulator


@dataclass(frozen=True, slots=True)
class TraceSummary:
    directory: Path
    files: tuple[Path, ...]
    lines: int
    labels: int
    batches: int


def write_trace(config: SimConfig, out_dir: str | os.PathLike[str], *, gzip: bool = True,
                rotate_rows: int = 1_000_000,
                on_batch: Callable[[Batch, int], None] | None = None) -> TraceSummary:
    """Simulate `config` into `out_dir`; the same config writes the same bytes. `on_batch`
    sees each batch once written, with the lines written so far (a progress report)."""
    sim = Simulator(config)
    labels = sim.labels
    lines = batches = 0
    with TraceWriter(out_dir, gzip=gzip, rotate_rows=rotate_rows) as w:
        for label in labels:
            w.add_label(Label.from_dict(label))
        for batch in sim.run():
            lines += w.write(batch)
            batches += 1
            if on_batch is not None:
                on_batch(batch, lines)
        files = tuple(w.files)
    return TraceSummary(Path(out_dir), files, lines, len(labels), batches)
