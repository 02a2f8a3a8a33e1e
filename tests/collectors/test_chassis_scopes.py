"""The node-wide scopes on the wire (issue 31's agreed schema): `psu` and `fan` points keyed
`n1:psu0` / `n1:fan3` by the BMC's id under the host name grammar, `node` points keyed by the
host, `sel` and `sxid` node events; through our line protocol and the Arrow codec and back."""

from __future__ import annotations

import numpy as np
import pytest

from collectors.arrow_batch import Decoder, encode
from collectors.catalog import CATALOG, Kind, Scope
from collectors.frames import Entity
from collectors.schema import SchemaMapper, batch_to_lines

T = 1_750_000_000
NS = T * 10**9
LINES = f"""psu,host=n1,psu=PSU1 psu_health=2i,psu_state=3i,psu_output_w=0 {NS}
psu,host=n1,psu=0 psu_health=0i,psu_state=1i,psu_input_v=230.5 {NS}
fan,host=n1,fan=3 fan_rpm=1200,fan_rpm_lower_critical=1800,fan_health=0i {NS}
node,host=n1 inlet_temp_c=25.5,psu_redundant=0i,edac_ue_total=3i,bmc_reachable=1i {NS}
sel,host=n1 code=2i {NS}
sxid,host=n1 code=12020i {NS}
"""


def test_keys_name_the_bmc_id_and_parse_back() -> None:
    for e, key in ((Entity.psu("n1", "PSU1"), "n1:psuPSU1"), (Entity.fan("n1", "3"), "n1:fan3"),
                   (Entity(Scope.NODE, "n1"), "n1")):
        assert e.key == key and Entity.parse(key) == e
    # An IB port named like a supply is still a port: three parts, not two.
    assert Entity.parse("n1:psu0:1").scope is Scope.IB_PORT


@pytest.mark.parametrize("bad", ["-1", "a b", "x,y", "", "a..b"])
def test_an_id_outside_the_name_grammar_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        Entity.psu("n1", bad)
    b = SchemaMapper().parse(f"fan,host=n1,fan={bad} fan_rpm=1 {NS}\n")
    assert not b.frames and len(b.rejected) == 1


def test_psu_fan_node_points_and_events_map_onto_the_catalog() -> None:
    b = SchemaMapper().parse(LINES)
    assert not b.rejected, b.rejected
    psu = b.frames[Scope.PSU]
    assert [psu.entities[r].key for r in psu.rows] == ["n1:psuPSU1", "n1:psu0"]
    state = CATALOG.column(Scope.PSU, "psu_state")
    assert psu.values[:, state].tolist() == [3.0, 1.0]
    node = b.frames[Scope.NODE]
    assert node.values[0, CATALOG.column(Scope.NODE, "inlet_temp_c")] == 25.5
    assert list(zip(b.events.keys, b.events.metrics, b.events.values, strict=True)) == [
        ("n1", "sel", 2.0), ("n1", "sxid", 12020.0)]


def test_out_of_range_and_wrong_types_are_refused_field_by_field() -> None:
    b = SchemaMapper().parse(f"psu,host=n1,psu=0 psu_state=1.5,psu_health=0i {NS}\n"
                             f"node,host=n1 psu_redundant=true {NS}\n")
    # A state is a whole number; a flag takes a boolean.
    assert [r.metric for r in b.rejected] == ["psu_state"]
    assert b.frames[Scope.NODE].values[0, CATALOG.column(Scope.NODE, "psu_redundant")] == 1.0
    for m in CATALOG:
        if m.scope in (Scope.PSU, Scope.FAN, Scope.NODE) and m.kind is not Kind.EVENT:
            assert m.valid is not None or m.kind is Kind.COUNTER, m.name


def test_our_line_protocol_and_arrow_round_trip() -> None:
    b = SchemaMapper().parse(LINES)
    again = SchemaMapper().parse("\n".join(batch_to_lines(b)) + "\n")
    got = Decoder().decode(encode(b, [])).batch
    for other in (again, got):
        assert set(other.frames) == set(b.frames)
        for scope, f in b.frames.items():
            g = other.frames[scope]
            assert [g.entities[i] for i in g.rows] == [f.entities[i] for i in f.rows]
            assert np.array_equal(g.values, f.values, equal_nan=True)
        assert other.events == b.events
