"""Labels that write themselves, through the whole pipeline: a hard failure becomes one failure
label (not one per tick) with its mode and alert, one failure seen by several rules is one label,
the evidence clearing on fresh data for CLEAR_FOR_S is a repair, a silent GPU keeps its label
open, a restart does not label a still-firing rule twice, and a flapping link is one failure."""

from __future__ import annotations

from pathlib import Path

from collectors.diagnostics.classes import FaultClass
from collectors.frames import EventFrame
from collectors.identity import GpuIdentity
from service.assembly import Wiring
from service.learning.autolabel import CLEAR_FOR_S
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from service.stages.ingest import REBASE_AFTER
from service.stages.label_store import LabelStore
from tests.pipeline.builders import T0, Rounds

STEP = 5.0


def _pipe(tmp: Path) -> Pipeline:
    s = Settings.model_validate({"storage": {"data_dir": tmp}})
    return build_pipeline(s, Wiring.offline(alert_db=str(tmp / "a.db"), autolabel=True))


def _run(pipe: Pipeline, r: Rounds, k0: int, k1: int, missing: tuple[str, ...] = (),
         xid: dict[int, tuple[str, int]] | None = None) -> None:
    for k in range(k0, k1):
        b = r.batch(T0 + k * STEP, missing)
        if xid and k in xid:
            b.events = EventFrame([xid[k][0]], [T0 + k * STEP], ["xid"], [float(xid[k][1])])
        pipe.process(b, T0 + k * STEP)


def _labels(tmp: Path) -> list[tuple[str, str, str | None, str | None, str]]:
    store = LabelStore(tmp / "a.db")
    try:
        return [(lb.kind, lb.entity, None if lb.mode is None else str(lb.mode), lb.action,
                 lb.source) for lb in store.find()]
    finally:
        store.close()


def test_a_dbe_is_one_hbm_failure_with_its_alert_then_a_reset_is_a_repair(tmp_path: Path) -> None:
    pipe = _pipe(tmp_path)
    r = Rounds(nodes=2, gpus=4)
    try:
        _run(pipe, r, 0, 6)
        r.add("n0:gpu1", "ecc_dbe_volatile", 1)
        _run(pipe, r, 6, 20, xid={7: ("n0:gpu1", 48)})  # the Xid 48 beside it: same failure
        got = pipe.labels.find()
        assert [(lb.kind, lb.entity, str(lb.mode), lb.source) for lb in got] == [
            ("failure", "n0:gpu1", "M1_hbm", "rule:dbe")]
        assert got[0].time == T0 + 6 * STEP and got[0].open
        alert = pipe.alerts.get(got[0].alert_id or -1)
        assert alert is not None and alert.entity == "n0:gpu1" and alert.level == 3
        r.set("n0:gpu1", "ecc_dbe_volatile", 0)  # a GPU reset zeroes the volatile count
        # The Xid 48 holds its risk for an hour: the episode stays open until it lapses too.
        _run(pipe, r, 20, 30)
        assert [lb.kind for lb in pipe.labels.find()] == ["failure"]
        k_after = int(3700 / STEP)  # the Xid has lapsed: clear from here
        _run(pipe, r, k_after, k_after + int(CLEAR_FOR_S / STEP) + 2)
        got = pipe.labels.find()
    finally:
        pipe.close()
    assert _labels(tmp_path) == [("failure", "n0:gpu1", "M1_hbm", None, "rule:dbe"),
                                 ("repair", "n0:gpu1", "M1_hbm", "gpu_reset", "rule:dbe")]
    assert got[1].time == T0 + k_after * STEP and got[1].alert_id == got[0].alert_id


def test_a_gpu_fallen_off_the_bus_stays_labelled_while_silent(tmp_path: Path) -> None:
    pipe = _pipe(tmp_path)
    r = Rounds(nodes=1, gpus=4)
    try:
        _run(pipe, r, 0, 6)
        _run(pipe, r, 6, 7, xid={6: ("n0:gpu2", 79)})
        _run(pipe, r, 7, 40, missing=("n0:gpu2",))  # silent from here on
        # One M2 failure: the Xid 79 and the GpuMissing alert after it are the same failure.
        got = [(lb.kind, lb.entity, str(lb.mode), lb.source) for lb in pipe.labels.find()]
        assert got == [("failure", "n0:gpu2", "M2_gpu_hard", "rule:xid")]
        assert pipe.labels.open_episodes()[0].entity == "n0:gpu2"
    finally:
        pipe.close()


def test_a_silent_gpu_is_labelled_and_its_return_is_a_repair(tmp_path: Path) -> None:
    pipe = _pipe(tmp_path)
    r = Rounds(nodes=1, gpus=4)
    try:
        _run(pipe, r, 0, 6)
        _run(pipe, r, 6, 60, missing=("n0:gpu3",))
        got = pipe.labels.find()
        assert [(lb.kind, str(lb.mode), lb.source) for lb in got] == [
            ("failure", "M2_gpu_hard", "missing")]
        assert got[0].alert_id is not None
        _run(pipe, r, 60, 60 + int(CLEAR_FOR_S / STEP) + 2)
    finally:
        pipe.close()
    assert _labels(tmp_path) == [
        ("failure", "n0:gpu3", "M2_gpu_hard", None, "missing"),
        ("repair", "n0:gpu3", "M2_gpu_hard", "reported_again", "missing")]


def test_a_restart_does_not_label_a_still_firing_rule_twice(tmp_path: Path) -> None:
    r = Rounds(nodes=1, gpus=2, links=2)
    r.set("n0:gpu0:nvlink1", "nvlink_state", 0)
    pipe = _pipe(tmp_path)
    try:
        _run(pipe, r, 0, 10)
    finally:
        pipe.close()
    pipe = _pipe(tmp_path)  # a new process on the same file, an empty window store
    try:
        _run(pipe, r, 10, 20)
    finally:
        pipe.close()
    assert _labels(tmp_path) == [("failure", "n0:gpu0:nvlink1", "M3_nvlink", None,
                                  "rule:nvlink_down")]


def test_a_flapping_link_is_one_failure_within_the_hour(tmp_path: Path) -> None:
    pipe = _pipe(tmp_path)
    r = Rounds(nodes=1, gpus=2, links=2)
    try:
        _run(pipe, r, 0, 4)
        for k0 in (4, 14, 24):
            r.set("n0:gpu1:nvlink0", "nvlink_state", 0)
            _run(pipe, r, k0, k0 + 5)
            r.set("n0:gpu1:nvlink0", "nvlink_state", 1)
            _run(pipe, r, k0 + 5, k0 + 10)
        hold = int(CLEAR_FOR_S / STEP)  # up since k=29
        _run(pipe, r, 34, 29 + hold - 1)
        assert [lb.kind for lb in pipe.labels.find()] == ["failure"]  # not clear for long yet
        _run(pipe, r, 29 + hold - 1, 29 + hold + 1)
        assert pipe.labels.find()[1].time == T0 + 29 * STEP
    finally:
        pipe.close()
    assert _labels(tmp_path) == [
        ("failure", "n0:gpu1:nvlink0", "M3_nvlink", None, "rule:nvlink_down"),
        ("repair", "n0:gpu1:nvlink0", "M3_nvlink", "link_restored", "rule:nvlink_down")]


def test_precursors_and_resettable_xids_are_not_failures(tmp_path: Path) -> None:
    pipe = _pipe(tmp_path)
    r = Rounds(nodes=1, gpus=2)
    try:
        _run(pipe, r, 0, 4)
        r.set("n0:gpu0", "remapped_rows_pending", 1)  # pending a reset: a precursor
        _run(pipe, r, 4, 10, xid={5: ("n0:gpu1", 13), 6: ("n0:gpu1", 31), 7: ("n0:gpu0", 9)})
        assert pipe.labels.find() == []
    finally:
        pipe.close()


def test_a_gpu_swapped_under_the_same_name_repairs_its_open_failure(tmp_path: Path) -> None:
    pipe = _pipe(tmp_path)
    r = Rounds(nodes=1, gpus=2)
    try:
        r.set("n0:gpu0", "ecc_sbe_aggregate", 5000)  # a lifetime count: persists across resets
        _run(pipe, r, 0, 4)
        r.set("n0:gpu0", "retired_pages_sbe", 64)  # past DCGM's limit: an HBM failure
        _run(pipe, r, 4, 8)
        assert [(lb.kind, lb.source) for lb in pipe.labels.find()] == [
            ("failure", "rule:retired_pages_limit")]
        # A new GPU in the slot: its lifetime counters start again, lower.
        r.set("n0:gpu0", "retired_pages_sbe", 0)
        r.set("n0:gpu0", "ecc_sbe_aggregate", 3)
        _run(pipe, r, 8, 8 + REBASE_AFTER + 1)
        got = pipe.labels.find()
    finally:
        pipe.close()
    assert [(lb.kind, str(lb.mode), lb.action, lb.source) for lb in got] == [
        ("failure", "M1_hbm", None, "rule:retired_pages_limit"),
        ("repair", "M1_hbm", "gpu_swapped", "counters")]
    assert got[1].time == T0 + (8 + REBASE_AFTER - 1) * STEP  # the reading that proved it
    assert got[1].alert_id == got[0].alert_id and not got[0].open  # the swap closed it
    assert _labels(tmp_path)[1][3] == "gpu_swapped"


def test_a_swap_its_identity_tells_repairs_at_once_and_its_counters_start_fresh(
        tmp_path: Path) -> None:
    """The same swap, said by the board's serial (service.stages.gpu_identity): the repair
    comes with the first round of the new board, not REBASE_AFTER readings later, and the new
    board's lower lifetime counters are its first readings, not drops held out of the window
    nor a second repair."""
    pipe = _pipe(tmp_path)
    r = Rounds(nodes=1, gpus=2)

    def run(k0: int, k1: int, serial: str) -> list[int]:
        drops = []
        for k in range(k0, k1):
            b = r.batch(T0 + k * STEP)
            b.identity = {"n0:gpu0": GpuIdentity(serial=serial, at=T0 + k * STEP)}
            drops.append(pipe.ingest(b, T0 + k * STEP).counter_drops)
            pipe.tick(T0 + k * STEP)
        return drops

    try:
        r.set("n0:gpu0", "ecc_sbe_aggregate", 5000)
        run(0, 4, "1650522003820")
        r.set("n0:gpu0", "retired_pages_sbe", 64)
        run(4, 8, "1650522003820")
        r.set("n0:gpu0", "retired_pages_sbe", 0)
        r.set("n0:gpu0", "ecc_sbe_aggregate", 3)
        drops = run(8, 8 + REBASE_AFTER + 2, "1650522009999")
        got = pipe.labels.find()
    finally:
        pipe.close()
    assert drops == [0] * (REBASE_AFTER + 2)
    assert [(lb.kind, str(lb.mode), lb.action, lb.source) for lb in got] == [
        ("failure", "M1_hbm", None, "rule:retired_pages_limit"),
        ("repair", "M1_hbm", "gpu_swapped", "identity")]
    assert got[1].time == T0 + 8 * STEP  # the round the new board said its serial
    assert got[1].detail == "another board in the slot: serial 1650522003820 -> 1650522009999"
    assert got[1].alert_id == got[0].alert_id and not got[0].open


def test_a_failed_diagnostic_pages_naming_its_check_and_is_a_failure_label(
        tmp_path: Path) -> None:
    """A node with no passive signal fails its NCCL test (service/diagnostics publishes the
    `diag` event): a level-3 alert whose signal names the P2P bandwidth check, and a failure
    label with the active-only mode, which `train --from-influx` reads (issue 32)."""
    pipe = _pipe(tmp_path)
    r = Rounds(nodes=2, gpus=4)
    try:
        _run(pipe, r, 0, 6)
        b = r.batch(T0 + 6 * STEP)
        b.events = EventFrame(["n1"], [T0 + 6 * STEP], ["diag"],
                              [float(FaultClass.P2P_BANDWIDTH)])
        pipe.process(b, T0 + 6 * STEP)
        _run(pipe, r, 7, 10)
        firing = [a for a in pipe.alerts.find(state="firing", limit=100) if a.node == "n1"]
        got = pipe.labels.find()
    finally:
        pipe.close()
    [alert] = firing
    assert alert.level == 3 and alert.entity == "n1"
    assert "diag_p2p_bandwidth" in {s.get("rule") for s in alert.explanation}, alert.explanation
    assert [(lb.kind, lb.entity, str(lb.mode), lb.source) for lb in got] == [
        ("failure", "n1", "M14_p2p_bw", "rule:diag_p2p_bandwidth")]
