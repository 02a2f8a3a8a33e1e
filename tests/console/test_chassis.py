"""Power, fans and the node's own sensors in the console, in a real headless Chromium: the service
(embedded SQLite store) takes `gpu`, `psu`, `fan` and `node` line protocol for four nodes on its
/write endpoint, as agents and the BMC poller send it: n1's supply PSU0 has failed (Critical,
not delivering) and with it the node's power redundancy, n2's fan3 spins under its lower
critical speed, n3 is healthy, n4 has no BMC readings at all. One of n1's GPUs trained its PCIe
link at x8 of x16 and another reads "[Unknown Error]".

The node page must show the supplies and fans beside the GPUs with their state, health,
reading, level and alert text, the node's own sensors, and each GPU's PCIe link and
readability; a click on a supply or a fan must chart its risk, level and key metrics from
their history endpoints, and the node's own sensors' history must chart beside its risk (a
service keeping no history says there is nothing stored); the fleet grid must show the supply
and the fan alerts on their nodes' rows at the level the API gives. Screenshots go to
$GPUHEALTH_CONSOLE_SCREENSHOTS (under chassis/); docs/screenshots/node-power.png is
node-n1-psu.png."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.api.app import create_app
from service.api.state import Running
from service.settings import Settings, StorageSettings
from tests.console.cdp import CHROMIUM, Browser
from tests.console.serve import Service, browsing, open_page, screenshot_dir, serving, unexpected
from tests.support.chassis_fleet import chassis_lines
from tests.support.fleet import STEP, T0, ManualClock

pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                 "(apt-get install chromium; .ci/run does)"),
              pytest.mark.slow]

NODES = ("n1", "n2", "n3", "n4")
CHASSIS_NODES = ("n1", "n2", "n3")
# The alert policy's level-2 for-duration (120 s), with rounds to spare.
ROUNDS = 30


def _ns(t: float) -> int:
    return round(t * 1e9)


def gpu_lines(node: str, t: float) -> list[str]:
    out = []
    for g in range(4):
        width = 8 if (node, g) == ("n1", 1) else 16
        unreadable = 1 if (node, g) == ("n1", 3) else 0
        out.append(f"gpu,host={node},gpu={g} gpu_temp=55,ecc_dbe_volatile=0i,"
                   f"pcie_link_width={width}i,pcie_link_width_max=16i,pcie_link_gen=5i,"
                   f"pcie_link_gen_max=5i,gpu_unreadable={unreadable}i {_ns(t)}")
        if node == "n1" and g < 3:  # gpu3 cannot be read: no identity either
            out.append(f'gpu_info,host={node},gpu={g} uuid="GPU-513536b6-7d19-9063-b049-'
                       f'1e69664bb29{g}",serial="165052200382{g}",model="NVIDIA H100 80GB '
                       f'HBM3",pci_bus_id="0000:1{g}:00.0",driver="550.90.07" {_ns(t)}')
    return out


def _serve(data: Path, **storage: Any) -> Iterator[Service]:
    clock = ManualClock(T0)
    settings = Settings(storage=StorageSettings(data_dir=data, **storage))
    app = create_app(settings, clock=clock, schedule=False)
    with serving(app) as url:
        st: Running = app.state.gpuhealth
        for _ in range(ROUNDS):
            t = clock.now
            lines = [x for n in NODES for x in gpu_lines(n, t)]
            lines += [x for n in CHASSIS_NODES for x in chassis_lines(n, t)]
            r = httpx.post(url + "/write", content="\n".join(lines) + "\n", timeout=10)
            assert r.status_code == 204, r.text
            st.scheduler.score_once()
            clock.now += STEP
        yield Service(url, st, {})


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    yield from _serve(tmp_path_factory.mktemp("chassis") / "data")


@pytest.fixture(scope="module")
def no_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The same fleet on a service that keeps neither sample nor risk history."""
    yield from _serve(tmp_path_factory.mktemp("chassis-nohistory") / "data",
                      write_samples=False, risk_history_days=0)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    yield from browsing(tmp_path_factory)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return screenshot_dir(tmp_path_factory, "chassis")


def _rows(b: Browser, table: str) -> dict[str, dict[str, str]]:
    """Each row of a table on the page by its entity: its level and the text of its cells."""
    return b.eval(f"Object.fromEntries([...document.querySelectorAll('#{table} tr[data-entity]')]"
                  ".map(r => [r.dataset.entity, {level: r.dataset.level, text: r.innerText}]))")


def test_a_failed_supply_shows_beside_the_gpus_with_its_level_and_alert(
        service: Service, browser: Browser, shots: Path) -> None:
    api = service.get("/v1/nodes/n1")
    open_page(browser, service.url + "/#/node/n1",
              "document.querySelectorAll('#psus tr[data-entity^=\"n1:\"]').length === 3",
              "n1's power supplies")
    psus = _rows(browser, "psus")
    assert {k: int(v["level"]) for k, v in psus.items()} == {
        p["entity"]: p["level"] for p in api["psus"]}
    failed = psus["n1:psuPSU0"]
    assert int(failed["level"]) == 2 and "2 email" in failed["text"]
    assert "not delivering" in failed["text"] and "Critical" in failed["text"]
    assert "psu_failed" in failed["text"]  # the alert's text: its rule and signal
    assert "0 W out" in failed["text"] and "230.5 V in" in failed["text"]
    spare = psus["n1:psuPSU2"]
    assert int(spare["level"]) == 0 and "standby by design" in spare["text"]
    assert "1200 W out" in psus["n1:psuPSU1"]["text"] and "OK" in psus["n1:psuPSU1"]["text"]
    # The node's own sensors: redundancy lost is its own alert (NodeAtRisk), at its level.
    own = browser.eval("(() => { const t = document.querySelector('#ownsensors');"
                       " const r = t.querySelector('tr[data-entity]');"
                       " return [r.dataset.entity, Number(r.dataset.level), t.innerText]; })()")
    assert own[:2] == ["n1", api["own"]["level"]] and own[1] == 2
    assert "psu_redundancy_lost" in own[2] and "lost" in own[2]
    assert "24.5 °C" in own[2] and "38.0 °C" in own[2] and "4 corrected" in own[2]
    assert "reachable" in own[2]
    # Beside the GPUs, not under them: the two columns share a row on a laptop screen.
    beside = browser.eval("(() => { const a = document.querySelector('#entities')"
                          ".getBoundingClientRect(), b = document.querySelector('#chassis')"
                          ".getBoundingClientRect(); return [a.top === b.top, b.left > a.left];"
                          " })()")
    assert beside == [True, True]
    browser.screenshot(shots / "node-n1.png")
    assert unexpected(browser) == []


def test_the_gpus_pcie_link_and_readability_show(service: Service, browser: Browser) -> None:
    open_page(browser, service.url + "/#/node/n1",
              "document.querySelectorAll('#gpus tr[data-entity^=\"n1:\"]').length === 4",
              "n1's GPUs")
    cells = browser.eval(
        "Object.fromEntries([...document.querySelectorAll('#gpus tr[data-entity]')].map(r =>"
        " [r.dataset.entity, [r.querySelector('td.pcie').innerText.replace(/\\s+/g, ' ').trim(),"
        " r.querySelector('td.pcie').classList.contains('bad'),"
        " r.querySelector('td.readable').innerText]]))")
    assert cells["n1:gpu1"] == ["x8 / x16 · gen 5 / 5", True, "readable"]
    assert cells["n1:gpu0"] == ["x16 / x16 · gen 5 / 5", False, "readable"]
    assert cells["n1:gpu3"][2] == "Unknown Error"
    # Each GPU's board under its name: its serial, the model, UUID, bus id and driver on hover.
    boards = browser.eval(
        "Object.fromEntries([...document.querySelectorAll('#gpus tr[data-entity]')].map(r =>"
        " { const c = r.querySelector('.board'); return [r.dataset.entity,"
        " c ? [c.innerText.trim(), c.title] : null]; }))")
    assert boards["n1:gpu1"][0] == "serial 1650522003821"
    assert boards["n1:gpu1"][1].split("\n") == [
        "NVIDIA H100 80GB HBM3", "UUID GPU-513536b6-7d19-9063-b049-1e69664bb291",
        "bus 00000000:11:00.0", "driver 550.90.07"]
    assert boards["n1:gpu3"] is None  # no source said its identity
    assert unexpected(browser) == []


def test_a_slow_fan_shows_with_its_speed_against_its_threshold(
        service: Service, browser: Browser, shots: Path) -> None:
    api = {f["entity"]: f["level"] for f in service.get("/v1/nodes/n2")["fans"]}
    open_page(browser, service.url + "/#/node/n2",
              "document.querySelectorAll('#fans tr[data-entity^=\"n2:\"]').length === 4",
              "n2's fans")
    fans = _rows(browser, "fans")
    assert {k: int(v["level"]) for k, v in fans.items()} == api
    slow = fans["n2:fan3"]
    assert int(slow["level"]) == 2 and "fan_failed" in slow["text"]
    assert "1000 rpm" in slow["text"] and "critical under 1800" in slow["text"]
    assert browser.eval("document.querySelector('#fans tr[data-entity=\"n2:fan3\"] td.rpm')"
                        ".classList.contains('bad')")
    assert int(fans["n2:fan0"]["level"]) == 0 and "9000 rpm" in fans["n2:fan0"]["text"]
    browser.screenshot(shots / "node-n2.png")
    assert unexpected(browser) == []


def test_a_node_without_bmc_readings_says_so(service: Service, browser: Browser) -> None:
    open_page(browser, service.url + "/#/node/n4",
              "document.querySelector('#gpus tr[data-entity=\"n4:gpu0\"]')"
              " && document.querySelector('#chassis p')", "n4's power and cooling")
    assert "no BMC or host sensor readings" in browser.eval(
        "document.querySelector('#chassis').innerText")
    assert unexpected(browser) == []


def test_the_fleet_grid_shows_supply_and_fan_alerts_on_their_nodes(
        service: Service, browser: Browser, shots: Path) -> None:
    fleet = {n["node"]: n["chassis"] for n in service.get("/v1/fleet")["nodes"]}
    assert fleet["n4"] is None and fleet["n3"]["level"] == 0
    assert (fleet["n1"]["level"], fleet["n2"]["level"]) == (2, 2)
    assert fleet["n2"]["worst"] == "n2:fan3" and fleet["n1"]["psus"] == 3
    open_page(browser, service.url + "/#/fleet",
              "document.querySelectorAll('#grid .chassis').length === 3", "the fleet grid")
    shown = browser.eval("Object.fromEntries([...document.querySelectorAll('#grid .chassis')]"
                         ".map(c => [c.dataset.node, [Number(c.dataset.level), c.dataset.worst,"
                         " c.title]]))")
    assert {n: v[0] for n, v in shown.items()} == {
        n: c["level"] for n, c in fleet.items() if c is not None}
    assert shown["n2"][1] == "n2:fan3" and "fan_failed" in shown["n2"][2]
    assert shown["n1"][1] == fleet["n1"]["worst"] and shown["n3"][1] == ""
    # The GPU cells are unchanged by it: still one per GPU.
    assert browser.eval("document.querySelectorAll('#grid .cell').length") == 16
    assert "2 nodes with power, fan or node-sensor alerts" in " ".join(browser.eval(
        "document.querySelector('#summary').innerText").split())
    browser.screenshot(shots / "fleet.png")
    assert unexpected(browser) == []


# Each chart on a charts pane by metric: its caption and its lines' point counts.
_CHARTS = ("(sel => Object.fromEntries([...document.querySelectorAll(sel + ' figure.chart')]"
           ".map(f => [f.dataset.metric, {caption: f.querySelector('figcaption').innerText"
           ".replace(/\\s+/g, ' ').trim(), lines: [...f.querySelectorAll('polyline')].map(p =>"
           " [p.getAttribute('class') || 'reading',"
           " p.getAttribute('points').split(' ').length])}])))")


def _click(b: Browser, table: str, entity: str) -> None:
    # The page redraws its tables on each refresh: wait for the row, then click it in the same
    # turn (a loaded machine once caught the table between two draws).
    row = f"document.querySelector('#{table} tr[data-entity=\"{entity}\"]')"
    b.wait_for(f"!!{row}", f"{entity}'s row")
    b.eval(f"{row}?.click()")
    b.wait_for(f"document.querySelector('#{table} tr.picked')?.dataset.entity === '{entity}'"
               f" && [...document.querySelectorAll('#gpucharts h3')].map(h => h.innerText)"
               f".join('|').includes('{entity} key metrics')", f"{entity}'s charts")


def _points(service: Service, path: str) -> dict[str, int]:
    return {s["metric"]: len(s["times"]) for s in service.get(path)["series"]}


def test_clicking_a_supply_charts_its_risk_and_key_metrics(
        service: Service, browser: Browser, shots: Path) -> None:
    open_page(browser, service.url + "/#/node/n1",
              "document.querySelectorAll('#psus tr.pick').length === 3", "n1's power supplies")
    _click(browser, "psus", "n1:psuPSU0")
    shown = browser.eval(_CHARTS + "('#gpucharts')")
    risk = _points(service, "/v1/psus/n1:psuPSU0/risk")
    metrics = _points(service, "/v1/psus/n1:psuPSU0/metrics")
    # Risk and level, then output, temperature, health and state: the input voltage is in the
    # table and not charted. Every line has the points the API gives.
    assert set(shown) == {"risk", "level", "psu_output_w", "psu_temp_c", "psu_health",
                          "psu_state"}
    assert all(risk[m] >= 2 for m in ("risk", "level"))
    assert {m: c["lines"] for m, c in shown.items()} == {
        m: [["reading", {**risk, **metrics}[m]]] for m in shown}
    # A state reads in words, as in the table beside it.
    assert shown["psu_state"]["caption"].startswith("psu_state enum not delivering")
    assert shown["psu_health"]["caption"].startswith("psu_health enum Critical")
    assert shown["psu_output_w"]["caption"].startswith("psu_output_w W 0.00")
    # The GPU that was picked before is no longer; the node's charts stay.
    assert browser.eval("document.querySelectorAll('tr.picked').length") == 1
    assert browser.eval("document.querySelectorAll('#nodecharts figure.chart').length") >= 1
    browser.screenshot(shots / "node-n1-psu.png")
    # A healthy supply has no risk rows (kept only while above zero): the pane says so once.
    _click(browser, "psus", "n1:psuPSU1")
    text = browser.eval("document.querySelector('#gpucharts').innerText")
    assert "nothing stored in this range: a supply's risk is kept only while above zero" in text
    assert browser.eval(_CHARTS + "('#gpucharts')")["psu_output_w"]["caption"].startswith(
        "psu_output_w W 1200")
    assert unexpected(browser) == []


def test_clicking_a_fan_charts_its_speed_against_its_lower_critical_speed(
        service: Service, browser: Browser, shots: Path) -> None:
    open_page(browser, service.url + "/#/node/n2",
              "document.querySelectorAll('#fans tr.pick').length === 4", "n2's fans")
    _click(browser, "fans", "n2:fan3")
    shown = browser.eval(_CHARTS + "('#gpucharts')")
    metrics = _points(service, "/v1/fans/n2:fan3/metrics")
    risk = _points(service, "/v1/fans/n2:fan3/risk")
    # It reports RPM, not percent: no empty percent chart; its threshold is drawn on its speed.
    assert set(shown) == {"risk", "level", "fan_rpm", "fan_health"}
    assert shown["fan_rpm"]["lines"] == [["reading", metrics["fan_rpm"]],
                                         ["ref", metrics["fan_rpm_lower_critical"]]]
    assert metrics["fan_rpm"] >= 2 and risk["risk"] >= 2
    assert shown["risk"]["lines"] == [["reading", risk["risk"]]]
    assert "1000" in shown["fan_rpm"]["caption"]
    assert "critical under 1800" in shown["fan_rpm"]["caption"]
    assert shown["fan_health"]["caption"].startswith("fan_health enum OK")
    browser.screenshot(shots / "node-n2-fan.png")
    assert unexpected(browser) == []


def test_the_nodes_own_sensors_chart_where_it_has_them(service: Service,
                                                       browser: Browser) -> None:
    open_page(browser, service.url + "/#/node/n1",
              "document.querySelectorAll('#nodecharts .charts').length === 2", "n1's own charts")
    shown = browser.eval(_CHARTS + "('#nodecharts')")
    sensors = _points(service, "/v1/nodes/n1/metrics?metric=inlet_temp_c&metric=exhaust_temp_c"
                      "&metric=psu_redundant&metric=fan_redundant")
    assert all(sensors[m] >= 2 for m in sensors)
    assert {m: c["lines"] for m, c in shown.items() if m != "risk"} == {
        m: [["reading", n]] for m, n in sensors.items()}
    assert shown["inlet_temp_c"]["caption"].startswith("inlet_temp_c degC 24.5")
    assert shown["psu_redundant"]["caption"].startswith("psu_redundant bool lost")
    assert shown["fan_redundant"]["caption"].startswith("fan_redundant bool redundant")
    # A node without BMC readings asks for no sensor history: only its risk charts.
    browser.requests.clear()
    open_page(browser, service.url + "/#/node/n4",
              "document.querySelectorAll('#nodecharts .charts').length === 1", "n4's charts")
    browser.pump()
    assert not [u for u in browser.requests if "/v1/nodes/n4/metrics" in u]
    assert unexpected(browser) == []


def test_a_store_without_history_says_so_for_a_supply_a_fan_and_the_node(
        no_history: Service, browser: Browser) -> None:
    open_page(browser, no_history.url + "/#/node/n2",
              "document.querySelectorAll('#fans tr.pick').length === 4", "n2's fans")
    _click(browser, "fans", "n2:fan3")
    browser.wait_for("document.querySelectorAll('#nodecharts .charts').length === 2",
                     "n2's own charts")
    assert browser.eval("document.querySelectorAll('#view polyline').length") == 0
    # The node's risk and own sensors, the fan's risk and key metrics: each says it once.
    panes = browser.eval("[...document.querySelectorAll('#view .charts')].map(c =>"
                         " c.querySelector('p.nothing')?.innerText ?? c.innerText)")
    assert len(panes) == 4
    assert all(p.startswith("nothing stored in this range") for p in panes), panes
    # The readings still show in the tables: only their history is missing.
    assert "1000 rpm" in browser.eval("document.querySelector('#fans').innerText")
    _click(browser, "psus", "n2:psuPSU0")
    assert "nothing stored in this range" in browser.eval(
        "document.querySelector('#gpucharts').innerText")
    assert unexpected(browser) == []
