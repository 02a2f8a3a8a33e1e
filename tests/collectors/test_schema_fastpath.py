"""SchemaMapper.parse's columnar fast path (collectors.schema_fastpath) against the reference path
(lineprotocol.parse, then SchemaMapper.to_batch): on every body, both must give the same frames,
events, rejections and collector reports, and the fast path must actually be taken."""

from __future__ import annotations

import random

import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Batch
from collectors.lineprotocol import parse
from collectors.schema import SchemaMapper

T0 = 1_750_000_000 * 10**9
STEP = 5 * 10**9


def reference(mapper: SchemaMapper, body: str | bytes, **kw: object) -> Batch:
    points, rejected = parse(body, **kw)  # type: ignore[arg-type]
    return mapper.to_batch(points, rejected)


def assert_same(fast: Batch, ref: Batch) -> None:
    assert fast.rejected == ref.rejected
    assert fast.frames.keys() == ref.frames.keys()
    for scope, f in fast.frames.items():
        r = ref.frames[scope]
        assert [e.key for e in f.entities] == [e.key for e in r.entities]
        assert f.rows.tolist() == r.rows.tolist(), scope
        assert f.ts.tolist() == r.ts.tolist(), scope
        assert f.values.dtype == r.values.dtype and f.rows.dtype == r.rows.dtype
        assert np.array_equal(f.values, r.values, equal_nan=True), scope
        # Same bits too: -0.0 and 0.0 compare equal but are different samples to store.
        assert (np.signbit(f.values) == np.signbit(r.values)).all(), scope
    e, g = fast.events, ref.events
    assert (e.keys, e.ts, e.metrics, e.values) == (g.keys, g.ts, g.metrics, g.values)


def run_both(bodies: list[str], *, strict: bool = True, **kw: object) -> int:
    """Feed the same bodies to a fast and a reference mapper; returns lines the fast path
    took."""
    fast, ref = SchemaMapper(strict=strict), SchemaMapper(strict=strict)
    for body in bodies:
        assert_same(fast.parse(body, **kw), reference(ref, body, **kw))  # type: ignore[arg-type]
        assert fast.take_reports() == ref.take_reports()
    return fast.fast_lines


def gpu(host: str, g: int, ts: int, temp: str = "55.5", sbe: str = "3i") -> str:
    return f"gpu,gpu={g},host={host} gpu_temp={temp},ecc_sbe_volatile={sbe},power_draw=300.25 {ts}"


def nvlink(host: str, g: int, link: int, ts: int, flit: str = "7i") -> str:
    return f"nvlink,gpu={g},host={host},link={link} nvlink_crc_flit={flit},nvlink_state=1i {ts}"


def fleet(ts: int, hosts: int = 3) -> list[str]:
    out = []
    for h in range(hosts):
        for g in range(2):
            out.append(gpu(f"n{h}", g, ts))
            out += [nvlink(f"n{h}", g, lk, ts) for lk in range(3)]
        out.append(f"ib_port,device=mlx5_0,host=n{h},port=1 ib_symbol_error=0i,ib_rate=400.0 {ts}")
    return out


def test_steady_rounds_take_the_fast_path_and_agree() -> None:
    bodies = ["\n".join(fleet(T0 + k * STEP)) + "\n" for k in range(4)]
    taken = run_both(bodies)
    assert taken == 3 * len(fleet(T0))  # every line of every round after the first


# Values that must be judged exactly as lineprotocol judges them, in every field kind.
FLOATS = ["1", "-1", "1.5", ".5", "5.", "-0.0", "-0", "1e5", "1E-5", "1e+5", "1e999", "NaN",
          "inf", "-inf", "+1", "1_0", "١٢", "abc", "1.2.3", "--1", "-", ".", "", "0x10", "1e",
          "1=2", "1\t", "12i", "7u", "t", "false", '"s"', "4e-324", "0.30000000000000004"]
INTS = ["0i", "12i", "-12i", "-0i", "007i", "999999999999999999i", "9223372036854775807i",
        "9223372036854775808i", "-9223372036854775808i", "-i", "i", "1.5i", "1e5i", "+1i",
        "1_0i", "1ii", "12", "12u", "-1i", "٣i", "1=2i", "t", '"x"']
UINTS = ["0u", "12u", "-0u", "-1u", "18446744073709551615u", "18446744073709551616u",
         "9223372036854775807u", "u", "1.5u", "12i", "12"]


def mutate(line: str, rng: random.Random) -> str:
    """A copy of `line` with one thing changed, or the line itself."""
    key, fields, ts = line.split(" ")
    items = fields.split(",")
    roll = rng.random()
    j = rng.randrange(len(items))
    name, _, value = items[j].partition("=")
    if roll < 0.35:
        pool = INTS if value.endswith("i") else UINTS if value.endswith("u") else FLOATS
        items[j] = f"{name}={rng.choice(pool)}"
    elif roll < 0.40:
        rng.shuffle(items)  # same names, another order: valid, but not the known layout
    elif roll < 0.45:
        items[j] = f"{name}x={value}"  # a name the catalog does not have
    elif roll < 0.48:
        items.append(items[j])  # duplicate field
    elif roll < 0.50:
        del items[j]
    elif roll < 0.53:
        items[j] = name  # no '='
    elif roll < 0.56:
        ts = rng.choice(["", "x", "-5", "1.5", "99999999999999999999", ts + "0", "0" + ts])
    elif roll < 0.58:
        return f"{key} {','.join(items)}"  # no timestamp
    elif roll < 0.60:
        return f" {line}  "
    elif roll < 0.62:
        key = key.replace("host=", "host=a\\ b")  # escaped space in a tag
    elif roll < 0.64:
        items.append('note="x y, z=1"')  # a string field
    elif roll < 0.66:
        items.append(rng.choice(["ok=t", "ok=FALSE"]))  # booleans
    elif roll < 0.68:
        key = key.replace("gpu=", "gpu=x")
    elif roll < 0.70:
        return rng.choice(["", "# comment", "   ", "x", "xid,host=n0,gpu=1 code=79i " + ts])
    return f"{key} {','.join(items)} {ts}"


@pytest.mark.parametrize("seed", range(12))
def test_mutated_rounds_agree_with_the_reference_path(seed: int) -> None:
    rng = random.Random(seed)
    bodies = []
    for k in range(6):
        lines = fleet(T0 + k * STEP, hosts=4)
        lines = [mutate(ln, rng) if rng.random() < 0.15 else ln for ln in lines]
        if rng.random() < 0.3:
            lines.append(lines[rng.randrange(len(lines))])  # an entity twice at one time
        bodies.append("\n".join(lines) + rng.choice(["", "\n"]))
    taken = run_both(bodies)
    assert taken > 0
    assert run_both(bodies, strict=False) > 0


def test_mixed_field_kinds_and_telegraf_layouts_agree() -> None:
    def body(ts: int, u: str = "5u") -> str:
        return "\n".join([
            f"gpu,host=n1,gpu=0 gpu_temp=50.5,ecc_sbe_volatile=3i,pcie_replay={u} {ts}",
            f"nvidia_smi,host=n1,index=1,uuid=GPU-1 temperature_gpu=61i,power_draw=512.25,"
            f"utilization_gpu=99i {ts}",
            f"infiniband,device=mlx5_4,host=n1,port=1 symbol_error=3i,port_rcv_data=12i {ts}",
            f"gpuhealth_collector,collector=nvml,host=n1 up=1i,scrape_seconds=0.01,samples=3i,"
            f'error="" {ts}',
        ])
    bodies = [body(T0), body(T0 + STEP), body(T0 + 2 * STEP, "-1u"),
              body(T0 + 3 * STEP, "18446744073709551615u"), body(T0 + 4 * STEP)]
    # The status line never takes the fast path; nor do unsigned values numpy cannot hold.
    assert run_both(bodies) == 3 + 2 + 2 + 3


def test_two_sources_with_one_layout_size_for_one_entity_agree() -> None:
    # nvidia-smi and dcgm-exporter both report GPU 0, with different fields of equal count,
    # sometimes at the same time (one row, the later line's cell wins).
    def body(ts: int, same_time: bool) -> str:
        return "\n".join([
            f"gpu,host=n1,gpu=0 gpu_temp=50,power_draw=300 {ts}",
            f"gpu,host=n1,gpu=0 sm_clock=1980,gpu_temp=51 {ts if same_time else ts + 1}",
            f"gpu,host=n1,gpu=1 gpu_temp=52,power_draw=301 {ts}",
        ])
    bodies = [body(T0 + k * STEP, k % 2 == 0) for k in range(5)]
    assert run_both(bodies) == 4 * 3


def test_precision_crlf_and_line_limits_agree() -> None:
    secs = 1_750_000_000
    bodies = ["\r\n".join(f"gpu,host=n1,gpu={g} gpu_temp={40 + g} {secs + 5 * k}"
                          for g in range(6)) for k in range(3)]
    assert run_both(bodies, precision="s") == 12
    assert run_both(bodies, precision="s", max_lines=4) == 8
    assert run_both([b.encode() for b in bodies], precision="ms", max_bytes=10_000) == 12


def test_invalid_utf8_and_oversized_bodies_take_the_reference_path() -> None:
    good = "\n".join(fleet(T0)).encode()
    bad = good + b"\ngpu,host=\xff,gpu=0 gpu_temp=1 1"
    big = good + b"\n" + good
    again = good.replace(b"7i", b"8i")
    assert run_both([good, bad, big, again], max_bytes=len(good) + 10) == len(fleet(T0))


def test_fast_lines_are_counted_per_mapper() -> None:
    mapper = SchemaMapper()
    body = "\n".join(fleet(T0))
    mapper.parse(body)
    assert mapper.fast_lines == 0
    mapper.parse(body.replace(str(T0), str(T0 + STEP)))
    assert mapper.fast_lines == len(fleet(T0))
    assert Scope.NVLINK in mapper.parse(body).frames


def test_layout_lookalikes_and_sub_microsecond_stamps_agree() -> None:
    def body(ts: int, odd: list[str]) -> str:
        good = [f"gpu,host=n1,gpu={g} gpu_temp=50,power_draw=300 {ts}" for g in range(4)]
        return "\n".join(odd + good)
    bodies = [body(T0, []), body(T0 + STEP, [
        # The name inside a value of one line and missing from the next: the name count of
        # the field still adds up, the positions do not.
        f"gpu,host=n1,gpu=0 gpu_temp=gpu_temp=5,power_draw=1 {T0 + STEP - 2}",
        f"gpu,host=n1,gpu=1 5,power_draw=1 {T0 + STEP - 2}",
    ]), body(T0 + 2 * STEP, [
        f"gpu,host=n1,gpu=2 power_draw=1,gpu_temp=2 {T0 + STEP - 2}",  # valid, another order
        # One GPU twice within a microsecond, later stamp first: float seconds tie, and rows
        # keep the order they first appeared in.
        f"gpu,host=n1,gpu=3 gpu_temp=1,power_draw=1 {T0 + 2 * STEP - 9}",
        f"gpu,host=n1,gpu=3 gpu_temp=2,power_draw=2 {T0 + 2 * STEP - 10}",
    ])]
    assert run_both(bodies) == 4 + 6


def test_values_longer_than_line_protocol_reads_take_the_reference_path() -> None:
    """numpy would read a 65-character number; line protocol refuses it, naming the line.
    First, last, and inner tokens of a field's joined values are each checked."""
    long_f, long_i = "1" * 60 + ".0000", "1" * 64 + "i"  # 65 characters
    rounds = [fleet(T0 + k * STEP) for k in range(4)]
    rounds[1][0] = gpu("n0", 0, T0 + STEP, temp=long_f)
    rounds[2][-1] = (f"ib_port,device=mlx5_0,host=n2,port=1 ib_symbol_error={long_i},"
                     f"ib_rate=400.0 {T0 + 2 * STEP}")
    rounds[3][0] = gpu("n0", 0, T0 + 3 * STEP, temp="1" * 59 + ".0000")  # 64: fast, kept
    bodies = ["\n".join(r) for r in rounds]
    assert run_both(bodies) == 3 * len(rounds[0]) - 2
    assert len(SchemaMapper().parse(bodies[1]).rejected) == 1
