"""The console during a storm, in a real headless Chromium: twelve nodes, hard faults on four of
them within minutes (a FleetStorm that mutes their per-node pages inside gpuhealth), one node
gone silent, one GPU that fell off the bus after its fault, and one alert silenced through the
API. Alerts go to a real Alertmanager, a webhook receiver on loopback that answers 200 and a
pager whose address refuses connections (its deliveries fail).

The console must say what happened to each alert (the delivery column, one alert's page), name
the storm and its reason (never `*leet`), mark the silent node and GPU on the grid, and read one
risk per node on the fleet and node pages. Screenshots go to $GPUHEALTH_CONSOLE_SCREENSHOTS
(under storm/), or else to the test's temporary directory."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.api.app import create_app
from service.settings import Settings, StorageSettings
from tests.console.cdp import CHROMIUM, Browser
from tests.console.serve import (
    Service,
    browsing,
    free_port,
    open_page,
    screenshot_dir,
    serving,
    set_token,
    unexpected,
)
from tests.notify.alertmanager_server import ALERTMANAGER, AlertmanagerServer
from tests.notify.receivers.servers import HttpRecorder
from tests.support.fleet import STEP, T0, Fleet, ManualClock
from tests.support.partial_fleet import PartialCollector

# slow: the storm (a real Alertmanager and a fleet fed until alerts fire) takes about 20 s.
pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                 "(apt-get install chromium; .ci/run does)"),
              pytest.mark.slow]

NODES = [f"n{i:03d}" for i in range(1, 13)]
HARD = {"n001:gpu2": ("ecc_dbe_volatile", 1.0),  # double-bit ECC
        "n002:gpu5:nvlink1": ("nvlink_state", 0.0),  # a link down
        "n004:gpu0": ("ecc_dbe_volatile", 1.0),
        "n005:gpu3": ("ecc_dbe_volatile", 1.0)}  # ... and then it falls off the bus
WARM = ("n003:gpu1", "mem_temp", 97.0)  # HBM far hotter than its peers: silenced below
SILENT_NODE = "n012"
LOST_GPU = "n005:gpu3"


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlertmanagerServer]:
    if ALERTMANAGER is None:
        pytest.skip("prometheus-alertmanager is not installed "
                    "(apt-get install prometheus-alertmanager; .ci/run does)")
    srv = AlertmanagerServer(tmp_path_factory.mktemp("alertmanager"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def storm(alertmanager: AlertmanagerServer,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with HttpRecorder() as oncall:
        settings = Settings(
            storage=StorageSettings(data_dir=tmp_path_factory.mktemp("storm") / "data"),
            notify={  # type: ignore[arg-type]
                "external_url": "http://console.test",
                "receivers": [
                    {"name": "am", "type": "alertmanager",
                     "config": {"urls": [alertmanager.url], "refresh_interval_s": 30}},
                    {"name": "oncall", "type": "webhook", "config": {"url": oncall.url}},
                    {"name": "pager", "type": "webhook",
                     "config": {"url": f"http://127.0.0.1:{free_port()}/refused"}}],
                "route": {"receiver": "oncall", "group_by": ["node"], "group_wait_s": 0,
                          "group_interval_s": 10, "routes": [
                              {"receiver": "am", "continue": True},
                              {"receiver": "pager", "matchers": ["level>=3"], "continue": True},
                              {"receiver": "oncall"}]},
                "retry_initial_s": 0.1, "retry_max_s": 0.2, "send_timeout_s": 2})
        fleet = Fleet({n: 8 for n in NODES})
        clock = ManualClock(T0)
        collector = PartialCollector(fleet, clock)
        app = create_app(settings, clock=clock, schedule=False, collectors=[collector])
        with serving(app) as url:
            st = app.state.gpuhealth
            sender = st.pipeline.notification.sender
            auth = app.state.gpuhealth_auth
            tokens = {"operate": auth.tokens.create("console-operate", "operate",
                                                    time.time())[1]}

            def rounds(n: int) -> None:
                for _ in range(n):
                    st.scheduler.collect_once("fleet")
                    st.scheduler.score_once()
                    clock.now += STEP
                assert sender.wait(30.0)

            svc = Service(url, st, tokens)
            rounds(3)
            silence = st.pipeline.notification.silences.create(
                [f"entity={WARM[0]}"], "console-operate", "known hot HBM", clock.now,
                ends_at=clock.now + 86400)
            collector.gone.add(SILENT_NODE)
            fleet.set(*WARM)
            for key, (metric, value) in HARD.items():
                fleet.set(key, metric, value)
            rounds(6)
            collector.gone.add(LOST_GPU)
            rounds(30)
            svc.tokens["silence"] = silence.id
            yield svc


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return screenshot_dir(tmp_path_factory, "storm")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    yield from browsing(tmp_path_factory, width=1600, height=1000)


def _alerts(svc: Service) -> dict[str, dict[str, Any]]:
    """Firing alerts by (alertname, entity)."""
    return {f"{a['alertname']} {a['entity']}": a
            for a in svc.get("/v1/alerts?state=firing&limit=200")["alerts"]}


@pytest.mark.slow
def test_the_fixture_is_a_storm_with_muted_silenced_and_silent_alerts(storm: Service) -> None:
    found = _alerts(storm)
    assert "FleetStorm fleet" in found
    assert f"NodeNoData {SILENT_NODE}" in found
    for key in HARD:
        assert found[f"{'Nvlink' if 'nvlink' in key else 'Gpu'}FailureRisk {key}"]["level"] == 3
    muted = {fp: why for g in storm.get("/v1/groups")["groups"] for fp, why in g["muted"].items()}
    dbe = found["GpuFailureRisk n001:gpu2"]
    assert "FleetStorm" in muted[dbe["fingerprint"]]
    assert muted[found[f"GpuFailureRisk {WARM[0]}"]["fingerprint"]] == \
        f"silenced by {storm.tokens['silence']}"


def _expected_deliveries(svc: Service, alert: dict[str, Any],
                         upstream: bool = True) -> list[tuple[str, str]]:
    """(receiver, state) per delivery as the console must show them: the API's `deliveries`
    where it gives them, else what the notification groups say; then (`upstream`) what each
    Alertmanager said of it."""
    if "deliveries" in alert:
        out = [(d["receiver"], d["state"]) for d in alert["deliveries"]]
    else:
        out = []
        for g in svc.get("/v1/groups")["groups"]:
            fp = alert["fingerprint"]
            why = g["muted"].get(fp)
            state = None if why is None and fp not in g["alerts"] else (
                "routed" if why is None else
                "silenced" if why.startswith("silenced by ") else "muted")
            if state and (g["receiver"], state) not in out:
                out.append((g["receiver"], state))
    return out + [(m["receiver"], m["state"]) for m in alert["alertmanager"] if upstream]


SHOWN = """Object.fromEntries([...document.querySelectorAll('#alerts tr[data-alert]')].map(r => [
  r.dataset.alert, {
    deliveries: [...r.querySelectorAll('td.delivery li')].map(li =>
      [li.dataset.receiver || li.dataset.am, li.dataset.state, li.innerText]),
    entity: r.querySelector('td.entity').innerText,
    reason: r.querySelector('td.reason').innerText,
    badge: r.querySelector('.lvl').innerText,
    quiet: r.querySelector('.lvl').classList.contains('quiet'), text: r.innerText}]))"""


def test_the_alerts_page_says_what_happened_to_each_alert(
        storm: Service, browser: Browser, shots: Path) -> None:
    firing = _alerts(storm)
    open_page(browser, storm.url + "/#/alerts",
              f"document.querySelectorAll('#alerts td.delivery').length === {len(firing)}",
              "the alerts with their delivery column")
    shown = browser.eval(SHOWN)
    for a in firing.values():
        row = shown[str(a["id"])]
        assert [tuple(d[:2]) for d in row["deliveries"]] == _expected_deliveries(storm, a), a
        assert "*leet" not in row["text"] and row["reason"].strip(), a["alertname"]
    # Every hard fault under the storm was muted by it inside gpuhealth: the row says so, and
    # its badge does not read as a page that went out.
    for key in HARD:
        a = firing[f"{'Nvlink' if 'nvlink' in key else 'Gpu'}FailureRisk {key}"]
        row = shown[str(a["id"])]
        oncall = [d for d in row["deliveries"] if d[0] == "oncall"]
        assert oncall and oncall[0][1] == "muted" and "inhibited by FleetStorm" in oncall[0][2]
        assert row["quiet"] and "muted" in row["badge"], row["badge"]
    warm = shown[str(firing[f"GpuFailureRisk {WARM[0]}"]["id"])]
    assert {(d[1], d[2].split()[-1]) for d in warm["deliveries"] if d[0] == "oncall"} == {
        ("silenced", storm.tokens["silence"])}
    # The storm and the silent node are named and explained: by their signals where the API
    # gives some (the storm's hard faults listed under it), else by what they are.
    storm_alert = firing["FleetStorm fleet"]
    fleet_row = shown[str(storm_alert["id"])]
    assert fleet_row["entity"].startswith("fleet") and not fleet_row["quiet"]
    assert "FleetStorm" in fleet_row["entity"]
    if storm_alert["explanation"]:
        assert storm_alert["explanation"][0]["rule"] in fleet_row["reason"]
        for e in [e for e in storm_alert["explanation"] if e["hard"]][:8]:
            assert e["signal"] in fleet_row["reason"], e
    else:
        assert "of the fleet's nodes at level 2 or above" in fleet_row["reason"]
    nodata_alert = firing[f"NodeNoData {SILENT_NODE}"]
    nodata = shown[str(nodata_alert["id"])]
    assert nodata["entity"].startswith(SILENT_NODE)
    assert (nodata_alert["explanation"][0]["rule"] if nodata_alert["explanation"]
            else f"every GPU, link and port of {SILENT_NODE}") in nodata["reason"]
    am_active = [d for d in fleet_row["deliveries"] if d[0] == "am" and d[1] == "active"]
    assert am_active and "Alertmanager active" in am_active[0][2]  # read back from it
    browser.screenshot(shots / "alerts.png")
    assert unexpected(browser) == []


def test_each_delivery_state_reads_as_it_should(storm: Service, browser: Browser) -> None:
    """The contract's delivery rows and an Alertmanager read-back, drawn by the page's own
    functions: each state with its cause and time."""
    open_page(browser, storm.url + "/#/alerts", "document.querySelector('#alerts')",
              "the alerts page")
    alert: dict[str, Any] = {"id": 1, "state": "firing", "level": 3, "fingerprint": "f",
                             "deliveries": [
        {"receiver": "oncall", "state": "sent", "sent_at": "2026-01-02T03:04:05.000Z",
         "level_sent": 3},
        {"receiver": "pager", "state": "failed", "error": "connection refused",
         "failed_at": "2026-01-02T03:04:06.000Z"},
        {"receiver": "email", "state": "muted", "why": "inhibited by FleetStorm on *"},
        {"receiver": "slack", "state": "silenced", "silence_id": "s-42"},
        {"receiver": "sms", "state": "held", "why": "rate limited: 12 an hour"},
        {"receiver": "chat", "state": "pending"}],
        "alertmanager": [{"receiver": "am", "url": "http://am:9093", "state": "suppressed",
                          "silenced_by": ["x1"], "inhibited_by": ["y2"],
                          "checked_at": "2026-01-02T03:05:00.000Z"}]}
    rows = browser.eval(f"""(() => {{
        const t = document.createElement('table');
        t.innerHTML = '<tr>' + deliveryCell({json.dumps(alert)}) + '</tr>';
        return [t.querySelector('td').dataset.outcome, [...t.querySelectorAll('li')].map(li =>
          [li.dataset.receiver || li.dataset.am, li.dataset.state,
           li.textContent.replace(/\\s+/g, ' ').trim()])];
      }})()""")
    assert rows == ["sent", [
        ["oncall", "sent", "oncall sent at level 3 2026-01-02 03:04:05Z"],
        ["pager", "failed", "pager failed 2026-01-02 03:04:06Z: connection refused"],
        ["email", "muted", "email muted: inhibited by FleetStorm on *"],
        ["slack", "silenced", "slack silenced by s-42"],
        ["sms", "held", "sms held: rate limited: 12 an hour"],
        ["chat", "pending", "chat pending"],
        ["am", "suppressed", "Alertmanager suppressed (silenced by x1; inhibited by y2)"]]]
    # A level-3 alert that reached no one does not read "3 page"; one that paged does.
    muted = {**alert, "deliveries": alert["deliveries"][2:3], "alertmanager": []}
    assert browser.eval(f"quietNote({json.dumps(muted)})") == "not sent (muted)"
    hushed = {**muted, "deliveries": alert["deliveries"][3:4]}
    assert browser.eval(f"quietNote({json.dumps(hushed)})") == "not sent (silenced)"
    assert browser.eval(f"quietNote({json.dumps(alert)})") == ""
    active = {**muted, "alertmanager": [{**alert["alertmanager"][0], "state": "active"}]}
    assert browser.eval(f"quietNote({json.dumps(active)})") == "muted here"
    # A fleet alert's entity has no node to link: never a slice of "fleet" after "*".
    assert browser.eval("entityName({entity: 'fleet', node: '*'})").startswith(
        '<span class="fleetwide">fleet')
    assert unexpected(browser) == []


def test_one_alerts_page_has_its_deliveries_labels_and_ack(
        storm: Service, browser: Browser, shots: Path) -> None:
    firing = _alerts(storm)
    dbe = firing["GpuFailureRisk n001:gpu2"]
    open_page(browser, storm.url + f"/#/alert/{dbe['id']}",
              "document.querySelector('#alertbody h3')", "one alert's page")
    body = browser.eval("document.querySelector('#view').innerText")
    assert "dbe" in body and "hard fault" in body and "alertname=GpuFailureRisk" in body
    rows = browser.eval("[...document.querySelectorAll('table.deliveries tr[data-receiver]')]"
                        ".map(r => [r.dataset.receiver, r.dataset.state])")
    assert [tuple(r) for r in rows] == _expected_deliveries(storm, dbe, upstream=False)
    assert "inhibited by FleetStorm" in browser.eval(
        "document.querySelector('table.deliveries').innerText")
    browser.screenshot(shots / "alert.png")
    # The ack from this page, with the operate token.
    set_token(browser, storm.tokens["operate"])
    browser.eval("document.querySelector('#alertbuttons button[data-do=ack]').click()")
    browser.wait_for("document.querySelector('#alerthead').innerText.includes('acked by')",
                     "the ack on the alert's page")
    assert storm.get(f"/v1/alerts/{dbe['id']}")["acked_by"] == "console-operate"
    storm_alert = firing["FleetStorm fleet"]
    # Only the hash changes, so the last alert's page is still there until this one renders:
    # wait for this alert's head, not for any alert page.
    open_page(browser, storm.url + f"/#/alert/{storm_alert['id']}",
              "document.querySelector('#alertbody h3') && document.querySelector('#alerthead')"
              ".innerText.includes('FleetStorm')", "the storm's page")
    head = browser.eval("document.querySelector('#alerthead').innerText")
    assert "FleetStorm" in head and "fleet" in head and "*leet" not in head
    am = browser.eval("[...document.querySelectorAll('table.amtable tr[data-am]')]"
                      ".map(r => [r.dataset.am, r.dataset.state])")
    assert am == [["am", "active"]]
    browser.screenshot(shots / "alert-storm.png")
    assert unexpected(browser) == []


def test_the_grid_marks_the_silent_node_and_the_lost_gpu(
        storm: Service, browser: Browser, shots: Path) -> None:
    open_page(browser, storm.url + "/#/fleet",
              f"document.querySelectorAll('#grid .cell').length === {8 * len(NODES)}",
              "the fleet grid")
    nodes = {n["node"]: n for n in storm.get("/v1/fleet")["nodes"]}
    silent_rows = browser.eval("[...document.querySelectorAll('#grid .row[data-silent=\"1\"]')]"
                               ".map(r => [r.dataset.node, r.querySelector('.nodata').innerText])")
    since = browser.eval(f"fmtTime({nodes[SILENT_NODE]['silent_since']!r})")
    assert silent_rows == [[SILENT_NODE, f"no data since {since}"]]
    silent_cells = browser.eval("[...document.querySelectorAll('#grid .cell.silent')]"
                                ".map(c => c.dataset.entity)")
    assert sorted(silent_cells) == sorted([f"{SILENT_NODE}:gpu{i}" for i in range(8)]
                                          + [LOST_GPU])
    # Grey, not a level's green.
    colour = browser.eval(f"getComputedStyle(document.querySelector("
                          f"'.cell[data-entity=\"{SILENT_NODE}:gpu0\"]')).backgroundColor")
    healthy = browser.eval("getComputedStyle(document.querySelector("
                           "'.cell[data-entity=\"n006:gpu0\"]')).backgroundColor")
    assert colour != healthy
    assert "*leet" not in browser.eval("document.querySelector('#view').innerText")
    browser.screenshot(shots / "fleet.png")
    assert unexpected(browser) == []


def test_node_and_fleet_pages_read_the_same_risk(
        storm: Service, browser: Browser, shots: Path) -> None:
    open_page(browser, storm.url + "/#/fleet", "document.querySelector('#grid .cell')",
              "the fleet grid")
    on_grid = browser.eval("Object.fromEntries([...document.querySelectorAll('#grid .row')]"
                           ".map(r => [r.dataset.node, r.querySelector('.nrisk').innerText]))")
    api = {n["node"]: n["risk"] for n in storm.get("/v1/fleet")["nodes"]}
    for node in ("n001", "n003", "n005", SILENT_NODE, "n006"):
        # Its own head, read in one evaluation: a hash change keeps the last node's page until
        # this one renders, and a refresh may replace the head between two evaluations.
        risk = ("(() => { const h = document.querySelector('#nodehead');"
                " const r = h && h.querySelector('.noderisk');"
                " const t = h && h.parentElement.querySelector('h2');"
                f" return r && t && t.innerText === {'Node ' + node!r} ? r.innerText : ''; }})()")
        open_page(browser, storm.url + f"/#/node/{node}", risk, f"node {node}'s page")
        on_page = browser.wait_for(risk, f"node {node}'s risk")
        assert on_page == on_grid[node] == f"{api[node]:.2f}", node
        assert storm.get(f"/v1/nodes/{node}")["risk"] == api[node]
        if node == SILENT_NODE:
            assert "no data since" in browser.eval("document.querySelector('#nodehead')"
                                                   ".innerText")
        if node == "n005":
            browser.wait_for("!!document.querySelector('#nodealerts td.delivery')",
                             "the node's open alerts")
            browser.screenshot(shots / "node-n005.png")
    assert unexpected(browser) == []
