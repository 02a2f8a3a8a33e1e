"""Fabric: InfiniBand ports (bit-error rate, symbol errors, flaps, state, traffic) and the
riskiest links and ports."""

from __future__ import annotations

import re

from collectors.catalog import Scope
from models.detectors.dynamic import DynamicConfig
from service.grafana.common import FABRIC, alert_annotation, cluster_var, node_var, risk_table
from service.grafana.contract import RATES, SAMPLES, counters, metric
from service.grafana.panels import (
    Json,
    dashboard,
    row,
    state_timeline,
    target,
    timeseries,
    value_map,
    variable,
)
from service.grafana.queries import col, select, tag_values

VARS = ("cluster", "node", "device")
IB = SAMPLES[Scope.IB_PORT]
IB_RATE = RATES[Scope.IB_PORT]
_PER_PORT = "$tag_host $tag_device:$tag_port"
_BY = ["host", "device", "port"]
# IBA PortRcvData/PortXmitData count 4-octet words.
_BYTES_PER_WORD = 4


def _m(name: str) -> str:
    return metric(name, Scope.IB_PORT).name


def port_states() -> dict[int, str]:
    """The port state enum as the catalog describes it ("1 DOWN, 2 INIT, ...")."""
    found = re.findall(r"(\d+) ([A-Z]+)", metric("ib_state", Scope.IB_PORT).description)
    if not found:
        raise ValueError("ib_state's catalog description no longer lists its states")
    return {int(k): v for k, v in found}


def _device_var() -> Json:
    return variable("device", "HCA", tag_values(IB, "device", {"cluster": "cluster",
                                                               "host": "node"}))


def _rates(title: str, fields: list[str], *, description: str, scale: float | None = None,
           unit: str = "short", fn: str = "max", log: bool = False) -> Json:
    cols = [col(fn, IB_RATE.field(f), scale=scale) for f in fields]
    alias = _PER_PORT + (" $col" if len(fields) > 1 else "")
    return timeseries(title, [target(select(IB_RATE, cols, variables=VARS, by=_BY),
                                     alias=alias)],
                      unit=unit, log=log, minimum=0, description=description)


def build() -> Json:
    limit = DynamicConfig().ber_limit
    used = {_m("ib_symbol_error"), _m("ib_link_flaps"), _m("ib_link_downed")}
    data = [_m("ib_port_rcv_data"), _m("ib_port_xmit_data")]
    other_errors = [m.name for m in counters(Scope.IB_PORT)
                    if m.name not in used and m.name not in data]
    states = port_states()
    active = max(states)
    panels = [
        row("InfiniBand errors"),
        timeseries("Bit-error rate per port", [target(
            select(IB, [col("max", IB.field(_m("ib_ber")))], variables=VARS, by=_BY),
            alias=_PER_PORT)], unit="sci", log=True,
            steps=[(None, "transparent"), (limit, "red")],
            description="Symbol errors over bits carried at the link rate; dashed: the "
                        f"BER rule's limit {limit:g}."),
        _rates("Symbol errors per second", [_m("ib_symbol_error")],
               description="PHY symbol errors per second on any lane (reset-aware)."),
        _rates("Link flaps and downs per minute", [_m("ib_link_flaps"), _m("ib_link_downed")],
               fn="mean", scale=60,
               description="Times a port left ACTIVE, and times it went down, per minute."),
        _rates("Other port errors per second", other_errors,
               description="Receive errors, link recoveries, integrity and overrun errors."),
        row("Link state and traffic"),
        state_timeline("Port state", [target(
            select(IB, [col("min", IB.field(_m("ib_state")))], variables=VARS, by=_BY),
            alias=_PER_PORT)], steps=[(None, "red"), (active, "green")],
            mappings=value_map({k: (v, "green" if k == active else "red")
                                for k, v in states.items()}),
            description="Logical port state; anything but ACTIVE is red."),
        timeseries("Link rate", [target(
            select(IB, [col("min", IB.field(_m("ib_rate")))], variables=VARS, by=_BY),
            alias=_PER_PORT)], unit="short", minimum=0,
            description="Negotiated rate in Gbit/s; a drop is a link that trained down."),
        _rates("Throughput", data, fn="mean", scale=_BYTES_PER_WORD, unit="Bps",
               description="Bytes per second received and sent (data words x 4)."),
        risk_table("Riskiest ports and links", ("cluster", "node"),
                   scopes=[str(Scope.IB_PORT), str(Scope.NVLINK)], w=12, h=8,
                   description="InfiniBand ports and NVLink links by latest risk."),
    ]
    return dashboard(FABRIC, "gpuhealth: fabric",
                     "InfiniBand ports: bit-error rate, symbol errors, flaps, state, traffic.",
                     panels, variables=[cluster_var(), node_var(IB), _device_var()],
                     annotations=[alert_annotation(("cluster", "node"))])
