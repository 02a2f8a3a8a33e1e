"""The storage contract in code (service/grafana/contract.py) says what docs/influxdb.md says:
the same measurements, tags and fields, and sample fields straight from the catalog."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collectors.catalog import CATALOG, Kind, Scope
from service.grafana.contract import (
    ALERT,
    ALERT_STATES,
    MEASUREMENTS,
    RATES,
    RISK,
    RISK_SCOPES,
    SAMPLES,
    Measurement,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "influxdb.md"


def _doc_rows() -> dict[str, tuple[str, str]]:
    """Measurement name -> (tags cell, fields cell) from the doc's "What is written" table."""
    rows: dict[str, tuple[str, str]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`(\w+)`", cells[0]):
            rows[name] = (cells[1], cells[2])
    return rows


def _words(cell: str) -> set[str]:
    return set(re.findall(r"\w+", cell))


def _backticked_outside_parens(cell: str) -> set[str]:
    return set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", cell)))


def test_every_documented_measurement_is_in_the_contract_and_back() -> None:
    assert set(_doc_rows()) == set(MEASUREMENTS)


@pytest.mark.parametrize("name", sorted(MEASUREMENTS))
def test_tags_match_the_doc(name: str) -> None:
    tags_cell, _ = _doc_rows()[name]
    tags = MEASUREMENTS[name].tags
    if "as the scope" in tags_cell:  # the *_rate rows
        tags_cell = _doc_rows()[name.removesuffix("_rate")][0]
    assert tags <= _words(tags_cell), f"{name}: {sorted(tags - _words(tags_cell))}"


@pytest.mark.parametrize("name", ["risk", "alert", "action", "collector", "xid", "label"])
def test_service_fields_match_the_doc(name: str) -> None:
    _, fields_cell = _doc_rows()[name]
    assert MEASUREMENTS[name].fields == _backticked_outside_parens(fields_cell)


def test_alert_states_and_risk_scopes_match_the_doc() -> None:
    rows = _doc_rows()
    assert set(ALERT_STATES) == set(re.findall(r"`(\w+)`", rows["alert"][1])) - ALERT.fields
    assert set(RISK_SCOPES) <= set(re.findall(r"`(\w+)`", rows["risk"][0]))
    assert {"risk", "level", "top"} == RISK.fields


@pytest.mark.parametrize("scope", list(Scope))
def test_sample_and_rate_fields_come_from_the_catalog(scope: Scope) -> None:
    metrics = [m for m in CATALOG if m.scope is scope and m.kind is not Kind.EVENT]
    assert SAMPLES[scope].fields == {m.name for m in metrics}
    rates = {m.name for m in metrics if m.kind is Kind.COUNTER}
    assert (RATES[scope].fields if scope in RATES else set()) == rates
    assert "ib_ber" in SAMPLES[Scope.IB_PORT].fields  # derived, but written by the sink


def test_the_whole_server_is_in_the_contract() -> None:
    """Issue 31's wire schema: supplies, fans and the node's own sensors are measurements of
    their own with their id tags; a GPU's PCIe link and readability are `gpu` fields."""
    assert SAMPLES[Scope.PSU].tags >= {"host", "psu"} and SAMPLES[Scope.FAN].tags >= {"fan"}
    assert {"psu_health", "psu_state", "psu_input_v", "psu_output_w",
            "psu_temp_c"} <= SAMPLES[Scope.PSU].fields
    assert {"fan_rpm", "fan_pct", "fan_health",
            "fan_rpm_lower_critical"} <= SAMPLES[Scope.FAN].fields
    assert {"inlet_temp_c", "exhaust_temp_c", "psu_redundant", "fan_redundant",
            "bmc_reachable", "edac_ce_total", "edac_ue_total",
            "mce_total"} <= SAMPLES[Scope.NODE].fields
    assert {"edac_ce_total", "edac_ue_total", "mce_total"} == RATES[Scope.NODE].fields
    assert {"pcie_link_width", "pcie_link_width_max", "pcie_link_gen", "pcie_link_gen_max",
            "gpu_unreadable"} <= SAMPLES[Scope.GPU].fields
    assert {"sel", "sxid"} <= set(MEASUREMENTS) and {"psu", "fan"} <= RISK.tags
    assert Scope.PSU not in RATES and Scope.FAN not in RATES  # every reading is a level


def test_a_wrong_name_fails_loudly() -> None:
    m = Measurement("m", frozenset({"host"}), frozenset({"x"}))
    assert m.field("x") == "x" and m.tag("host") == "host"
    with pytest.raises(KeyError, match="not a field"):
        m.field("y")
    with pytest.raises(KeyError, match="not a tag"):
        m.tag("x")
