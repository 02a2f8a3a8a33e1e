"""The poller and its client against the loopback emulator (tests/collectors/redfish/
emulator.py): Redfish session login, refused credentials, a hung BMC that delays no other, a
bounded answer, the BMC list and the credentials file. No timing is asserted: the benchmark
(bench/bmc_poller.py) measures."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.frames import Rejection
from collectors.lineprotocol import Point
from collectors.redfish import Credentials, CredentialStore, Poller, PollerConfig, Secret, targets
from collectors.redfish import secret as secrets
from collectors.redfish.collector import RedfishCollector
from collectors.redfish.targets import bmc
from tests.collectors.redfish.emulator import Emulator, ThreadedEmulator, load_tree
from tests.collectors.redfish.sushy import MOCKUP

NEEDS = pytest.mark.skipif(not MOCKUP.is_dir(), reason="needs ../shared/reference/redfish/"
                           "public-rackmount1 beside the repo")
PASSWORD = "emu-Pw-4410"


@pytest.fixture
def emulator() -> Iterator[ThreadedEmulator]:
    emu = ThreadedEmulator(Emulator(load_tree(MOCKUP), user="monitor", password=PASSWORD,
                                    hung=frozenset({0})), 4)
    yield emu
    emu.stop()


def run(emu: ThreadedEmulator, password: str, **cfg: Any) -> tuple[Poller, list[Point],
                                                                      list[Rejection]]:
    points: list[Point] = []
    refused: list[Rejection] = []

    def emit(p: list[Point], r: list[Rejection]) -> None:
        points.extend(p)
        refused.extend(r)

    bmcs = [bmc(f"n{i}", f"http://127.0.0.1:{port}") for i, port in enumerate(emu.ports)]
    poller = Poller(bmcs, CredentialStore(Credentials("monitor", Secret(password))),
                    PollerConfig(**{"timeout_s": 1.0, **cfg}), emit)
    asyncio.run(poller.cycle())
    return poller, points, refused


@NEEDS
def test_session_login_and_a_hung_bmc_that_delays_no_other(emulator: ThreadedEmulator) -> None:
    poller, points, refused = run(emulator, PASSWORD)
    reach = {p.tags["host"]: p.fields["bmc_reachable"] for p in points
             if p.measurement == "node"}
    assert reach == {"n0": 0, "n1": 1, "n2": 1, "n3": 1}
    assert {p.tags["host"] for p in points if p.measurement == "psu"} == {"n1", "n2", "n3"}
    assert [(r.entity, r.reason.split(": ", 1)[1]) for r in refused] == [
        ("n0", "no complete answer within 1 s")]
    assert len(emulator.emulator.tokens) == 3  # one session per answering BMC
    # The hung BMC held its slot for the timeout; the others finished on their own time.
    st = {s.bmc.name: s for s in poller.states}
    assert all(st[n].last_seconds < st["n0"].last_seconds for n in ("n1", "n2", "n3"))


@NEEDS
def test_refused_credentials_are_reported_without_them(emulator: ThreadedEmulator) -> None:
    _, points, refused = run(emulator, "wrong-password-99")
    assert {p.fields["bmc_reachable"] for p in points} == {0}
    assert sorted(r.reason.split(": ", 1)[1] for r in refused) == [
        "no complete answer within 1 s"] + ["session login refused (HTTP 401)"] * 3
    assert all("wrong-password-99" not in r.reason for r in refused)


@NEEDS
def test_an_answer_over_the_bound_is_refused(emulator: ThreadedEmulator) -> None:
    _, points, refused = run(emulator, PASSWORD, max_response_bytes=2_000)
    assert {p.fields["bmc_reachable"] for p in points if p.measurement == "node"} == {0}
    assert any("answer larger than 2000 bytes" in r.reason for r in refused)


def test_the_bmc_list_validates_names_and_addresses(tmp_path: Path) -> None:
    got = targets.from_settings(["n1=n1-bmc.mgmt", {"name": "n2", "address": "[fd00::7]:8443"},
                                 "n3=http://10.0.0.3"])
    assert [b.url for b in got] == ["https://n1-bmc.mgmt", "https://[fd00::7]:8443",
                                    "http://10.0.0.3"]
    for bad, why in (["-rf=10.0.0.1"], "starts with '-'"), (["n1=ftp://x"], "scheme"), \
            (["n1=https://u:p@x"], "must not hold credentials"), \
            (["n1=x", "n1=y"], "listed twice"), (["n1=x/redfish"], "only the scheme"):
        with pytest.raises(ValueError, match=why):
            targets.from_settings(bad)
    f = tmp_path / "bmcs"
    f.write_text("# node  bmc\nn1 n1-bmc\n\nn2 10.0.0.2:443  # rack 4\nn3\n")
    with pytest.raises(ValueError, match=r"bmcs:5: give \"node address\""):
        targets.from_file(f)


def test_credentials_file_and_environment_never_show_the_secret(tmp_path: Path) -> None:
    f = tmp_path / "creds.json"
    f.write_text(json.dumps({"username": "mon", "password": "file-Pw-1",
                             "bmcs": {"n9": {"username": "root", "password": "n9-Pw-2"}}}))
    f.chmod(0o600)
    store = secrets.load(f, {})
    n9, other = store.for_bmc("n9"), store.for_bmc("n1")
    assert n9 is not None and n9.password.reveal() == "n9-Pw-2"
    assert other is not None and other.username == "mon"
    shown = f"{store!r} {n9} {n9.password} {n9.password:>20}"
    assert "n9-Pw-2" not in shown and "file-Pw-1" not in shown
    env = secrets.load(f, {"GPUHEALTH_BMC_USERNAME": "e", "GPUHEALTH_BMC_PASSWORD": "env-Pw"})
    assert env.for_bmc("n1") == Credentials("e", env.for_bmc("n1").password)  # type: ignore[union-attr]
    f.write_text('{"username": "mon", "password": "leaky-Pw-3",')  # cut short
    with pytest.raises(ValueError) as err:
        secrets.load(f, {})
    assert "leaky-Pw-3" not in str(err.value) and "not a JSON object" in str(err.value)
    with pytest.raises(ValueError, match="set both"):
        secrets.load(None, {"GPUHEALTH_BMC_PASSWORD": "x"})


def test_collector_settings_are_checked_at_build() -> None:
    with pytest.raises(ValueError, match="unknown key"):
        RedfishCollector.from_config("h", {"bmcs": ["n1=x"], "password": "p"})
    with pytest.raises(ValueError, match="no BMC to read"):
        RedfishCollector.from_config("h", {})
    with pytest.raises(ValueError, match="interval_s must be above 0"):
        RedfishCollector.from_config("h", {"url": "https://169.254.0.17", "interval_s": 0})
    inband = RedfishCollector.from_config("node7", {"url": "https://169.254.0.17"})
    assert [(s.bmc.name, s.bmc.url) for s in inband.poller.states] == [
        ("node7", "https://169.254.0.17")]
