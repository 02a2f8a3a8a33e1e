"""`roce_gid_missing` (models/detectors/roce_gid.py): a RoCE port up with no RoCE v2 GID that
carries an IP address, held five minutes, where a port of its kind has one. Read through the
collector from our own RoCE sysfs capture (mlx5_1 up with only its link-local GIDs beside
mlx5_0 with an address); quiet where nothing says the port should carry RoCE, on InfiniBand
and iWARP ports, on ports down, on readings an older agent sends without the GID count, and
on the real H100 sysfs tree, which has no GID tables."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Entity
from collectors.infiniband import PortReading, read_ports, unpack_ttar
from models.detectors.hard import HardRuleConfig, HardRules
from models.detectors.roce_gid import ACTION, RULE, RoceGidConfig, roce_gid_missing
from tests.collectors.own_captures import IB_ROCE_TTAR, IB_TTAR_ROOT, read
from tests.detectors.view import STEP_S, T0, FakeFleet, FakeScope, finding

C = RoceGidConfig()
HOLD = math.ceil(C.hold_s / STEP_S)
SYSFS_H100 = (Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures"
              / "infiniband-sysfs" / "gpud-sys-class-infiniband-h100.0")


def scope(nodes: Sequence[tuple[str, Sequence[PortReading]]]) -> FakeScope:
    """Every port held its collected readings for the whole raw window."""
    ents = [Entity.ib_port(n, p.device, p.port) for n, ports in nodes for p in ports]
    ib = FakeScope(Scope.IB_PORT, ents)
    i = 0
    for _, ports in nodes:
        for p in ports:
            for metric, v in (("ib_state", p.state), ("ib_phys_state", p.phys_state),
                              ("ib_rate", p.rate_gbps), ("ib_link_layer", p.link_layer),
                              ("ib_hca_model", p.hca_model), ("ib_gid_roce_v2", p.gid_roce_v2)):
                x = math.nan if v is None else float(v)
                ib.put(metric, i, [x] * ib.raw_length)
                ib.set_latest(metric, x, i)
            i += 1
    return ib


def own_capture(tmp_path: Path) -> list[PortReading]:
    unpack_ttar(read(IB_ROCE_TTAR), tmp_path)
    ports, rejected = read_ports(tmp_path / IB_TTAR_ROOT)
    assert not rejected
    return ports


def fired_at(ib: FakeScope, c: RoceGidConfig = C) -> list[str]:
    return [ib.entities[i].key for i in np.flatnonzero(roce_gid_missing(ib, c).risk)]


def slot(ib: FakeScope, key: str) -> int:
    return [e.key for e in ib.entities].index(key)


def test_a_roce_port_without_an_address_beside_one_with_fires_at_level_2(tmp_path: Path) -> None:
    ib = scope([("n1", own_capture(tmp_path))])
    got = roce_gid_missing(ib, C)
    assert [ib.entities[i].key for i in np.flatnonzero(got.risk)] == ["n1:mlx5_1:1"]
    i = slot(ib, "n1:mlx5_1:1")
    assert got.risk[i] == pytest.approx(0.7) and got.hard  # level 2 (warning enters at 0.6)
    assert got.value[i] == 0 and got.value[slot(ib, "n1:mlx5_0:1")] == 1
    assert np.isnan(got.value[slot(ib, "n1:cxgb4_0:1")])  # iWARP: no RoCE GIDs to count
    text = got.signal_of(i)
    assert text.startswith("mlx5_1 port 1 is up with no RoCE v2 GID carrying an IP address "
                           "for 5 min") and text.endswith(ACTION)
    assert "ip addr" in ACTION and "show_gids" in ACTION


def test_registered_in_the_hard_rules_and_read_from_settings(tmp_path: Path) -> None:
    from service.settings import DetectorSettings

    f = FakeFleet()
    f.scopes[Scope.IB_PORT] = scope([("n1", own_capture(tmp_path))])
    got = finding(HardRules().detect(f, T0), RULE)
    assert [f.ib.entities[i].key for i in np.flatnonzero(got.risk)] == ["n1:mlx5_1:1"]
    s = DetectorSettings.model_validate({"hard": {"roce_gid": {"hold_s": 60,
                                                                "expect_all": True}}})
    assert s.hard.roce_gid == RoceGidConfig(hold_s=60.0, expect_all=True)
    assert HardRuleConfig().roce_gid == C


def test_quiet_just_under_the_hold_and_clears_when_the_address_is_back(tmp_path: Path) -> None:
    ib = scope([("n1", own_capture(tmp_path))])
    i = slot(ib, "n1:mlx5_1:1")
    ib.put("ib_gid_roce_v2", i, [1.0] + [0.0] * (HOLD - 1))  # lost 4 min 55 s ago
    assert not fired_at(ib)
    ib.put("ib_gid_roce_v2", i, [0.0] * HOLD)
    assert fired_at(ib) == ["n1:mlx5_1:1"]
    ib.put("ib_gid_roce_v2", i, [0.0] * (HOLD - 1) + [2.0])  # DHCP renewed: v2 back
    assert not fired_at(ib)


def test_a_port_down_is_left_to_ib_port_down(tmp_path: Path) -> None:
    ib = scope([("n1", own_capture(tmp_path))])
    i = slot(ib, "n1:mlx5_1:1")
    ib.put("ib_state", i, [1.0] * HOLD)
    ib.put("ib_phys_state", i, [3.0] * HOLD)
    assert not fired_at(ib) and not fired_at(ib, RoceGidConfig(expect_all=True))


def test_no_port_of_its_kind_has_an_address_quiet_unless_every_port_must(tmp_path: Path) -> None:
    """Both ConnectX-7 ports without an address (a node that runs them without RoCE by
    design, as far as anything here can tell): quiet, unless `expect_all`."""
    ports = own_capture(tmp_path)
    for p in ports:
        if p.gid_roce_v2 is not None:
            p.gid_roce_v2 = 0
    assert not fired_at(scope([("n1", ports)]))
    assert fired_at(scope([("n1", ports)]), RoceGidConfig(expect_all=True)) == [
        "n1:mlx5_0:1", "n1:mlx5_1:1"]


def test_the_same_port_on_like_nodes_says_it_should_have_one() -> None:
    """A BlueField-3 bond, the one RoCE port of each node: no sibling, but the same port on
    the other nodes of the same make carries an address."""
    def node(gids: int) -> list[PortReading]:
        return [PortReading("mlx5_0", 1, 4, 5, 400, link_layer=1, hca_model=4129),
                PortReading("mlx5_bond_0", 1, 4, 5, 200, link_layer=2, hca_model=41692,
                            gid_roce_v2=gids)]

    ib = scope([("n0", node(2)), ("n1", node(0)), ("n2", node(2))])
    assert fired_at(ib) == ["n1:mlx5_bond_0:1"]
    alone = scope([("n1", node(0))])
    assert not fired_at(alone)


def test_old_agents_and_infiniband_ports_never_fire(tmp_path: Path) -> None:
    ports = own_capture(tmp_path)
    for p in ports:  # an agent before the GID count: the readings are absent
        p.gid_roce_v2 = None
    assert not fired_at(scope([("n1", ports)]), RoceGidConfig(expect_all=True))
    ib_ports = [PortReading(f"mlx5_{d}", 1, 4, 5, 400, link_layer=1, hca_model=4129,
                            gid_roce_v2=0) for d in range(4)]  # a count sent for IB: ignored
    ib_ports[0].gid_roce_v2 = 1
    assert not fired_at(scope([("n1", ib_ports)]), RoceGidConfig(expect_all=True))


def test_the_real_h100_sysfs_tree_has_no_gid_tables_and_never_fires() -> None:
    if not SYSFS_H100.is_dir():
        pytest.skip(f"fixture not found at {SYSFS_H100} (the shared checkout is absent)")
    ports, rejected = read_ports(SYSFS_H100)
    assert not rejected and all(p.gid_roce_v2 is None for p in ports)
    bond = next(p for p in ports if p.device == "mlx5_bond_0")
    assert bond.link_layer == 2  # the Ethernet port, whose table the capture did not copy
    assert not fired_at(scope([("h0", ports)]), RoceGidConfig(expect_all=True))
