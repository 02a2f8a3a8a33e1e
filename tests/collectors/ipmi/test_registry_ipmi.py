"""The `ipmi` source in the registry: `gpuhealth parse ipmi` on our captures, the settings that
build a collector (credentials only by file or environment), and collect() onto the catalog
once the catalog has the psu and fan scopes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from collectors import registry
from collectors.catalog import Scope
from collectors.ipmi import IpmiCollector
from service.commands.cli import main
from tests.collectors.own_captures import IPMI_SDR_SUPERMICRO, IPMI_SEL


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
