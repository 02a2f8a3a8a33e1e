"""collectors.pcie.lspci: each GPU's PCIe link from `lspci -D -nn -vv` on our own captures
(a healthy H100 x16 Gen5, a narrowed x8, an idle Gen1 speed drop, a ConnectX-7 HCA, a non-root
listing), the same readings as the sysfs source gives, the collector's lspci source, and the
parser on this machine's real lspci output."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from collectors.pcie import PcieCollector, parse_lspci, read_link
from collectors.pcie.sysfs import PcieLink
from service.commands.cli import main
from tests.collectors.own_captures import LSPCI_NODE, LSPCI_NONROOT, PCI_DEVICES, read

TS = 1_700_000_000_000_000_000
LINK = ("pcie_link_width", "pcie_link_width_max", "pcie_link_gen", "pcie_link_gen_max")


Run = Callable[[Sequence[str], float, Mapping[str, str] | None], tuple[int, str, str]]


def _runner(text: str, rc: int = 0) -> Run:
    def run(argv: Sequence[str], timeout: float,
            env: Mapping[str, str] | None) -> tuple[int, str, str]:
        assert list(argv) == ["lspci", "-D", "-nn", "-vv"]
        return rc, text, "" if rc == 0 else "lspci: Cannot open /sys/bus/pci/devices"
    return run


def _fields(link: PcieLink) -> tuple[int | None, ...]:
    return (link.width, link.width_max, link.gen, link.gen_max)


def test_devices_and_links() -> None:
    devs = {d.bdf: d for d in parse_lspci(read(LSPCI_NODE))}
    assert list(devs) == ["0000:17:02.0", "0000:18:00.0", "0000:2a:00.0", "0000:3b:00.0",
                          "0000:5d:00.0"]
    assert [b for b, d in devs.items() if d.is_gpu] == ["0000:18:00.0", "0000:2a:00.0",
                                                         "0000:3b:00.0"]
    assert _fields(devs["0000:18:00.0"].link) == (16, 16, 5, 5)  # healthy
    assert _fields(devs["0000:2a:00.0"].link) == (8, 16, 5, 5)  # narrowed: a fault
    assert _fields(devs["0000:3b:00.0"].link) == (16, 16, 1, 5)  # idle speed drop: not one
    hca = devs["0000:5d:00.0"]
    assert hca.is_hca and not hca.is_gpu and _fields(hca.link) == (8, 16, 4, 5)
    assert all(not d.link.refused and not d.denied for d in devs.values())


def test_same_readings_as_sysfs() -> None:
    from collectors.pcie import gpu_devices

    sysfs = {d.name: read_link(d) for d in gpu_devices(PCI_DEVICES)}
    lspci = {d.bdf: d.link for d in parse_lspci(read(LSPCI_NODE))}
    assert _fields(lspci["0000:18:00.0"]) == _fields(sysfs["0000:18:00.0"])
    assert lspci["0000:2a:00.0"].width == sysfs["0000:2a:00.0"].width == 8


@pytest.mark.parametrize(("sta", "want", "why"), [
    ("Speed 8GT/s (ok), Width x16 (ok)", (16, 3), None),  # pciutils 3.6-3.7
    ("Speed 8GT/s, Width x16, TrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-", (16, 3),
     None),  # before 3.6: flags on the same line
    ("Speed 5GT/s (downgraded), Width x4 (strange)", (4, 2), None),
    ("Speed unknown, Width x0", (0, 0), None),  # no link trained
    ("Speed 9GT/s, Width x16", (16, None), "not a PCIe link speed"),
    ("Speed 32GT/s, Width x64", (None, 5), "not a link width"),
])
def test_lnksta_spellings(sta: str, want: tuple[int | None, int | None],
                          why: str | None) -> None:
    text = read(LSPCI_NODE).replace("LnkSta:\tSpeed 32GT/s, Width x8 (downgraded)",
                                    f"LnkSta:\t{sta}")
    link = {d.bdf: d.link for d in parse_lspci(text)}["0000:2a:00.0"]
    assert (link.width, link.gen) == want and link.width_max == 16
    assert (why is None and not link.refused) or (len(link.refused) == 1 and why is not None
                                                   and why in link.refused[0])


def test_collector_lspci_source() -> None:
    c = PcieCollector(host="n1", source="lspci", runner=_runner(read(LSPCI_NODE)),
                      gpu_index={"00000000:3B:00.0": 0, "00000000:18:00.0": 1,
                                 "00000000:2A:00.0": 2})
    points, rejected = c.read(TS)
    by = {p.tags["gpu"]: tuple(p.fields[k] for k in LINK) for p in points}
    assert by == {"1": (16, 16, 5, 5), "2": (8, 16, 5, 5), "0": (16, 16, 1, 5)}
    assert rejected == [] and all("pcie_aer_fatal_total" not in p.fields for p in points)
    assert c.collect().samples > 0 and c.status.up


def test_not_root_is_a_reason_not_a_link_down() -> None:
    c = PcieCollector(host="n1", source="lspci", runner=_runner(read(LSPCI_NONROOT)))
    points, rejected = c.read(TS)
    assert points == [] and len(rejected) == 1
    assert "access denied" in rejected[0].reason and "root" in rejected[0].reason


def test_lspci_failing_or_hanging_is_down_with_the_reason() -> None:
    failing = PcieCollector(host="n1", source="lspci", runner=_runner("", rc=1))
    assert failing.collect().samples == 0 and not failing.status.up
    assert "exited with status 1" in failing.status.reason

    def hang(argv: Sequence[str], timeout: float,
             env: Mapping[str, str] | None) -> tuple[int, str, str]:
        raise TimeoutError("killed")

    hung = PcieCollector(host="n1", source="lspci", runner=hang, timeout=2)
    hung.collect()
    assert not hung.status.up and "timed out after 2 s" in hung.status.reason
    with pytest.raises(ValueError, match="source"):
        PcieCollector(source="nvml")


def test_parse_an_lspci_capture(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "pcie", str(LSPCI_NODE), "--host", "n7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [x.split(" ")[0] for x in lines] == ["gpu,gpu=0,host=n7", "gpu,gpu=1,host=n7",
                                               "gpu,gpu=2,host=n7"]
    assert "pcie_link_width=8" in lines[1] and "pcie_link_gen=1" in lines[2]


def test_real_lspci_output_reads_every_device() -> None:
    """This machine's own lspci (pciutils; .ci/run installs it): every device it lists is
    parsed with its address, and the collector reads it without error (a machine without an
    NVIDIA GPU gives no point)."""
    lspci = shutil.which("lspci")
    if lspci is None:
        pytest.skip("lspci is not installed (apt-get install pciutils; .ci/run does)")
    out = subprocess.run([lspci, "-D", "-nn", "-vv"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    heads = [x.split(" ")[0] for x in out.splitlines() if x and not x[0].isspace()]
    devs = parse_lspci(out)
    assert [d.bdf for d in devs] == heads and heads
    assert all(not d.link.refused for d in devs)
    sysfs = Path("/sys/bus/pci/devices")
    if sysfs.is_dir():
        assert {d.bdf for d in devs} == {p.name for p in sysfs.iterdir()}
    c = PcieCollector(host="n1", source="lspci", lspci=lspci)
    points, _ = c.read(TS)
    assert c.collect() is not None and c.status.up
    assert len(points) == sum(1 for d in devs if d.is_gpu)
