"""The web console in a real headless Chromium: the service runs on a loopback port with the
embedded SQLite store, fed a short run of a simulated fleet with injected failures; the
browser loads each page, and the test clicks its buttons and checks the result through the
REST API. Screenshots go to $GPUHEALTH_CONSOLE_SCREENSHOTS (kept for a person to look at), or
else to the test's temporary directory."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from service.api.app import create_app
from service.api.state import Running
from service.history.influx.sink import InfluxSink
from service.settings import Settings, StorageSettings
from tests.console.cdp import CHROMIUM, Browser, wait
from tests.console.serve import Service, serving
from tests.console.serve import open_page as _open
from tests.console.serve import set_token as _set_token
from tests.console.serve import unexpected as _unexpected
from tests.influx.server import INFLUXD, InfluxServer
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                "(apt-get install chromium; .ci/run does)")

# The injected failures: entity -> the least level the grid must show for its GPU cell.
INJECTED = {"n001:gpu2": ("ecc_dbe_volatile", 1.0, 3),  # double-bit ECC: a hard fault
            "n002:gpu5:nvlink1": ("nvlink_state", 0.0, 3),  # a link down, folded into gpu5
            "n003:gpu1": ("mem_temp", 97.0, 1)}  # HBM far hotter than its peers
CELL = {"n001:gpu2": "n001:gpu2", "n002:gpu5:nvlink1": "n002:gpu5", "n003:gpu1": "n003:gpu1"}


@pytest.fixture(scope="module", params=["sqlite", "influxdb"])
def store(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[StorageSettings]:
    """The embedded default, then a real InfluxDB (Debian's influxd) beside it: the console
    reads its charts from whichever the service's history comes from."""
    data = tmp_path_factory.mktemp("console") / "data"
    if request.param == "sqlite":
        yield StorageSettings(data_dir=data)
        return
    if INFLUXD is None:
        pytest.skip("influxd is not installed (apt-get install influxdb; .ci/run does)")
    srv = InfluxServer(tmp_path_factory.mktemp("influxd"))
    srv.start()
    try:
        yield StorageSettings.model_validate({
            "data_dir": data, "influxdb": {"url": srv.url, "database": "console",
                                           "cluster": "c1", "raw_retention": "INF"}})
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def service(store: StorageSettings) -> Iterator[Service]:
    settings = Settings(
        storage=store,
        notify={"route": {"receiver": "record", "group_wait_s": 0}},  # type: ignore[arg-type]
        remediation={"mode": "approve", "hook": "command",  # type: ignore[arg-type]
                     "hook_config": {"drain": ["true"], "release": ["true"]},
                     "breaker_max_fraction": 1.0})
    fleet = Fleet({f"n{i:03d}": 8 for i in range(1, 13)})
    clock = ManualClock(T0)
    app = create_app(settings, clock=clock, schedule=False,
                     collectors=[FleetCollector(fleet, clock)])
    with serving(app) as url:
        yield from _fed(app, fleet, clock, url, bool(store.influxdb.url))


def _fed(app: FastAPI, fleet: Fleet, clock: ManualClock, url: str,
         influx: bool) -> Iterator[Service]:
    st: Running = app.state.gpuhealth

    def rounds(n: int) -> None:
        for _ in range(n):
            st.scheduler.collect_once("fleet")
            st.scheduler.score_once()
            clock.now += STEP

    rounds(3)
    for key, (metric, value, _) in INJECTED.items():
        fleet.set(key, metric, value)
    rounds(30)
    for sink in st.pipeline.sinks:  # InfluxDB's writes go through a spool: on disk, then sent
        if isinstance(sink, InfluxSink):
            assert sink.flush(30)
    auth = app.state.gpuhealth_auth
    tokens = {scope: auth.tokens.create(f"console-{scope}", scope, time.time())[1]
              for scope in ("operate", "admin")}
    yield Service(url, st, tokens, influx)


@pytest.fixture(scope="module")
def shots(service: Service, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory per store: sqlite/ and influxdb/."""
    kept = os.environ.get("GPUHEALTH_CONSOLE_SCREENSHOTS")
    where = Path(kept) if kept else tmp_path_factory.mktemp("console-screenshots")
    where /= "influxdb" if service.influx else "sqlite"
    where.mkdir(parents=True, exist_ok=True)
    return where


@pytest.fixture(scope="module")
def browser(service: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One per store: a page still polling the previous store's stopped service would log
    refused connections into the next store's tests."""
    b = Browser(tmp_path_factory.mktemp("chromium"))
    try:
        yield b
    finally:
        b.close()


@pytest.mark.slow
def test_fleet_grid_shows_the_injected_failures_at_their_level(
        service: Service, browser: Browser, shots: Path) -> None:
    _open(browser, service.url + "/#/fleet",
          "document.querySelectorAll('#grid .cell').length === 96", "the fleet grid")
    api = {g["gpu"]: max(g["level"], g["link_level"])
           for n in service.get("/v1/fleet")["nodes"] for g in n["gpus"]}
    shown = browser.eval("Object.fromEntries([...document.querySelectorAll('#grid .cell')]"
                         ".map(c => [c.dataset.entity, Number(c.dataset.level)]))")
    assert shown == api  # every cell at the level the API gives
    for key, (_, _, least) in INJECTED.items():
        assert shown[CELL[key]] >= least, key
    healthy = {k: v for k, v in shown.items() if k not in CELL.values()}
    assert set(healthy.values()) == {0}
    # The riskiest list names the injected failures with their reason.
    risky = browser.eval("[...document.querySelectorAll('#riskiest tr[data-entity]')]"
                         ".map(r => [r.dataset.entity, r.innerText])")
    names = {e for e, _ in risky}
    assert set(INJECTED) <= names
    assert any("dbe" in text for e, text in risky if e == "n001:gpu2")
    assert browser.eval("document.querySelector('#status').textContent") == "live"
    browser.screenshot(shots / "fleet.png")
    assert _unexpected(browser) == []


def test_the_fleet_reads_on_a_wall_screen(service: Service, browser: Browser,
                                          shots: Path) -> None:
    browser.send("Emulation.setDeviceMetricsOverride", width=2560, height=1440,
                 deviceScaleFactor=1, mobile=False)
    try:
        _open(browser, service.url + "/?wall=1#/fleet",
              "document.querySelectorAll('#grid .cell').length === 96", "the wall-screen grid")
        assert browser.eval("document.body.classList.contains('large')")
        size = browser.eval("parseFloat(getComputedStyle(document.body).fontSize)")
        assert size > 20
        browser.screenshot(shots / "fleet-wall.png")
    finally:
        browser.send("Emulation.setDeviceMetricsOverride", width=1440, height=1000,
                     deviceScaleFactor=1, mobile=False)
        browser.eval("localStorage.removeItem('gpuhealth-large')")
    assert _unexpected(browser) == []


def test_node_page_lists_gpus_links_and_ports_with_charts(
        service: Service, browser: Browser, shots: Path) -> None:
    _open(browser, service.url + "/#/node/n001",
          "document.querySelectorAll('#gpucharts .charts').length === 2", "the node page")
    rows = browser.eval("[...document.querySelectorAll('#entities tr[data-entity]')]"
                        ".map(r => r.dataset.entity)")
    assert "n001:gpu2" in rows and "n001:mlx5_0:1" in rows
    # The riskiest GPU is picked for the charts; its metrics come from the SQLite store.
    assert browser.eval("document.querySelector('tr.picked').dataset.entity") == "n001:gpu2"
    charts = browser.eval("document.querySelectorAll('#gpucharts svg polyline').length")
    assert charts >= 1
    text = browser.eval("document.querySelector('#gpucharts').innerText")
    answer = httpx.get(f"{service.url}/v1/gpus/n001:gpu2/risk", timeout=10)
    assert answer.status_code == 200, answer.text  # both stores keep risk history
    assert answer.json()["source"] == ("influxdb" if service.influx else "sqlite")
    assert "risk" in text and "no history on this store" not in text
    # The node's risk over time; not its level series, which is its own no-data alert's.
    assert browser.eval("document.querySelectorAll('#nodecharts svg polyline').length") == 1
    browser.screenshot(shots / "node.png")
    assert _unexpected(browser) == []


def test_ack_and_silence_through_the_page(service: Service, browser: Browser,
                                          shots: Path) -> None:
    _open(browser, service.url + "/#/alerts",
          "document.querySelector('button[data-do=ack]')", "the alerts list")
    _set_token(browser, service.tokens["operate"])
    alert = next(a for a in service.get("/v1/alerts?state=firing")["alerts"]
                 if a["entity"] == "n001:gpu2")
    browser.eval(f"document.querySelector('tr[data-alert=\"{alert['id']}\"] "
                 "button[data-do=ack]').click()")
    acked = wait(lambda: service.get(f"/v1/alerts/{alert['id']}")["acked_by"],
                 "the acknowledgement")
    assert acked == "console-operate"
    browser.wait_for(f"document.querySelector('tr[data-alert=\"{alert['id']}\"]')"
                     ".innerText.includes('acked by console-operate')", "the ack on the page")
    browser.eval("document.querySelector('button[data-do=silence]"
                 "[data-entity=\"n003:gpu1\"]').click()")
    silences = wait(lambda: service.get("/v1/silences")["silences"], "the silence")
    assert [s["matchers"] for s in silences] == [["entity=n003:gpu1"]]
    assert silences[0]["author"] == "console-operate"
    browser.wait_for("!!document.querySelector('#silences tr[data-silence]')",
                     "the silence on the page")
    browser.screenshot(shots / "alerts.png")
    assert _unexpected(browser) == []


def test_a_verdict_through_the_page(service: Service, browser: Browser) -> None:
    _open(browser, service.url + "/#/alerts",
          "document.querySelector('button[data-do=verdict]')", "the alerts list")
    _set_token(browser, service.tokens["operate"])
    alert = next(a for a in service.get("/v1/alerts?state=firing")["alerts"]
                 if a["entity"] == "n001:gpu2")
    row = f"tr[data-alert=\"{alert['id']}\"]"
    browser.eval(f"document.querySelector('{row} select[data-verdict-for]').value = "
                 "'false_alarm'")
    browser.eval(f"document.querySelector('{row} button[data-do=verdict]').click()")
    verdict = wait(lambda: service.get(f"/v1/alerts/{alert['id']}")["verdict"], "the verdict")
    assert (verdict["verdict"], verdict["actor"], verdict["via"]) == (
        "false_alarm", "console-operate", "api")
    browser.wait_for(f"document.querySelector('{row} td.verdict').innerText"
                     ".includes('false alarm')", "the verdict on the page")
    labels = service.get("/v1/labels?overruled=false")["labels"]
    assert [(lb["kind"], lb["action"]) for lb in labels if lb["alert_id"] == alert["id"]] == [
        ("benign", "false_alarm")]
    assert _unexpected(browser) == []


def test_an_alert_page_gives_values_in_words(service: Service, browser: Browser) -> None:
    alert = next(a for a in service.get("/v1/alerts?state=firing")["alerts"]
                 if a["entity"] == "n001:gpu2")
    _open(browser, service.url + f"/#/alert/{alert['id']}",
          "document.querySelector('table.why tbody tr')", "the alert's signals")
    cells = browser.eval("[...document.querySelectorAll('table.why tbody tr')].map(r => "
                         "[...r.cells].slice(0, 4).map(c => c.innerText))")
    want = [[s["rule"], s["signal"], s["value_text"] or "–", s["threshold_text"] or "–"]
            for s in alert["explanation"]]
    assert cells == want and any(v.endswith(("error", "errors")) for _, _, v, _ in want)
    assert _unexpected(browser) == []


def test_approve_and_abort_through_the_page(service: Service, browser: Browser,
                                            shots: Path) -> None:
    _open(browser, service.url + "/#/actions",
          "document.querySelectorAll('button[data-do=approve]').length >= 2",
          "the actions awaiting approval")
    _set_token(browser, service.tokens["operate"])
    waiting = service.get("/v1/actions?state=awaiting_approval")["actions"]
    assert {a["node"] for a in waiting} >= {"n001", "n002"}
    browser.screenshot(shots / "actions.png")
    first, second = waiting[0]["id"], waiting[1]["id"]
    browser.eval(f"document.querySelector('button[data-do=approve][data-id=\"{first}\"]')"
                 ".click()")
    approved = wait(lambda: service.get(f"/v1/actions/{first}")["state"] != "awaiting_approval"
                    and service.get(f"/v1/actions/{first}"), "the approval")
    assert approved["approved_at"] is not None and approved["actor"] == "console-operate"
    browser.eval(f"document.querySelector('button[data-do=abort][data-id=\"{second}\"]')"
                 ".click()")
    aborted = wait(lambda: service.get(f"/v1/actions/{second}")["state"] == "aborted",
                   "the abort")
    assert aborted
    state = browser.wait_for("document.querySelector('#breaker .breaker')?.dataset.state",
                             "the breaker")
    assert state == service.get("/v1/breaker")["state"]
    assert browser.eval("document.querySelector('#breaker-badge').textContent") == \
        f"breaker {state}"
    browser.screenshot(shots / "actions-after.png")
    assert _unexpected(browser) == []


def test_the_model_page_shows_what_the_fleet_has_taught(service: Service, browser: Browser,
                                                        shots: Path) -> None:
    """The learning loop's state as /v1/models gives it: on with InfluxDB (auto), off on the
    embedded store and why; the failure labels per mode against the minimum to train on."""
    _open(browser, service.url + "/#/models", "document.querySelector('#taught .loop')",
          "the model page")
    taught = service.get("/v1/models")["learning"]
    loop = browser.eval("document.querySelector('#taught .loop').textContent")
    assert " ".join(loop.split()).startswith(f"learning loop {taught['why']};")
    rows = browser.eval("[...document.querySelectorAll('#taught tr[data-mode]')].map(r => "
                        "[r.dataset.mode, r.cells[1].textContent, r.cells[2].textContent])")
    assert rows and rows == [[mode, str(n), "enough" if n >= 10 else "needs 10"]
                             for mode, n in taught["labels_per_mode"].items()]
    # The injected faults' auto-labels (an earlier test's verdict may have overruled one).
    assert set(taught["labels_per_mode"]) & {"M1_hbm", "M3_nvlink"}
    waiting = browser.eval("document.querySelector('#taught .waiting')?.textContent")
    assert waiting == taught["waiting"]
    browser.screenshot(shots / "models.png")
    assert _unexpected(browser) == []


def test_the_script_pages_through_cursors_and_shows_rfc3339_times(
        service: Service, browser: Browser) -> None:
    _open(browser, service.url + "/#/fleet", "document.querySelector('#grid .cell')",
          "the fleet grid")
    whole = [n["node"] for n in service.get("/v1/fleet")["nodes"]]
    paged = browser.eval("apiAll('/v1/fleet?limit=5&top=0', 'nodes')"
                         ".then(r => [r.ok, r.body.nodes.map(n => n.node), r.body.next_cursor])")
    assert paged == [True, whole, None] and len(whole) > 10  # three pages, in order
    alert = service.get("/v1/alerts?limit=1")["alerts"][0]
    assert alert["started_at"].endswith("Z")  # RFC 3339 on the wire ...
    shown = browser.eval(f"fmtTime({alert['started_at']!r})")
    assert shown == alert["started_at"][:19].replace("T", " ") + "Z"  # ... and on the page
    # One time format on the page: the "updated" stamp too (it once read a local 12-hour clock).
    updated = browser.eval("document.querySelector('#updated').textContent")
    assert re.fullmatch(r"updated \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", updated), updated
    assert _unexpected(browser) == []


@pytest.mark.slow
def test_docs_load_from_the_service_itself(service: Service, browser: Browser,
                                           shots: Path) -> None:
    before = len(browser.requests)
    _open(browser, service.url + "/docs",
          "document.querySelectorAll('.swagger-ui .opblock').length > 10", "Swagger UI")
    browser.screenshot(shots / "docs.png")
    asked = browser.requests[before:]
    assert asked and [u for u in asked if not u.startswith((service.url, "data:", "blob:"))] == []
    assert _unexpected(browser) == []
