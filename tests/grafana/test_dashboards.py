"""The generated dashboards: committed JSON equals the generator's output, the JSON is the
shape Grafana 10+ provisions, and every query follows the conventions (time filter, interval,
fill(null), variable filters) and names only what the storage contract has."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from service.grafana.__main__ import main as generate
from service.grafana.check import check_query
from service.grafana.contract import MEASUREMENTS
from service.grafana.inventory import all_queries, dashboard_queries
from service.grafana.panels import DATASOURCE_UID
from service.grafana.registry import DASHBOARD_DIR, build_all, render

DASHBOARDS = build_all()
QUERIES = all_queries()


def _ids(items: list[Any]) -> list[str]:
    return [f"{q.dashboard}: {q.title}" for q in items]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_committed_json_is_what_the_generator_writes(name: str) -> None:
    path = DASHBOARD_DIR / name
    assert path.is_file(), f"{path} is missing: run `make dashboards`"
    assert path.read_text(encoding="utf-8") == render(DASHBOARDS[name]), (
        f"{path} is stale: run `make dashboards` (python -m service.grafana)")


def test_no_stray_dashboard_files() -> None:
    on_disk = {p.name for p in DASHBOARD_DIR.glob("*.json")}
    assert on_disk == set(DASHBOARDS)


def test_check_mode_flags_a_stale_file(tmp_path: Path) -> None:
    assert generate(["--check", "--output", str(tmp_path)]) == 1  # missing
    assert generate(["--output", str(tmp_path)]) == 0
    assert generate(["--check", "--output", str(tmp_path)]) == 0
    victim = tmp_path / next(iter(DASHBOARDS))
    victim.write_text(victim.read_text(encoding="utf-8").replace("gpu", "gpx"), encoding="utf-8")
    assert generate(["--check", "--output", str(tmp_path)]) == 1


def test_generation_is_deterministic() -> None:
    assert {n: render(d) for n, d in build_all().items()} == {
        n: render(d) for n, d in DASHBOARDS.items()}


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_shape(name: str) -> None:
    d = json.loads(render(DASHBOARDS[name]))
    assert d["uid"] == name.removesuffix(".json") and len(d["uid"]) <= 40
    assert d["schemaVersion"] >= 36 and d["editable"] is False and "id" not in d
    panels = d["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == DATASOURCE_UID, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(set(refs)) == len(refs), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == DATASOURCE_UID and t["rawQuery"] is True
    # Panels do not overlap.
    cells = set()
    for p in panels:
        g = p["gridPos"]
        cover = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                 for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & cover, f"{p['title']} overlaps another panel"
        cells |= cover
    names = [v["name"] for v in d["templating"]["list"]]
    assert names[0] == "cluster" and len(set(names)) == len(names)
    for v in d["templating"]["list"]:
        assert v["datasource"]["uid"] == DATASOURCE_UID
        # A variable is filtered only by the ones above it.
        used = set(re.findall(r"\$(\w+)", v["query"]))
        assert used <= set(names[: names.index(v["name"])]), v["name"]


def test_titles_are_unique_within_a_dashboard() -> None:
    for d in DASHBOARDS.values():
        titles = [q.title for q in dashboard_queries(d)]
        assert len(set(titles)) == len(titles), d["uid"]


def test_lists_panels_variables_and_annotations() -> None:
    kinds = {q.kind for q in QUERIES}
    assert kinds == {"panel", "variable", "annotation"}
    assert {q.dashboard for q in QUERIES} == {d["uid"] for d in DASHBOARDS.values()}


def test_the_dashboards_cover_what_operators_need() -> None:
    text = {d["uid"]: render(d) for d in DASHBOARDS.values()}
    for must in ('"gpu_temp"', '"gpu_slowdown_temp"', '"gpu_shutdown_temp"', '"mem_temp"',
                 '"mem_max_temp"', '"gpu_rate"', '"nvlink_rate"', '"retired_pages_dbe"',
                 '"remapped_rows_uncorrectable"', '"power_draw"', '"throttle_thermal"',
                 '"top"'):
        assert must.replace('"', '\\"') in text["gpuhealth-node"], must
    for must in ('"ib_ber"', '"ib_port_rate"', '"ib_symbol_error"', '"ib_link_flaps"',
                 '"ib_state"'):
        assert must.replace('"', '\\"') in text["gpuhealth-fabric"], must
    for uid in ("gpuhealth-fleet", "gpuhealth-alerts"):
        assert '\\"alert\\"' in text[uid]
    anns = {a["name"] for a in DASHBOARDS["gpuhealth-alerts.json"]["annotations"]["list"]}
    assert {"Alert level changes", "Notifications and remediation"} <= anns


def test_the_node_dashboard_shows_the_whole_server() -> None:
    """Issue 31: supplies, fans, air, redundancy, host errors, the BMC event log and each GPU's
    PCIe link and readability, beside the GPUs on the node dashboard."""
    text = " ".join(q.query for q in dashboard_queries(DASHBOARDS["gpuhealth-node.json"]))
    assert {"psu", "fan", "node", "node_rate", "sel", "gpu", "gpu_rate"} <= set(
        re.findall(r'FROM "(\w+)"', text))
    for field in ("psu_health", "psu_state", "psu_output_w", "psu_input_v", "fan_rpm",
                  "fan_rpm_lower_critical", "fan_health", "inlet_temp_c", "exhaust_temp_c",
                  "psu_redundant", "fan_redundant", "bmc_reachable", "edac_ce_total",
                  "edac_ue_total", "mce_total", "pcie_link_width", "pcie_link_width_max",
                  "pcie_link_gen", "pcie_link_gen_max", "gpu_unreadable",
                  "pcie_aer_correctable_total"):
        assert f'"{field}"' in text, field


@pytest.mark.parametrize("query", QUERIES, ids=_ids(QUERIES))
def test_every_query_names_only_what_the_contract_has(query: Any) -> None:
    assert check_query(query.query) == []


@pytest.mark.parametrize("query", [q for q in QUERIES if q.kind != "variable"],
                         ids=_ids([q for q in QUERIES if q.kind != "variable"]))
def test_query_conventions(query: Any) -> None:
    text = query.query
    selects = re.findall(r"SELECT .*? FROM \"(\w+)\"", text)
    assert "$timeFilter" in text
    if "GROUP BY time(" in text:
        assert "GROUP BY time($__interval)" in text and "fill(null)" in text
    # Every innermost SELECT over a measurement with the tag filters on the cluster variable.
    for m in selects:
        if "cluster" in MEASUREMENTS[m].tags:
            assert '"cluster" =~ /^$cluster$/' in text
