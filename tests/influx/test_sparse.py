"""NVLink rows written when they move: which rows the sink keeps, and that readers filling the
rest back in from the GPUs' masks get every round exactly as ingested (no server needed)."""

from __future__ import annotations

import numpy as np

from collectors.catalog import CATALOG, Scope
from collectors.frames import Entity, EntityTable, Frame
from service.history.influx.client import Series
from service.history.influx.lines import ns
from service.history.influx.links import bucket, fill, read_masks
from service.history.influx.sparse import HEARTBEAT_S, MASK_FIELD, LinkGate, masks

COLS = [m.name for m in CATALOG.columns(Scope.NVLINK)]
LINKS = EntityTable(Scope.NVLINK, [Entity.nvlink("n0", 0, 0), Entity.nvlink("n0", 0, 1)])
T0 = 1_700_000_000.0


def _round(k: int, flit: float) -> Frame:
    v = np.zeros((2, len(COLS)))
    v[:, COLS.index("nvlink_state")] = 1
    v[1, COLS.index("nvlink_crc_flit")] = flit
    return Frame(LINKS, np.arange(2, dtype=np.int32), np.full(2, T0 + 5 * k), v)


def test_a_quiet_link_is_written_once_and_then_by_heartbeat_a_moving_one_with_its_round_before(
) -> None:
    gate = LinkGate()
    written: list[tuple[int, int]] = []  # (link, round)
    flits = [0, 0, 0, 0, 7, 7, 7, 14] + [14] * 16
    for k, f in enumerate(flits):
        got = gate.select(_round(k, f))
        written += [(int(s), round((t - T0) / 5)) for s, t in zip(got.rows, got.ts, strict=True)]
    every = round(HEARTBEAT_S / 5)  # 11 rounds
    assert [k for s, k in written if s == 0] == [0, every, 2 * every]
    # Link 1 moved at rounds 4 and 7: each written with the round before (3 and 6), then
    # heartbeats from its last written point.
    assert [k for s, k in written if s == 1] == [0, 3, 4, 6, 7, 7 + every]


def test_filled_rows_are_the_ingested_rounds_and_old_layout_points_pass_as_they_are() -> None:
    gate = LinkGate()
    truth: dict[tuple[str, int], list[float]] = {}
    stored: dict[str, list[list[object]]] = {"0": [], "1": []}
    mask_rows: list[list[object]] = []
    for k in range(30):
        f = _round(k, float(3 * (k // 9)))
        if k == 12:  # link 0 did not report this round: no row, no bit
            f = Frame(LINKS, f.rows[1:], f.ts[1:], f.values[1:])
        for s, row in zip(f.rows.tolist(), f.values.tolist(), strict=True):
            truth[(LINKS[s].sub, ns(T0 + 5 * k))] = row
        for (_, ts), m in masks(f).items():
            mask_rows.append([ns(ts), m])
        got = gate.select(f)
        for s, t, row in zip(got.rows.tolist(), got.ts.tolist(), got.values.tolist(), strict=True):
            stored[LINKS[s].sub].append([ns(t), *row])
    assert sum(map(len, stored.values())) < len(truth) / 3
    series = [Series("nvlink", {"host": "n0", "gpu": "0", "link": sub}, ["time", *COLS], rows)
              for sub, rows in stored.items()]
    m = read_masks([Series("gpu", {"host": "n0", "gpu": "0"}, ["time", MASK_FIELD], mask_rows)])
    start = ns(T0 + 5 * 10)  # a range that begins between two written points
    back = {(s.tags["link"], int(r[0])): list(r[1:]) for s in fill(series, m, start)
            for r in s.values}
    assert back == {k: v for k, v in truth.items() if k[1] >= start}
    # Without masks (points written before them), the stored points are the answer.
    plain = fill(series, {}, 0)
    assert [len(s.values) for s in plain] == [len(stored["0"]), len(stored["1"])]
    # Buckets of the filled rows: max and mean of every round, as over the dense layout.
    flit = bucket(fill(series, m, 0)[1:], "nvlink_crc_flit", "mean", 60 * 10**9)
    dense = {}
    for (sub, t), row in truth.items():
        if sub == "1":
            dense.setdefault(t - t % (60 * 10**9), []).append(row[COLS.index("nvlink_crc_flit")])
    assert flit == [(t, sum(v) / len(v)) for t, v in sorted(dense.items())]
