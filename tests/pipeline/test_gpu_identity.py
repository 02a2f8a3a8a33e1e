"""Each GPU slot's board, kept once per change (service.stages.gpu_identity): a first identity,
an attribute said later, a swap, a late identity from before a swap, a renumbering, a restart,
and two replicas writing one shared table."""

from __future__ import annotations

from pathlib import Path

from collectors.identity import GpuIdentity
from service.stages.gpu_identity import MAX_BOARDS, MAX_CHANGES_PER_HOUR, GpuIdentities

A = GpuIdentity(uuid="GPU-513536b6-7d19-9063-b049-1e69664bb298", serial="1650522003820",
                model="NVIDIA A100-SXM4-80GB", at=100.0)
B = GpuIdentity(uuid="GPU-c2f76b33-7953-256e-8f33-1343419b1a1c", serial="1650522009999",
                model="NVIDIA A100-SXM4-80GB", at=200.0)
C = GpuIdentity(uuid="GPU-d7cbb0cd-d4bd-c2f7-dfaf-221df5e958ea", serial="1650522000001",
                at=100.0)


def test_a_first_identity_is_new_and_the_same_again_is_nothing() -> None:
    ids = GpuIdentities()
    [c] = ids.observe({"n1:gpu0": A}, 1000.0)
    assert (c.kind, c.entity, c.identity) == ("new", "n1:gpu0", A)
    assert ids.observe({"n1:gpu0": A}, 1005.0) == []
    assert ids.current("n1:gpu0") == A
    assert ids.current("n1:gpu0:nvlink3") == A  # a link's board is its GPU's
    assert ids.current("n1:gpu1") is None


def test_an_attribute_said_later_fills_in_without_a_swap() -> None:
    ids = GpuIdentities()
    ids.observe({"n1:gpu0": GpuIdentity(uuid=A.uuid, model=A.model, at=100.0)}, 1000.0)
    [c] = ids.observe({"n1:gpu0": GpuIdentity(serial=A.serial, driver="535.54.03",
                                              at=105.0)}, 1005.0)
    assert c.kind == "changed"
    assert c.why == "serial 1650522003820, driver 535.54.03"
    assert ids.current("n1:gpu0") == GpuIdentity(uuid=A.uuid, serial=A.serial, model=A.model,
                                                 driver="535.54.03")
    [c] = ids.observe({"n1:gpu0": GpuIdentity(uuid=A.uuid, driver="550.54.15", at=110.0)},
                      1010.0)
    assert (c.kind, c.why) == ("changed", "driver 535.54.03 -> 550.54.15")
    assert len(ids.boards("n1:gpu0")) == 1


def test_another_serial_is_a_swap_and_the_old_board_is_kept() -> None:
    ids = GpuIdentities()
    ids.observe({"n1:gpu0": A}, 1000.0)
    [c] = ids.observe({"n1:gpu0": B}, 2000.0)
    assert c.kind == "swapped"
    assert c.why == "serial 1650522003820 -> 1650522009999"
    old, new = ids.boards("n1:gpu0")
    assert (old.identity, old.since, old.until) == (A, 1000.0, 2000.0)
    assert (new.identity, new.since, new.until) == (B, 2000.0, None)
    # An alert that started before the swap names the board that failed.
    assert ids.at("n1:gpu0", 1500.0) == A
    assert ids.at("n1:gpu0", 2500.0) == B
    assert ids.at("n1:gpu0", 10.0) == A  # an identity said after the alert opened


def test_an_identity_from_before_a_swap_arriving_late_is_ignored() -> None:
    ids = GpuIdentities()
    ids.observe({"n1:gpu0": A}, 1000.0)
    ids.observe({"n1:gpu0": B}, 2000.0)
    # A spool drained after the swap: the old board's identity, stamped before B's.
    assert ids.observe({"n1:gpu0": GpuIdentity(serial=A.serial, at=150.0)}, 2005.0) == []
    assert ids.current("n1:gpu0") == B
    assert ids.late == 1


def test_a_board_seen_in_another_slot_of_its_node_is_renumbered_not_swapped() -> None:
    ids = GpuIdentities()
    ids.observe({"n1:gpu3": A, "n1:gpu4": B, "n2:gpu3": C}, 1000.0)
    # gpu3 fell off the bus; the driver numbers gpu4's board as gpu3.
    [c] = ids.observe({"n1:gpu3": B}, 2000.0)
    assert c.kind == "renumbered"
    assert "n1:gpu4" in c.why
    # The same board as another node's slot is not this node's: a swap.
    [c] = ids.observe({"n2:gpu3": A}, 2000.0)
    assert c.kind == "swapped"


def test_the_boards_survive_a_restart(tmp_path: Path) -> None:
    db = str(tmp_path / "state.db")
    ids = GpuIdentities(db)
    ids.observe({"n1:gpu0": A}, 1000.0)
    ids.observe({"n1:gpu0": B}, 2000.0)
    ids.close()
    again = GpuIdentities(db)
    assert [b.identity for b in again.boards("n1:gpu0")] == [A, B]
    assert again.observe({"n1:gpu0": B}, 3000.0) == []  # nothing new after the restart
    again.close()


def test_two_replicas_on_one_table_write_each_board_once(tmp_path: Path) -> None:
    db = str(tmp_path / "state.db")
    one, two = GpuIdentities(db), GpuIdentities(db)
    one.observe({"n1:gpu0": A}, 1000.0)
    two.observe({"n1:gpu0": A}, 1000.5)  # the standby saw the same round
    one.observe({"n1:gpu0": B}, 2000.0)
    [c] = two.observe({"n1:gpu0": B}, 2000.5)
    assert c.kind == "swapped"  # each replica's pipeline hears of it ...
    three = GpuIdentities(db)  # ... but the table holds each board once
    assert [b.identity for b in three.boards("n1:gpu0")] == [A, B]
    for s in (one, two, three):
        s.close()


def test_a_forgotten_node_is_forgotten_in_memory_and_finds_its_row_again(
        tmp_path: Path) -> None:
    db = str(tmp_path / "state.db")
    ids = GpuIdentities(db)
    ids.observe({"n1:gpu0": A, "n10:gpu0": C}, 1000.0)
    ids.forget_nodes({"n1"})
    assert ids.current("n1:gpu0") is None and ids.current("n10:gpu0") == C
    [c] = ids.observe({"n1:gpu0": A}, 2000.0)  # it comes back with the same board
    assert c.kind == "new" and ids.current("n1:gpu0") == A
    ids.close()
    again = GpuIdentities(db)
    assert [b.identity for b in again.boards("n1:gpu0")] == [A]  # one row, not two
    again.close()


def test_sources_that_disagree_cannot_flip_a_slot_every_round() -> None:
    """Two sources numbering one node's GPUs otherwise: the slot would flip each round, a row
    and an InfluxDB point each time. Past its hourly budget a slot's changes are held."""
    ids = GpuIdentities()
    flips = 0
    for k in range(60):  # five minutes of 5-s rounds, the two boards in turn
        board = (A if k % 2 else B)
        changes = ids.observe({"n1:gpu0": GpuIdentity(uuid=board.uuid, serial=board.serial,
                                                      at=100.0 + 5 * k)}, 1000.0 + 5 * k)
        flips += len(changes)
    assert flips == MAX_CHANGES_PER_HOUR
    # Of the 54 rounds after the budget ran out, every other one says the board held anyway.
    assert ids.held == (60 - MAX_CHANGES_PER_HOUR) // 2
    assert len(ids.boards("n1:gpu0")) <= MAX_BOARDS
    # An hour on, the slot may change again.
    [c] = ids.observe({"n1:gpu0": GpuIdentity(serial="1650522000777", at=10_000.0)}, 10_000.0)
    assert c.kind == "swapped"
