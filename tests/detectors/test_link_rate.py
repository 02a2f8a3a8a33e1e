"""`ib_rate_low` (models/detectors/link_rate.py): a port up below the rate its peers or the
operator's setting say its link runs at, held for five minutes. It fires on one slow port and
on a whole node trained low, stays quiet on a fleet that all runs one lower rate, just under
the hold time, and once the rate is back; a down port never fires, whatever rate it reads, and
ports of different kinds on one node are never held to each other's rate (real ibstat captures
of H100 nodes with Ethernet and InfiniBand HCAs side by side). Where the HCA model and link
layer are read, a port is also held to its siblings on its own node (the same model and layer),
which is what judges a node with too few like nodes: the real captures of one H100 node alone."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity
from collectors.infiniband import parse_ibstat, read_ports
from collectors.infiniband.sysfs import PortReading
from collectors.labels import FailureMode
from models.detectors.failure_modes import RULE_REPAIRS, mode_of
from models.detectors.hard import HardRuleConfig, HardRules
from models.detectors.link_rate import (
    ACTION,
    RULE,
    LinkRateConfig,
    link_rate_low,
    peer_rate,
    sibling_classes,
)
from tests.detectors.view import STEP_S, T0, FakeFleet, FakeScope, finding

C = LinkRateConfig()
HOLD = math.ceil(C.hold_s / STEP_S)  # raw steps of the hold window
OTHER = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "other"
SYSFS_H100 = OTHER.parent / "infiniband-sysfs" / "gpud-sys-class-infiniband-h100.0"


def fleet(nodes: int = 3, ports: int = 8, rate: float = 400.0) -> FakeFleet:
    """Every port ACTIVE / LinkUp at `rate` for the whole raw window."""
    f = FakeFleet(nodes=nodes, ports=ports)
    f.ib.fill("ib_state", 4.0)
    f.ib.fill("ib_phys_state", 5.0)
    f.ib.fill("ib_rate", rate)
    return f


def risk(ib: FakeScope, config: LinkRateConfig = C) -> np.ndarray:
    return link_rate_low(ib, config).risk


def fired_at(ib: FakeScope, config: LinkRateConfig = C) -> list[str]:
    return [ib.entities[i].key for i in np.flatnonzero(risk(ib, config))]


def test_one_slow_port_among_its_peers_fires_at_level_2_naming_port_rate_and_action() -> None:
    f = fleet()
    slot = 8 + 3  # n1:mlx5_3:1, at 200 while the same port on n0 and n2 (and its node) run 400
    f.ib.put("ib_rate", slot, [200.0] * HOLD)
    got = link_rate_low(f.ib, C)
    assert [f.ib.entities[i].key for i in np.flatnonzero(got.risk)] == ["n1:mlx5_3:1"]
    assert got.risk[slot] == pytest.approx(0.7) and got.hard  # level 2 (warning enters at 0.6)
    assert got.value[slot] == 200.0
    text = got.signal_of(slot)
    assert "mlx5_3 port 1 is up at 200 Gb/s, expected 400 Gb/s" in text
    assert "2 of the 3 same ports" in text and text.endswith(ACTION)
    assert ACTION == "reseat or replace the cable/transceiver; check the switch port"


def test_registered_in_the_hard_rules_and_mapped_to_a_nic_speed_failure() -> None:
    f = fleet()
    f.ib.put("ib_rate", 0, [200.0] * HOLD)
    got = finding(HardRules().detect(f, T0), RULE)
    assert got.risk[0] > 0 and not got.risk[1:].any()
    assert mode_of(RULE, float(got.value[0])) is FailureMode.M11_NIC_SPEED
    assert RULE_REPAIRS[RULE] == "port_restored"


def test_a_whole_node_trained_low_is_low_against_the_same_ports_on_other_nodes() -> None:
    f = fleet(nodes=4)
    for slot in range(8, 16):  # all of n1's ports
        f.ib.put("ib_rate", slot, [200.0] * HOLD)
    assert fired_at(f.ib) == [f"n1:mlx5_{p}:1" for p in range(8)]


def test_quiet_when_every_port_of_a_fleet_of_one_type_runs_the_same_lower_rate() -> None:
    assert not risk(fleet(rate=200.0).ib).any()
    assert not risk(fleet(nodes=1, rate=100.0).ib).any()


def test_quiet_just_under_the_hold_time_and_fires_at_it() -> None:
    f = fleet()
    f.ib.put("ib_rate", 0, [400.0] + [200.0] * (HOLD - 1))  # retrained 4 min 55 s ago
    assert not risk(f.ib).any()
    f.ib.put("ib_rate", 0, [200.0] * HOLD)
    assert risk(f.ib)[0] > 0


def test_resets_when_the_rate_returns() -> None:
    f = fleet()
    f.ib.put("ib_rate", 0, [200.0] * HOLD)
    assert risk(f.ib)[0] > 0
    f.ib.put("ib_rate", 0, [200.0] * (HOLD - 1) + [400.0])  # reseated: back at 400
    assert not risk(f.ib).any()


def test_a_retraining_link_mid_window_restarts_the_hold() -> None:
    f = fleet()
    f.ib.put("ib_rate", 0, [200.0] * HOLD)
    f.ib.put("ib_phys_state", 0, [6.0] + [5.0] * 30)  # LinkErrorRecovery 2.5 min ago
    assert not risk(f.ib).any()


@pytest.mark.parametrize("rate", [0.0, 40.0, math.nan])
def test_a_down_port_never_fires_whatever_rate_it_reads(rate: float) -> None:
    f = fleet()
    f.ib.put("ib_state", 0, [1.0] * HOLD)  # DOWN
    f.ib.put("ib_phys_state", 0, [3.0] * HOLD)  # Disabled
    f.ib.put("ib_rate", 0, [rate] * HOLD)
    config = LinkRateConfig(default_gbps=400.0)  # even held to a configured rate
    assert not risk(f.ib).any() and not risk(f.ib, config).any()


def test_down_ports_are_no_peers() -> None:
    f = fleet(nodes=3, ports=1)
    for slot in (1, 2):  # mlx5_0 down at 40 on n1 and n2: n0's one port up has no peers
        f.ib.put("ib_state", slot, [1.0] * HOLD)
        f.ib.put("ib_rate", slot, [40.0] * HOLD)
    f.ib.put("ib_rate", 0, [200.0] * HOLD)
    assert not risk(f.ib).any()
    assert risk(f.ib, LinkRateConfig(min_peers=1, default_gbps=400.0))[0] > 0


def test_a_fleet_split_between_two_rates_holds_no_one_to_either() -> None:
    f = fleet(nodes=4, ports=1)
    for slot in (2, 3):
        f.ib.put("ib_rate", slot, [200.0] * HOLD)
    assert not risk(f.ib).any()  # 2 at 400, 2 at 200: no majority
    f.ib.put("ib_rate", 3, [400.0] * HOLD)
    assert fired_at(f.ib) == ["n2:mlx5_0:1"]  # 3 of 4 at 400


def test_configured_rate_first_pattern_wins_then_the_default() -> None:
    f = fleet(nodes=1, ports=3, rate=200.0)  # one node: no peers
    assert not risk(f.ib).any()
    assert risk(f.ib, LinkRateConfig(default_gbps=400.0)).all()
    cfg = LinkRateConfig(expected_gbps={"mlx5_0": 200.0, "mlx5_*": 400.0}, default_gbps=100.0)
    got = link_rate_low(f.ib, cfg)
    assert fired_at(f.ib, cfg) == ["n0:mlx5_1:1", "n0:mlx5_2:1"]
    assert "expected 400 Gb/s (the configured rate)" in got.signal_of(1)


def test_settings_read_the_rule_from_yaml() -> None:
    from service.settings import DetectorSettings

    s = DetectorSettings.model_validate(
        {"hard": {"link_rate": {"hold_s": 120, "expected_gbps": {"mlx5_[0-7]": 400}}}})
    assert s.hard.link_rate == LinkRateConfig(hold_s=120.0, expected_gbps={"mlx5_[0-7]": 400.0})
    assert HardRuleConfig().link_rate == C


def test_peer_rate_needs_a_strict_majority_of_enough_up_ports() -> None:
    cls = np.array([0, 0, 0, 0, 1, 1, 1], np.int64)
    rate = np.array([400, 400, 400, 200, 100, 100, 25], np.float64)
    up = np.array([True, True, True, True, True, True, False])
    mode, at, total = peer_rate(cls, rate, up, 3)
    assert mode[:4].tolist() == [400.0] * 4 and at[0] == 3 and total[0] == 4
    assert np.isnan(mode[4:]).all()  # class 1: two up ports, fewer than 3


# ---- Ethernet and InfiniBand side by side ------------------------------------------------------

def test_an_ethernet_front_end_port_is_never_held_to_the_infiniband_ports_rate() -> None:
    """mlx5_0 a 100 Gb/s Ethernet port on every node, mlx5_1..8 400 Gb/s InfiniBand: each is
    compared only with the same port on the other nodes, never with the node's other ports."""
    f = fleet(nodes=3, ports=9)
    for node in range(3):
        f.ib.put("ib_rate", 9 * node, [100.0] * HOLD)
    assert not risk(f.ib).any()
    f.ib.put("ib_rate", 9 + 0, [25.0] * HOLD)  # n1's front-end port fell to 25
    f.ib.put("ib_rate", 18 + 4, [200.0] * HOLD)  # n2's mlx5_4 fell to 200
    got = link_rate_low(f.ib, C)
    assert [f.ib.entities[i].key for i in np.flatnonzero(got.risk)] == [
        "n1:mlx5_0:1", "n2:mlx5_4:1"]
    assert "expected 100 Gb/s" in got.signal_of(9)
    assert "expected 400 Gb/s" in got.signal_of(22)


def test_nodes_of_another_make_are_not_peers() -> None:
    """An A100 node (HCAs mlx5_0..8) and H100 nodes (mlx5_0..11): mlx5_0 is Ethernet at 200 on
    the first and InfiniBand at 400 on the others (the real captures), never compared."""
    ents = [Entity.ib_port("a100", f"mlx5_{d}", 1) for d in range(9)]
    ents += [Entity.ib_port(f"h{n}", f"mlx5_{d}", 1) for n in range(3) for d in range(12)]
    ib = FakeScope(Scope.IB_PORT, ents)
    ib.fill("ib_state", 4.0)
    ib.fill("ib_phys_state", 5.0)
    ib.fill("ib_rate", 400.0)
    for d in range(9):
        ib.put("ib_rate", d, [200.0] * HOLD)
    assert not risk(ib).any()


# ---- the real ibstat captures through the parser ------------------------------------------------

def _need(name: str) -> str:
    path = OTHER / name
    if not path.is_file():
        pytest.skip(f"fixture {name} not found under {OTHER} (the shared checkout is absent)")
    return path.read_text()


def from_ports(nodes: Sequence[tuple[str, Sequence[PortReading]]], kinds: bool = True
               ) -> FakeScope:
    """A scope whose ports held their parsed readings for the whole raw window; without
    `kinds`, as an agent that reads no HCA model or link layer sends them."""
    ents = [Entity.ib_port(n, p.device, p.port) for n, ports in nodes for p in ports]
    ib = FakeScope(Scope.IB_PORT, ents)
    i = 0
    for _, ports in nodes:
        for p in ports:
            readings = [("ib_state", p.state), ("ib_phys_state", p.phys_state),
                        ("ib_rate", p.rate_gbps)]
            if kinds:
                readings += [("ib_link_layer", p.link_layer), ("ib_hca_model", p.hca_model)]
            for metric, v in readings:
                x = math.nan if v is None else float(v)
                ib.put(metric, i, [x] * ib.raw_length)
                ib.set_latest(metric, x, i)
            i += 1
    return ib


def at_rate(ports: Sequence[PortReading], device: str, rate: float) -> list[PortReading]:
    """The ports with one of them renegotiated to `rate`."""
    return [dataclasses.replace(p, rate_gbps=rate) if p.device == device else p for p in ports]


def test_real_capture_ports_down_at_rate_40_never_fire() -> None:
    """gpud's H100 capture: three ConnectX-6 Dx Ethernet ports DOWN / Disabled still read rate
    40; one ConnectX-6 Dx up at 100 beside eight ConnectX-7 InfiniBand ports at 400. Three such
    nodes, even held to a configured 100 Gb/s on the down ports: nothing fires."""
    r = parse_ibstat(_need("gpud-ibstat.47.0.h100.some.down.0"), "h0")
    assert not r.rejected
    down = [p.device for p in r.ports if p.state != 4]
    assert down == ["mlx5_2", "mlx5_7", "mlx5_8"]
    assert {p.rate_gbps for p in r.ports if p.state != 4} == {40}
    ib = from_ports([(f"h{n}", r.ports) for n in range(3)])
    assert not risk(ib).any()
    assert not risk(ib, LinkRateConfig(expected_gbps={"mlx5_[278]": 100.0})).any()
    assert not risk(from_ports([("h0", r.ports)])).any()  # one node alone: no peers


def test_real_captures_one_port_renegotiated_to_half_rate_fires_alone() -> None:
    """The all-active H100 capture on four nodes (ConnectX-7 at 400 and ConnectX-6 Dx at 100,
    all Ethernet), and the some-down one's rates for contrast: one ConnectX-7 port at 200."""
    ports = parse_ibstat(_need("gpud-ibstat.47.0.h100.all.active.0"), "h0").ports
    assert {p.rate_gbps for p in ports} == {100, 400}
    slow = [PortReading(p.device, p.port, p.state, p.phys_state,
                        200 if p.device == "mlx5_3" else p.rate_gbps) for p in ports]
    ib = from_ports([("h0", ports), ("h1", ports), ("h2", slow), ("h3", ports)])
    assert fired_at(ib) == ["h2:mlx5_3:1"]


# ---- siblings on one node: the same HCA model and link layer -----------------------------------

def test_one_h100_node_alone_holds_a_port_to_its_siblings_never_to_another_model() -> None:
    """The all-active H100 capture alone (no like nodes): 8 ConnectX-7 (MT4129) at 400 and 4
    ConnectX-6 Dx (MT4125) at 100, all Ethernet. The 100s are never held to the 400s; a
    ConnectX-7 at 200 beside seven at 400 fires, and so does a ConnectX-6 Dx at 25 beside three
    at 100. Without the two readings (an older agent) the node has nothing to compare with."""
    ports = parse_ibstat(_need("gpud-ibstat.47.0.h100.all.active.0"), "h0").ports
    assert sorted({(p.hca_model, p.link_layer, p.rate_gbps) for p in ports}) == [
        (4125, 2, 100), (4129, 2, 400)]
    assert not risk(from_ports([("h0", ports)])).any()
    slow = at_rate(ports, "mlx5_3", 200)  # a ConnectX-7
    got = link_rate_low(from_ports([("h0", slow)]), C)
    assert fired_at(from_ports([("h0", slow)])) == ["h0:mlx5_3:1"]
    i = next(i for i, p in enumerate(slow) if p.device == "mlx5_3")
    assert ("mlx5_3 port 1 is up at 200 Gb/s, expected 400 Gb/s (the rate 7 of the 8 MT4129 "
            "Ethernet ports up on its node run at)") in got.signal_of(i)
    assert fired_at(from_ports([("h0", at_rate(ports, "mlx5_7", 25))])) == ["h0:mlx5_7:1"]
    assert not risk(from_ports([("h0", slow)], kinds=False)).any()  # the old behaviour


def test_same_model_other_link_layer_is_no_sibling() -> None:
    """The A100 capture: nine MT4126, eight InfiniBand at 200 and mlx5_0 Ethernet. The
    Ethernet port at 100 is alone of its kind; an InfiniBand port at 100 is low."""
    ports = parse_ibstat(_need("gpud-ibstat.47.0.a100.all.active.0"), "a0").ports
    assert {p.hca_model for p in ports} == {4126}
    assert [p.device for p in ports if p.link_layer == 2] == ["mlx5_0"]
    assert not risk(from_ports([("a0", at_rate(ports, "mlx5_0", 100))])).any()
    assert fired_at(from_ports([("a0", at_rate(ports, "mlx5_4", 100))])) == ["a0:mlx5_4:1"]


def test_the_real_sysfs_tree_of_one_node() -> None:
    """gpud's H100 sysfs tree read by the collector: 8 ConnectX-7 InfiniBand at 400 and a
    BlueField-3 (MT41692) Ethernet bond at 200, alone of its kind and never low."""
    if not SYSFS_H100.is_dir():
        pytest.skip(f"fixture not found at {SYSFS_H100} (the shared checkout is absent)")
    ports, rejected = read_ports(SYSFS_H100)
    assert not rejected
    assert not risk(from_ports([("h0", ports)])).any()
    assert not risk(from_ports([("h0", at_rate(ports, "mlx5_bond_0", 100))])).any()
    assert fired_at(from_ports([("h0", at_rate(ports, "mlx5_6", 200))])) == ["h0:mlx5_6:1"]


def test_like_nodes_judge_first_a_slot_the_fleet_runs_low_is_the_design() -> None:
    """Three like nodes each run mlx5_0 (a ConnectX-7 like the rest) at 200 and mlx5_1..7 at
    400: the fleet says 200 is what mlx5_0 runs at, so its siblings do not make it low. A
    node of a make of its own (no like nodes) is judged by its siblings."""
    f = fleet(nodes=3, ports=8)
    f.ib.fill("ib_hca_model", 4129.0)
    f.ib.fill("ib_link_layer", 1.0)
    f.ib.set_latest("ib_hca_model", 4129.0)
    f.ib.set_latest("ib_link_layer", 1.0)
    for node in range(3):
        f.ib.put("ib_rate", 8 * node, [200.0] * HOLD)
    assert not risk(f.ib).any()
    lone = from_ports([("x0", [PortReading(f"mlx5_{d}", 1, 4, 5, 200 if d == 0 else 400,
                                           link_layer=1, hca_model=4129) for d in range(8)])])
    assert fired_at(lone) == ["x0:mlx5_0:1"]


def test_siblings_need_a_strict_majority_of_at_least_three() -> None:
    def node(*rates: float) -> FakeScope:
        return from_ports([("x0", [PortReading(f"mlx5_{d}", 1, 4, 5, r, link_layer=2,
                                               hca_model=4125) for d, r in enumerate(rates)])])

    assert not risk(node(100, 25)).any()  # two: no majority
    assert not risk(node(100, 100, 25, 25)).any()  # split
    assert fired_at(node(100, 100, 25)) == ["x0:mlx5_2:1"]
    assert not risk(node(100, 100, 25), LinkRateConfig(min_siblings=4)).any()


def test_sibling_classes_by_node_model_and_layer() -> None:
    ents = [Entity.ib_port(n, f"mlx5_{d}", 1) for n in ("a", "b") for d in range(3)]
    model = np.array([4129, 4129, 4125, 4129, 4129, math.nan])
    layer = np.array([1, 2, 2, 1, 1, 2], np.float64)
    cls = sibling_classes(ents, model, layer).tolist()
    assert cls[3] == cls[4] and len(set(cls)) == 5  # b's two MT4129 IB ports; the rest alone
