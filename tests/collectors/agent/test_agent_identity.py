"""The agent sends a GPU's identity when it is new or changed, and unchanged at most every
`identity_every_s`, decided before the round is spooled (collectors.agent.identity_gate)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from collectors.agent.identity_gate import IDENTITY_EVERY_S, IdentityGate
from collectors.agent.loop import Agent
from collectors.agent.push import _as_arrow
from collectors.agent.spool import Spool
from collectors.arrow_batch import Decoder
from collectors.base import CollectorStatus
from collectors.frames import Batch
from collectors.identity import GpuIdentity
from collectors.schema import SchemaMapper

T = 1_750_000_000


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Source:
    """A collector whose rounds say a temperature and what `said` holds of gpu0's identity
    (as gpu_info points, read by the agent's own mapper)."""

    def __init__(self, name: str, **said: str) -> None:
        self.name, self.said, self.k = name, said, 0
        self.status = CollectorStatus()
        self.mapper = SchemaMapper()

    def collect(self) -> Batch:
        ns = (T + 5 * self.k) * 10**9
        self.k += 1
        fields = ",".join(f'{k}="{v}"' for k, v in self.said.items())
        lines = f"gpu,host=n1,gpu=0 gpu_temp=40 {ns}\n"
        if fields:
            lines += f"gpu_info,host=n1,gpu=0 {fields} {ns}\n"
        b = self.mapper.parse(lines)
        assert not b.rejected, b.rejected
        return b


def _spool(tmp_path: Path) -> Spool:
    return Spool(tmp_path / "spool")


def _identity_lines(agent: Agent) -> list[str]:
    return [ln for ln in agent.lines() if ln.startswith("gpu_info,")]


def test_new_then_quiet_then_again_after_the_interval_on_a_fake_clock(tmp_path: Path) -> None:
    clock = Clock()
    src = Source("nvml", uuid="GPU-a", serial="S1", model="Tesla T4")
    agent = Agent([src], _spool(tmp_path), None, clock=clock)
    first = _identity_lines(agent)
    assert len(first) == 1 and 'serial="S1"' in first[0] and 'uuid="GPU-a"' in first[0]
    for _ in range(10):  # 5-s rounds: nothing new to say
        clock.t += 5
        assert _identity_lines(agent) == []
    clock.t = 100.0 + IDENTITY_EVERY_S - 0.5
    assert _identity_lines(agent) == []
    clock.t = 100.0 + IDENTITY_EVERY_S  # a restarted service relearns it
    assert len(_identity_lines(agent)) == 1
    clock.t += 5
    assert _identity_lines(agent) == []


def test_a_change_goes_at_once_and_a_value_not_said_is_no_change(tmp_path: Path) -> None:
    clock = Clock()
    src = Source("nvml", uuid="GPU-a", serial="S1")
    agent = Agent([src], _spool(tmp_path), None, clock=clock)
    assert len(_identity_lines(agent)) == 1
    clock.t += 5
    src.said = {"uuid": "GPU-a"}  # the serial not read this round: nothing changed
    assert _identity_lines(agent) == []
    clock.t += 5
    src.said = {"uuid": "GPU-b", "serial": "S2"}  # a swapped board
    got = _identity_lines(agent)
    assert len(got) == 1 and 'serial="S2"' in got[0] and 'uuid="GPU-b"' in got[0]
    clock.t += 5
    src.said = {"uuid": "GPU-b", "serial": "S2", "driver": "550.54.15"}  # a new field
    assert len(_identity_lines(agent)) == 1
    clock.t += 5
    assert _identity_lines(agent) == []


def test_sources_saying_parts_of_one_identity_are_joined_and_do_not_alternate(tmp_path: Path
                                                                             ) -> None:
    clock = Clock()
    nvml = Source("nvml", uuid="GPU-a", serial="S1")
    dcgm = Source("dcgm-exporter", uuid="GPU-a", model="NVIDIA A100-SXM4-80GB")
    agent = Agent([nvml, dcgm], _spool(tmp_path), None, clock=clock)
    got = _identity_lines(agent)
    assert len(got) == 1  # one point of the joined identity
    assert all(f in got[0] for f in ('uuid="GPU-a"', 'serial="S1"', "A100"))
    for _ in range(5):
        clock.t += 5
        assert _identity_lines(agent) == []


def test_every_0_sends_each_round_and_a_negative_interval_is_refused(tmp_path: Path) -> None:
    clock = Clock()
    agent = Agent([Source("nvml", uuid="GPU-a")], _spool(tmp_path), None, clock=clock,
                  identity_every_s=0)
    assert [len(_identity_lines(agent)) for _ in range(3)] == [1, 1, 1]
    with pytest.raises(ValueError):
        IdentityGate(-1)


def test_the_filter_is_before_the_spool_and_the_arrow_segment_carries_it(tmp_path: Path
                                                                         ) -> None:
    clock = Clock()
    spool = Spool(tmp_path / "spool")
    agent = Agent([Source("nvml", uuid="GPU-a", serial="S1")], spool, None, clock=clock)
    for _ in range(3):
        agent.collect_round()
        clock.t += 5
    segments = []
    while (seg := spool.oldest()) is not None:
        segments.append(seg[1])
        spool.remove(seg[0])
    texts = [gzip.decompress(s).decode() for s in segments]
    assert [t.count("gpu_info,") for t in texts] == [1, 0, 0]
    assert all("gpu_temp=40" in t for t in texts)  # the samples go every round
    # The segment as the service reads it (Arrow, converted when it is sent).
    arrow = _as_arrow(segments[0])
    assert arrow is not None
    got = Decoder().decode(gzip.decompress(arrow)).batch.identity
    assert got == {"n1:gpu0": GpuIdentity(uuid="GPU-a", serial="S1")}
    assert got["n1:gpu0"].at == T


def test_the_gate_remembers_a_bounded_number_of_gpus() -> None:
    from collectors.agent import identity_gate

    clock = Clock()
    gate = IdentityGate(60, clock)
    ids = {f"n{i}:gpu0": GpuIdentity(uuid=f"GPU-{i}") for i in range(10)}
    assert gate.take(ids) == ids
    assert gate.take(ids) == {}
    old = identity_gate.MAX_GPUS
    identity_gate.MAX_GPUS = 10
    try:  # past the bound it forgets, and each forgotten GPU goes once more
        assert list(gate.take({"x:gpu0": GpuIdentity(uuid="GPU-x")})) == ["x:gpu0"]
        assert gate.take(ids) == ids
    finally:
        identity_gate.MAX_GPUS = old
