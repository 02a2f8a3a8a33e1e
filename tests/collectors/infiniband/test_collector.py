"""InfinibandCollector over a copied real tree: counters bumped and a state flipped between
reads give the flap count; saturated counters; a missing root is down."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from collectors.base import Collector
from collectors.catalog import CATALOG, Scope
from collectors.infiniband import InfinibandCollector, increase
from tests.collectors.infiniband.trees import H100, needs_h100


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "infiniband"
    shutil.copytree(H100, root)
    for f in [root, *root.rglob("*")]:
        f.chmod(0o755 if f.is_dir() else 0o644)  # the fixture is read-only
    return root


def _set(root: Path, dev: str, name: str, value: str) -> None:
    (root / dev / "ports" / "1" / name).write_text(value + "\n")


@needs_h100
def test_collects_and_derives_flaps(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    c = InfinibandCollector(root, host="n1", clock=lambda: 1_700_000_000_000_000_000)
    assert isinstance(c, Collector)
    first = c.collect()
    assert c.status.up and not first.rejected
    frame = first.frames[Scope.IB_PORT]
    assert len(frame) == 9
    col = CATALOG.column(Scope.IB_PORT, "ib_link_downed")
    assert frame.values[frame.entities.index(frame.entities[1]), col] == 255  # mlx5_1
    assert c.last_flaps == {}  # one read: nothing to compare yet

    _set(root, "mlx5_0", "counters/link_downed", "2")  # two flaps between reads, back up now
    _set(root, "mlx5_4", "state", "1: DOWN")  # seen going down: also bumps link_downed
    _set(root, "mlx5_4", "counters/link_downed", "1")
    _set(root, "mlx5_5", "state", "2: INIT")  # left ACTIVE, counter not (yet) bumped
    _set(root, "mlx5_6", "counters/symbol_error", "12")  # errors, no flap
    second = c.collect()
    assert c.status.up
    flaps = {k: v for k, v in c.last_flaps.items() if v}
    assert flaps == {("mlx5_0", 1): 2, ("mlx5_4", 1): 1, ("mlx5_5", 1): 1}

    _set(root, "mlx5_4", "state", "4: ACTIVE")  # recovery is not another flap
    _set(root, "mlx5_1", "counters/link_downed", "255")  # saturated: cannot report more
    c.collect()
    assert not any(c.last_flaps.values())
    assert c.flaps.total[("mlx5_0", 1)] == 2 and c.flaps.total[("mlx5_4", 1)] == 1
    assert (("mlx5_1", 1), "link_downed") in c.flaps.saturated
    # excessive_buffer_overrun_errors is a 4-bit counter; 15 is its ceiling on every port here.
    assert (("mlx5_0", 1), "excessive_buffer_overrun_errors") in c.flaps.saturated

    # Raw counters travel on; the window store derives rates and ib_ber from them.
    f2 = second.frames[Scope.IB_PORT]
    sym = CATALOG.column(Scope.IB_PORT, "ib_symbol_error")
    assert np.nansum(f2.values[:, sym]) == 12
    # The running flap count travels as the counter ib_link_flaps.
    fl = CATALOG.column(Scope.IB_PORT, "ib_link_flaps")
    got = {f2.entities[int(r)].unit: f2.values[i, fl] for i, r in enumerate(f2.rows)}
    assert (got["mlx5_0"], got["mlx5_4"], got["mlx5_5"], got["mlx5_6"]) == (2, 1, 1, 0)


def test_saturated_and_cleared_counters_report_no_increase() -> None:
    assert increase("link_downed", 3, 5) == 2
    assert increase("link_downed", 255, 255) == 0
    assert increase("link_downed", 255, 3) == 0  # cleared (perfquery -R): new baseline
    assert increase("symbol_error", 65535, 65535) == 0
    assert increase("port_rcv_data", 2**40, 2**40 + 7) == 7  # 64-bit, no ceiling here
    assert increase("link_downed", None, 4) == 0


def test_missing_root_is_down(tmp_path: Path) -> None:
    c = InfinibandCollector(tmp_path / "nope", host="n1")
    batch = c.collect()
    assert not c.status.up
    assert c.status.reason.startswith("no InfiniBand devices")
    assert batch.samples == 0
    (tmp_path / "empty").mkdir()
    c = InfinibandCollector(tmp_path / "empty", host="n1")
    c.collect()
    assert not c.status.up and "no InfiniBand devices" in c.status.reason


@needs_h100
def test_garbage_file_in_collect_is_a_rejection(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    _set(root, "mlx5_9", "counters/link_downed", "-1")
    c = InfinibandCollector(root, host="n1")
    batch = c.collect()
    assert c.status.up
    assert [r.entity for r in batch.rejected] == ["n1:mlx5_9:1"]
    assert "link_downed" in batch.rejected[0].reason
    assert len(batch.frames[Scope.IB_PORT]) == 9
