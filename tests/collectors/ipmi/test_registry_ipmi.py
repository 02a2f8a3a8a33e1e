"""The `ipmi` source in the registry: `gpuhealth parse ipmi` on our captures, the settings that
build a collector (credentials only by file or environment), and collect() onto the catalog
once the catalog has the psu and fan scopes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from collectors import registry
from collectors.catalog import Scope
from collectors.ipmi import IpmiCollector, Target
from service.commands.cli import main
from tests.collectors.own_captures import (
    FREEIPMI_SEL,
    FREEIPMI_SENSORS,
    FREEIPMI_VERBOSE,
    IPMI_SDR_SUPERMICRO,
    IPMI_SEL,
)


def test_parse_an_sdr_capture(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "ipmi", str(IPMI_SDR_SUPERMICRO), "--host", "n7"]) == 0
    out = capsys.readouterr()
    heads = [x.split(" ")[0] for x in out.out.splitlines()]
    assert heads == ["psu,host=n7,psu=1", "psu,host=n7,psu=2", "fan,fan=1,host=n7",
                     "fan,fan=2,host=n7", "fan,fan=4,host=n7", "node,host=n7"]
    assert "refused: line 16: not an sdr elist row" in out.err
    assert "note: line 8: no reading (No Reading) (FAN3)" in out.err


def test_parse_a_sel_capture(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "ipmi", str(IPMI_SEL), "--host", "n7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [x.split(" ")[1] for x in lines] == ["code=2i", "code=2i", "code=2i", "code=1i",
                                               "code=2i", "code=1i", "code=1i", "code=2i",
                                               "code=2i"]


def test_parse_refuses_other_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.txt"
    other.write_text("hello\n")
    assert main(["parse", "ipmi", str(other)]) == 1
    assert "neither `ipmitool sdr elist`" in capsys.readouterr().err


def test_build_from_settings(tmp_path: Path) -> None:
    src = registry.get("ipmi")
    c = src.build("n1", {"bmc": "bmc-n1.mgmt", "user": "monitor", "port": "6230",
                         "cipher": "17", "password_file": str(tmp_path / "pw"),
                         "timeout": "20", "sel": "false"})
    assert isinstance(c, IpmiCollector)
    assert c.target.argv("sdr", "elist") == [
        "ipmitool", "-I", "lanplus", "-H", "bmc-n1.mgmt", "-p", "6230", "-U", "monitor",
        "-C", "17", "-f", str(tmp_path / "pw"), "sdr", "elist"]
    assert c.timeout == 20.0 and c.sel is False and c.host == "n1"
    in_band = src.build("n1", {})
    assert isinstance(in_band, IpmiCollector) and in_band.target.bmc is None
    with pytest.raises(ValueError, match="not in the settings"):
        src.build("n1", {"bmc": "b", "user": "u", "password": "hunter2"})
    with pytest.raises(ValueError, match="BMC host"):
        src.build("n1", {"bmc": "-x", "user": "u"})


def test_collect_maps_onto_the_catalog() -> None:
    if "psu" not in {s.value for s in Scope}:
        pytest.skip("the catalog has no psu/fan scopes yet (added with issue 31's catalog "
                    "change); this runs once both are merged")
    sdr = IPMI_SDR_SUPERMICRO.read_text()

    def runner(argv: Sequence[str], timeout: float,
               env: Mapping[str, str] | None) -> tuple[int, str, str]:
        cmd = list(argv)[-2:]
        return (0, sdr, "") if cmd == ["sdr", "elist"] else (0, "", "")

    c = IpmiCollector(host="n1", runner=runner, sel=False, thresholds_every=0)
    batch = c.collect()
    assert c.status.up
    refused = [r for r in batch.rejected if "not an sdr elist row" not in r.reason
               and "no metric here" not in r.reason and "no reading" not in r.reason
               and "not inlet or exhaust" not in r.reason]
    assert not refused, refused


def test_parse_freeipmi_captures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "ipmi", str(FREEIPMI_SENSORS), "--host", "n7"]) == 0
    heads = [x.split(" ")[0] for x in capsys.readouterr().out.splitlines()]
    assert heads[-1] == "node,host=n7" and "fan,fan=FAN1,host=n7" in heads
    assert main(["parse", "ipmi", str(FREEIPMI_SEL), "--host", "n7"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 11  # the warning and critical entries


def test_build_freeipmi_from_settings(tmp_path: Path) -> None:
    c = registry.get("ipmi").build("n1", {"bmc": "bmc-n1.mgmt", "user": "monitor",
                                          "tool": "freeipmi", "workarounds": "opensesspriv, "
                                          "intel20", "password_env": "BMC_PW"})
    assert isinstance(c, IpmiCollector)
    assert (c.target.tool, c.target.workarounds) == ("freeipmi", ("opensesspriv", "intel20"))
    with pytest.raises(ValueError, match="tool"):
        registry.get("ipmi").build("n1", {"tool": "ipmiutil"})


def test_freeipmi_config_file_is_private_and_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BMC_PW", "s3cret#pw")
    seen: list[tuple[str, int, str]] = []
    csv = FREEIPMI_SENSORS.read_text()

    def runner(argv: Sequence[str], timeout: float,
               env: Mapping[str, str] | None) -> tuple[int, str, str]:
        conf = Path(argv[argv.index("--config-file") + 1])
        seen.append((argv[0], conf.stat().st_mode & 0o777, conf.read_text()))
        assert all("s3cret" not in a for a in argv)
        if "-v" in argv:
            return 0, FREEIPMI_VERBOSE.read_text(), ""
        return (0, csv, "") if argv[0] == "ipmi-sensors" else (1, "", "s3cret#pw refused")

    c = IpmiCollector(Target(bmc="bmc-7", user="monitor", tool="freeipmi", password_env="BMC_PW"),
                      host="n1", runner=runner)
    got = c.read()
    assert got.reachable and c.lower_critical["FAN1"] == 500.0
    assert [s[:2] for s in seen] == [("ipmi-sensors", 0o600), ("ipmi-sensors", 0o600),
                                     ("ipmi-sel", 0o600)]
    assert seen[0][2] == "password s3cret\\#pw\n"
    assert c._workdir is not None and [p.name for p in c._workdir.iterdir()] == ["sdr-cache"]
    sel_note = next(r.reason for r in got.rejected if r.reason.startswith("SEL not read"))
    assert "s3cret" not in sel_note and "***" in sel_note  # redacted if a tool echoes it
    workdir = c._workdir
    c.close()
    assert not workdir.exists()
    monkeypatch.setenv("BMC_PW", "has space")
    down = IpmiCollector(Target(bmc="bmc-7", user="monitor", tool="freeipmi",
                                password_env="BMC_PW"), host="n1", runner=runner).read()
    assert not down.reachable and "whitespace" in down.reason and "has space" not in down.reason
