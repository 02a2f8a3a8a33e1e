"""A RoCE port up with no RoCE v2 GID a job can use (`roce_gid_missing`): the public fault log of
400 eight-GPU servers over 349 days files it as "RDMA NIC GID error", 0.4 % of the downtime with
a known cause.

RDMA over Ethernet addresses a peer by a GID from the port's GID table, which the kernel fills
from the IP addresses of the port's netdev and its upper devices (VLAN, bond): a RoCE v1 and a
RoCE v2 entry per address, besides the link-local fe80:: pair it adds from the MAC as soon as
the netdev is up (sysfs `ports/<n>/gids/<i>` and `gid_attrs/types/<i>`, Documentation/ABI/
stable/sysfs-class-infiniband). A port whose netdev has lost its address (a DHCP lease not
renewed, a network configuration that no longer names the interface after a NIC swap or a
rename) stays ACTIVE and LinkUp at its full rate, so `ib_port_down` and `ib_rate_low` are
silent, but a job cannot use it: NCCL picks a RoCE v2 GID that is neither zero nor link-local
(net_ib ncclIbGetGidIndex and validGid; NCCL_IB_ROCE_VERSION_NUM 2 by default) and with none
falls back to index 0, the link-local entry, with which connections to other nodes time out
("Got completion with error 12", NVIDIA/nccl#426 and #769); a job pinned to an index
(NCCL_IB_GID_INDEX=3) reads an empty entry, whose type the kernel answers with EINVAL
("read failed in ncclIbRoceGetVersionNum: Invalid argument", NVIDIA/nccl#1573).

The reading is `ib_gid_roce_v2` (collectors.infiniband.sysfs): the RoCE v2 entries with a
routable address, on Ethernet ports of RoCE devices. The rule fires on a port up (ACTIVE and,
where reported, LinkUp) that has none at every reading over `hold_s` (two at least: an address
renewed or an interface restarted takes seconds) and that is meant to carry RoCE: another port
of its kind has a usable GID, either a port of the same HCA model and link layer on its node or
the same port on nodes of the same make-up (models.detectors.link_rate). A front-end port that
every node leaves without an address by design is no fault; `expect_all` holds every RoCE port
to having one. Level 2: the node's jobs fail at their next start, none is lost now.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.findings import Finding, fired, sustained
from models.detectors.link_rate import ACTIVE, LINK_UP, peer_classes, sibling_classes
from models.detectors.view import ScopeView

RULE = "roce_gid_missing"
ACTION = ("give the port's network interface its IP address back (ip addr; the netplan, "
          "NetworkManager or DHCP setting that names it), then check that show_gids lists a "
          "RoCE v2 GID with it")
ETHERNET = 2.0  # ib_link_layer


@dataclass(frozen=True, slots=True)
class RoceGidConfig:
    hold_s: float = 300.0  # no usable GID this long: an address renewal takes seconds
    # Hold every RoCE port to having a usable GID, not only those whose like ports have one.
    expect_all: bool = False
    risk: float = 0.7  # level 2: drain at the next job boundary


def _any_in_class(cls: npt.NDArray[np.int64], has: npt.NDArray[np.bool_]
                  ) -> npt.NDArray[np.bool_]:
    """[slot] whether any port of the slot's class has `has`."""
    if not len(cls):
        return np.zeros(0, np.bool_)
    return np.bincount(cls[has], minlength=int(cls.max()) + 1)[cls] > 0


def roce_gid_missing(ib: ScopeView, c: RoceGidConfig) -> Finding:
    """`roce_gid_missing` over every port of the scope (see the module's docstring)."""
    n = max(2, math.ceil(c.hold_s / ib.step_s))
    state = ib.window("ib_state", n).astype(np.float64)
    phys = ib.window("ib_phys_state", n).astype(np.float64)
    gids = ib.window("ib_gid_roce_v2", n).astype(np.float64)
    layer = ib.latest("ib_link_layer")
    with np.errstate(invalid="ignore"):
        up = (state == ACTIVE) & (np.isnan(phys) | (phys == LINK_UP))
        none = up & (gids == 0) & (layer == ETHERNET)[:, None]
        has = (gids[:, -1] >= 1) & up[:, -1]
    if c.expect_all:
        meant = np.ones(len(ib), np.bool_)
    else:
        sib = sibling_classes(ib.entities, ib.latest("ib_hca_model"), layer)
        meant = _any_in_class(sib, has) | _any_in_class(peer_classes(ib.entities), has)
    held = sustained(none, ~np.isnan(gids)) & meant
    risk = fired(np.where(held, 1.0, 0.0), 1, c.risk)
    details: dict[int, str] = {}
    for i in np.flatnonzero(risk > 0).tolist():
        e = ib.entities[i]
        details[i] = (f"{e.unit} port {e.sub} is up with no RoCE v2 GID carrying an IP address "
                      f"for {c.hold_s / 60:g} min, so jobs cannot use it (NCCL falls back to a "
                      f"link-local GID and its connections time out): {ACTION}")
    value = np.where(layer == ETHERNET, ib.latest("ib_gid_roce_v2"), np.nan)
    return Finding(RULE, Scope.IB_PORT, risk, value, 1.0,
                   f"RoCE port up with no usable RoCE v2 GID (no IP address on its netdev) for "
                   f"{c.hold_s / 60:g} min: {ACTION}", hard=True, details=details or None)
