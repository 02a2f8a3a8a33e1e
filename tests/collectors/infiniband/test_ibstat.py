"""The `ibstat` source: its parser over the real captures and our own (ports Down, Polling,
Disabled; output cut by an ibpanic), its collector through an injected runner, and `parse
ibstat` through the CLI."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from collectors import registry
from collectors.catalog import CATALOG, Scope
from collectors.infiniband import IbstatCollector, parse_ibstat, to_point
from collectors.nvidia_smi import RunResult
from collectors.plugins import Registry
from collectors.schema import SchemaMapper
from service.commands.cli import main
from tests.collectors.infiniband.trees import REPO

OTHER = REPO / ".." / "shared" / "fixtures" / "other"
TS = 1_700_000_000_000_000_000


def _captures() -> list[object]:
    if not OTHER.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(
            reason=f"fixtures not found at {OTHER} (the shared checkout is absent)"))]
    return [pytest.param(p, id=p.name) for p in sorted(OTHER.glob("gpud-ibstat.*"))]


def _need(name: str) -> Path:
    path = OTHER / name
    if not path.is_file():
        pytest.skip(f"fixture {name} not found under {OTHER}")
    return path


# Our own capture in ibstat's shape: one port of each state an operator meets, then ibstat
# stopping on a device that went away under it.
OWN = """\
CA 'mlx5_0'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.41.1000
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 400
\t\tLink layer: InfiniBand
CA 'mlx5_1'
\tCA type: MT4129
\tNumber of ports: 1
\tPort 1:
\t\tState: Down
\t\tPhysical state: Polling
\t\tRate: 10
\t\tLink layer: InfiniBand
CA 'mlx5_2'
\tCA type: MT4129
\tNumber of ports: 2
\tPort 1:
\t\tState: Down
\t\tPhysical state: Disabled
\t\tRate: 40
\tPort 2:
\t\tState: Initializing
\t\tPhysical state: LinkUp
\t\tRate: 2.5
CA 'mlx5_3'
\tCA type: MT4129
\tNumber of ports: 1
\tPort 1:
ibpanic: [31337] main: stat of IB device 'mlx5_3' failed: No such file or directory
"""


@pytest.mark.parametrize("path", _captures())
def test_every_ibstat_capture(path: Path) -> None:
    text = path.read_text()
    r = parse_ibstat(text, "n1")
    assert r.rejected == [] and r.cas == text.count("CA '")
    assert len(r.ports) == text.count("Port 1:") > 0
    assert all(p.state is not None and p.phys_state is not None and p.rate_gbps for p in r.ports)
    # Every port of the real captures says what it is: a Mellanox model and IB or Ethernet.
    assert all(p.hca_model in (4125, 4126, 4129, 41692) and p.link_layer in (1, 2)
               for p in r.ports)
    points = [to_point(p, "n1", TS) for p in r.ports]
    assert SchemaMapper().to_batch(points).rejected == []


def test_h100_with_ports_down_and_disabled() -> None:
    r = parse_ibstat(_need("gpud-ibstat.47.0.h100.some.down.0").read_text(), "n1")
    down = {(p.device, p.port): (p.state, p.phys_state, p.rate_gbps) for p in r.ports
            if p.state != 4}
    assert down == {("mlx5_2", 1): (1, 3, 40), ("mlx5_7", 1): (1, 3, 40),
                    ("mlx5_8", 1): (1, 3, 40)}
    active = [p for p in r.ports if p.state == 4]
    assert len(active) == 9 and {p.phys_state for p in active} == {5}
    assert {p.rate_gbps for p in active} == {100, 400}
    # 8 ConnectX-7 InfiniBand ports at 400 and 4 ConnectX-6 Dx Ethernet ports, 1 up at 100.
    kinds = sorted({(p.hca_model, p.link_layer, p.rate_gbps, p.state) for p in r.ports})
    assert kinds == [(4125, 2, 40, 1), (4125, 2, 100, 4), (4129, 1, 400, 4)]
    assert sum(p.hca_model == 4129 for p in r.ports) == 8


def test_own_capture_states_and_the_ibpanic_cut() -> None:
    r = parse_ibstat(OWN, "n1")
    assert [(p.device, p.port, p.state, p.phys_state, p.rate_gbps) for p in r.ports] == [
        ("mlx5_0", 1, 4, 5, 400), ("mlx5_1", 1, 1, 2, 10), ("mlx5_2", 1, 1, 3, 40),
        ("mlx5_2", 2, 2, 5, 2.5)]
    assert [str(x) for x in r.rejected] == [
        "line 33: ibstat stopped: ibpanic: [31337] main: stat of IB device 'mlx5_3' failed: No "
        "such file or directory",
        "mlx5_3 port 1 has no State line (ibstat output cut short?) (n1:mlx5_3:1)",
    ]
    points = [to_point(p, "n1", TS) for p in r.ports]
    # The sysfs collector's fields for the same readings; mlx5_2's ports have no Link layer.
    sysfs_names = {m.name for m in CATALOG.columns(Scope.IB_PORT) if m.sysfs in
                   ("state", "rate", "phys_state", "link_layer", "../../hca_type")}
    assert all(set(p.fields) == sysfs_names for p in points[:2])
    assert all(set(p.fields) == sysfs_names - {"ib_link_layer"} for p in points[2:])
    assert points[1].fields == {"ib_state": 1, "ib_phys_state": 2, "ib_rate": 10,  # Polling
                                "ib_link_layer": 1, "ib_hca_model": 4129}


def test_ca_type_and_link_layer_say_what_kind_of_port_it_is() -> None:
    """`CA type:` is sysfs's hca_type: "MT4125" is model 4125 on each of the CA's ports, a type
    with no MT number (another vendor's name) is no model and no error; an unknown link layer
    is refused on its own."""
    text = """\
CA 'mlx5_0'
\tCA type: MT4125
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 100
\t\tLink layer: Ethernet
\tPort 2:
\t\tState: Active
\t\tRate: 100
\t\tLink layer: Ethernet
CA 'irdma0'
\tCA type: I40IW
\tPort 1:
\t\tState: Active
\t\tRate: 100
\t\tLink layer: Sideways
CA 'mlx5_1'
\tPort 1:
\t\tState: Active
\t\tLink layer: InfiniBand
"""
    r = parse_ibstat(text, "n1")
    assert [(p.device, p.port, p.hca_model, p.link_layer) for p in r.ports] == [
        ("mlx5_0", 1, 4125, 2), ("mlx5_0", 2, 4125, 2), ("irdma0", 1, None, None),
        ("mlx5_1", 1, None, 1)]  # the CA type of mlx5_0 does not carry over
    assert [(x.entity, x.metric, x.reason) for x in r.rejected] == [
        ("n1:irdma0:1", "ibstat Link layer", "unknown link layer 'Sideways'")]
    assert to_point(r.ports[0], "n1", TS).fields == {
        "ib_state": 4, "ib_phys_state": 5, "ib_rate": 100, "ib_link_layer": 2,
        "ib_hca_model": 4125}


def test_unknown_words_are_refused_one_by_one() -> None:
    text = OWN.replace("State: Down\n\t\tPhysical state: Polling",
                       "State: Sideways\n\t\tPhysical state: Polling").replace(
                       "Rate: 40\n", "Rate: " + "9" * 400 + "\n")
    r = parse_ibstat(text, "n1")
    assert [(x.entity, x.metric, x.reason) for x in r.rejected[:2]] == [
        ("n1:mlx5_1:1", "ibstat State", "unknown port state 'Sideways'"),
        ("n1:mlx5_2:1", "ibstat Rate", f"rate {'9' * 40!r} is not a number of Gb/s"),
    ]
    assert [(p.device, p.state, p.phys_state, p.rate_gbps) for p in r.ports[1:3]] == [
        ("mlx5_1", None, 2, 10), ("mlx5_2", 1, 3, None)]


class Runner:
    def __init__(self, *answers: RunResult | Exception) -> None:
        self.answers = list(answers)
        self.argv: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> RunResult:
        self.argv.append(tuple(argv))
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a


def _row(batch: object, dev: str, metric: str) -> float:
    frame = batch.frames[Scope.IB_PORT]  # type: ignore[attr-defined]
    keys = [frame.entities[i].key for i in frame.rows]
    return float(frame.values[keys.index(f"n1:{dev}:1"), CATALOG.column(Scope.IB_PORT, metric)])


def test_collector_reports_states_and_counts_flaps() -> None:
    up = OWN.split("ibpanic")[0].replace("CA 'mlx5_3'", "CA 'mlx5_9'").replace(
        "\tPort 1:\n", "\tPort 1:\n\t\tState: Active\n\t\tRate: 200\n", -1)
    flapped = up.replace("State: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400",
                         "State: Down\n\t\tPhysical state: Polling\n\t\tRate: 400")
    runner = Runner((0, OWN, ""), (0, flapped, ""))
    c = IbstatCollector(host="n1", runner=runner, clock=lambda: TS)
    first = c.collect()
    assert c.status.up and runner.argv == [("ibstat",)]
    # The ibpanic (ibstat exits 0 or not) costs only the device it was reading.
    assert len(first.rejected) == 2 and len(first.frames[Scope.IB_PORT]) == 4
    assert (_row(first, "mlx5_0", "ib_state"), _row(first, "mlx5_0", "ib_link_flaps")) == (4, 0)
    second = c.collect()
    assert (_row(second, "mlx5_0", "ib_state"), _row(second, "mlx5_0", "ib_link_flaps")) == (1, 1)


@pytest.mark.parametrize(("answer", "why"), [
    (FileNotFoundError(2, "No such file or directory"), "cannot run ibstat"),
    (TimeoutError("ibstat did not finish within 5 s; killed"), "did not finish"),
    ((1, "", "ibpanic: [1] main: can't open UMAD port (No such device)\n"),
     "ibstat exited with status 1: ibpanic: [1] main: can't open UMAD port"),
    ((0, "", ""), "ibstat found no InfiniBand port: no output"),
])
def test_collector_down_with_the_reason(answer: RunResult | Exception, why: str) -> None:
    c = IbstatCollector(host="n1", runner=Runner(answer), clock=lambda: TS)
    batch = c.collect()
    assert not c.status.up and why in c.status.reason and batch.samples == 0


def test_parse_ibstat_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    own = tmp_path / "ibstat.txt"
    own.write_text(OWN)
    assert main(["parse", "ibstat", str(own), "--host", "n5"]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert lines[1].startswith(
        "ib_port,device=mlx5_1,host=n5,port=1 ib_state=1i,ib_phys_state=2i,ib_rate=10.0")
    assert f"{own}: 4 points read, 2 refused" in out.err and "ibpanic" in out.err
    ibstatus = tmp_path / "ibstatus.txt"  # another tool's output: nothing recognised
    ibstatus.write_text("Infiniband device 'mlx5_0' port 1 status:\n\tstate:\t\t 4: ACTIVE\n")
    assert main(["parse", "ibstat", str(ibstatus)]) == 1
    assert "not ibstat output" in capsys.readouterr().err


def test_sysfs_is_preferred_where_both_are_present(monkeypatch: pytest.MonkeyPatch) -> None:
    def present(*names: str) -> None:
        sources = Registry[registry.Source]("source")
        for name, source in registry.SOURCES.items():
            sources.register(dataclasses.replace(source, detect=lambda n=name: n in names))
        monkeypatch.setattr(registry, "SOURCES", sources)

    present("infiniband", "ibstat")
    assert registry.detected() == ["infiniband"]
    present("ibstat")
    assert registry.detected() == ["ibstat"]
    built = registry.get("ibstat").build("n1", {"binary": "/opt/ofed/bin/ibstat"})
    assert isinstance(built, IbstatCollector) and built.binary == "/opt/ofed/bin/ibstat"
