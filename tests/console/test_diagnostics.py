"""A node's diagnostics in the console, in a real headless Chromium: the service runs with
diagnostics on (the local site) and its RunStore holds n001's runs as the gate and a sweep
left them: a gate run that passed, a sweep that failed on GPU 2 with its figure, a run that
could not start. n001 came back and failed again two days after its release, so it needs its
hardware replaced. The node page must list the runs with their suite, why they ran, when, the
result and the failing checks with their figures, and show the flag with why; an operator's
"Hardware replaced" clears it through the API (audited), and the page says so. A node never
tested says so; a service without diagnostics says they are off. Screenshots go to
$GPUHEALTH_CONSOLE_SCREENSHOTS (under diagnostics/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.diagnostics.result import Check, Status, SuiteResult, build
from service.api.app import create_app
from service.api.state import Running
from service.diagnostics.offenders import DAY
from service.diagnostics.site import Purpose
from service.remediation.actions import AuditEntry
from service.settings import Settings, StorageSettings
from tests.console.cdp import CHROMIUM, Browser
from tests.console.serve import (
    Service,
    browsing,
    open_page,
    screenshot_dir,
    serving,
    set_token,
    unexpected,
)
from tests.support.fleet import STEP, T0, Fleet, FleetCollector, ManualClock

pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                 "(apt-get install chromium; .ci/run does)"),
              pytest.mark.slow]

NOW = T0 + 20 * DAY


def _history(st: Running) -> None:
    diag, ctl = st.pipeline.diagnostics, st.pipeline.controller
    assert diag is not None and ctl is not None
    runs = diag.runs

    def ran(days: float, suite: str, purpose: Purpose, result: SuiteResult,
            drain: str = "") -> None:
        run = runs.start("n001", suite, purpose, drain, "local", T0 + days * DAY)
        runs.finish(run.id, result, T0 + days * DAY + 900)

    ran(9, "dcgm_r3", Purpose.GATE, build("dcgm_r3", [Check("memory", Status.PASS, gpu=g)
                                                      for g in range(4)]), drain="act-7")
    ctl.store.append_audit(AuditEntry(at=T0 + 10 * DAY, actor="gpuhealth", event="released",
                                      action_id="act-7", node="n001"))
    ran(12, "nccl_allreduce", Purpose.SWEEP, build("nccl_allreduce", [
        Check("busbw_gbps", Status.FAIL, gpu=2, figure=121.5, expected=400.0, unit="GB/s",
              detail="below the expected minimum")]))
    ran(13, "gpu_burn", Purpose.MANUAL, SuiteResult(
        "gpu_burn", Status.ERROR, (), {}, error="n001 has 1 process(es) on its GPUs; not "
        "testing"))


def _serve(data: Path, diagnostics: bool) -> Iterator[Service]:
    clock = ManualClock(NOW)
    extra = ({"diagnostics": {"enabled": True, "site": "local", "offenders": {"cache_s": 0}}}
             if diagnostics else {})
    settings = Settings.model_validate({
        "storage": StorageSettings(data_dir=data),
        "remediation": {"mode": "approve", "hook": "command",
                        "hook_config": {"drain": ["true"], "release": ["true"]}},
        **extra})
    fleet = Fleet({"n001": 4, "n002": 4})
    app = create_app(settings, clock=clock, schedule=False,
                     collectors=[FleetCollector(fleet, clock)])
    with serving(app) as url:
        st: Running = app.state.gpuhealth
        auth = app.state.gpuhealth_auth
        tokens = {"operate": auth.tokens.create("oncall", "operate", clock())[1]}
        diag, ctl = st.pipeline.diagnostics, st.pipeline.controller
        if diagnostics:
            assert diag is not None and ctl is not None
            assert diag.offenders is not None and diag.clock is clock  # built by the wiring
            _history(st)
        for _ in range(3):
            st.scheduler.collect_once("fleet")
            st.scheduler.score_once()
            clock.now += STEP
        yield Service(url, st, tokens)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    yield from _serve(tmp_path_factory.mktemp("diag") / "data", diagnostics=True)


@pytest.fixture(scope="module")
def off(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    yield from _serve(tmp_path_factory.mktemp("diag-off") / "data", diagnostics=False)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    yield from browsing(tmp_path_factory)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return screenshot_dir(tmp_path_factory, "diagnostics")


def _runs(b: Browser) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = b.eval(
        "[...document.querySelectorAll('#diagnostics tr[data-run]')].map(r => "
        "({status: r.dataset.status, text: r.innerText}))")
    return rows


def test_the_node_page_lists_its_runs_and_the_offender_flag(
        service: Service, browser: Browser, shots: Path) -> None:
    api = service.get("/v1/nodes/n001/diagnostics")
    open_page(browser, service.url + "/#/node/n001",
              "document.querySelectorAll('#diagnostics tr[data-run]').length === 3",
              "n001's diagnostic runs")
    runs = _runs(browser)
    assert [r["status"] for r in runs] == [r["status"] for r in api["runs"]] == [
        "error", "fail", "pass"]  # newest first
    error, fail, passed = (r["text"] for r in runs)
    assert "gpu_burn" in error and "manual" in error
    assert "could not run: n001 has 1 process(es) on its GPUs; not testing" in error
    assert "nccl_allreduce" in fail and "sweep" in fail
    assert "busbw_gbps on GPU 2: 121.5 GB/s (expected 400) below the expected minimum" in fail
    assert "dcgm_r3" in passed and "gate" in passed and "act-7" in passed
    assert "4 checks passed" in passed
    flag = browser.eval("document.querySelector('#diagnostics .offender').dataset.flagged")
    text = browser.eval("document.querySelector('#diagnostics .offender').innerText")
    assert flag == "1" and "Needs hardware replacement" in text
    assert api["offender"]["why"] in text
    assert "failed again 2.0 days after its release" in text
    assert "GPU 2 (1×)" in text
    browser.screenshot(shots / "node-n001-flagged.png")
    assert unexpected(browser) == []


def test_hardware_replaced_clears_the_flag(service: Service, browser: Browser,
                                           shots: Path) -> None:
    open_page(browser, service.url + "/#/node/n001",
              "!!document.querySelector('#diagnostics button[data-do=\"replaced\"]')",
              "the Hardware replaced button")
    set_token(browser, service.tokens["operate"])
    browser.eval("document.querySelector('#replreason').value = 'baseboard swapped, RMA 88'")
    browser.eval("document.querySelector('#diagnostics button[data-do=\"replaced\"]').click()")
    browser.wait_for("document.querySelector('#diagnostics .offender') && "
                     "document.querySelector('#diagnostics .offender').dataset.flagged === '0'",
                     "the flag cleared on the page")
    assert "hardware replaced" in browser.eval("document.querySelector('#flash').innerText")
    text = browser.eval("document.querySelector('#diagnostics .offender').innerText")
    assert "baseboard swapped, RMA 88" in text and "oncall" in text
    off = service.get("/v1/nodes/n001/diagnostics")["offender"]
    assert off["flagged"] is False and off["replaced"]["reason"] == "baseboard swapped, RMA 88"
    ctl = service.st.pipeline.controller
    assert ctl is not None
    assert [e.actor for e in ctl.store.audit(node="n001") if e.event == "replaced"] == ["oncall"]
    assert len(_runs(browser)) == 3
    browser.screenshot(shots / "node-n001-replaced.png")
    assert unexpected(browser) == []


def test_a_node_never_tested_and_a_service_without_diagnostics_say_so(
        service: Service, off: Service, browser: Browser) -> None:
    open_page(browser, service.url + "/#/node/n002",
              "/no diagnostic run on n002 yet/.test("
              "document.querySelector('#diagnostics').innerText)", "n002 never tested")
    assert unexpected(browser) == []
    open_page(browser, off.url + "/#/node/n001",
              "/diagnostics are off/.test(document.querySelector('#diagnostics').innerText)",
              "diagnostics off")
    assert unexpected(browser) == []
