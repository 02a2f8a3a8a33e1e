"""Points onto the catalog: our schema, Telegraf's, rejections, merging and entity tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity
from collectors.schema import MEASUREMENTS, SchemaMapper, batch_to_lines

T0 = 1_700_000_000
NS = 10**9


def col(scope: Scope, name: str) -> int:
    return CATALOG.column(scope, name)


def cell(batch: Batch, entity: Entity, metric: str, ts: float | None = None) -> float:
    frame = batch.frames[entity.scope]
    slot = frame.entities.index(entity)
    mask = frame.rows == slot
    if ts is not None:
        mask &= frame.ts == ts
    [row] = np.flatnonzero(mask)
    return float(frame.values[row, col(entity.scope, metric)])


def test_our_schema_fills_one_frame_per_scope_and_events() -> None:
    text = f"""\
gpu,host=n001,gpu=3 gpu_temp=45.5,ecc_sbe_volatile=3i,throttle_thermal=1i {T0 * NS}
nvlink,host=n001,gpu=3,link=7 nvlink_crc_flit=12i,nvlink_state=1i {T0 * NS}
ib_port,host=n001,device=mlx5_0,port=1 ib_symbol_error=2i,ib_rate=400,ib_state=4i {T0 * NS}
xid,host=n001,gpu=3 code=79i {T0 * NS + 500_000_000}
"""
    batch = SchemaMapper().parse(text)
    assert batch.rejected == []
    assert set(batch.frames) == {Scope.GPU, Scope.NVLINK, Scope.IB_PORT}
    gpu = Entity.gpu("n001", 3)
    assert cell(batch, gpu, "gpu_temp") == 45.5
    assert cell(batch, gpu, "ecc_sbe_volatile") == 3.0
    assert cell(batch, gpu, "throttle_thermal") == 1.0
    assert math.isnan(cell(batch, gpu, "mem_temp"))  # not reported is NaN, never 0
    assert cell(batch, Entity.nvlink("n001", 3, 7), "nvlink_crc_flit") == 12.0
    ib = Entity.ib_port("n001", "mlx5_0", 1)
    assert cell(batch, ib, "ib_rate") == 400.0
    assert batch.frames[Scope.IB_PORT].entities[0].key == "n001:mlx5_0:1"
    assert batch.frames[Scope.GPU].ts.tolist() == [float(T0)]
    ev = batch.events
    assert (ev.keys, ev.ts, ev.metrics, ev.values) == (
        ["n001:gpu3"], [T0 + 0.5], ["xid"], [79.0])
    assert batch.samples == 3 + 2 + 3 + 1


def test_points_of_one_entity_and_time_merge_into_one_row() -> None:
    text = f"""\
gpu,host=n1,gpu=0 gpu_temp=40 {T0 * NS}
gpu,host=n1,gpu=0 mem_temp=50,gpu_temp=41 {T0 * NS}
gpu,host=n1,gpu=0 gpu_temp=42 {(T0 + 5) * NS}
nvidia_smi,host=n1,index=0 power_draw=300.5 {T0 * NS}
"""
    batch = SchemaMapper().parse(text)
    frame = batch.frames[Scope.GPU]
    assert len(frame) == 2 and frame.ts.tolist() == [T0, T0 + 5]
    gpu = Entity.gpu("n1", 0)
    assert cell(batch, gpu, "gpu_temp", T0) == 41.0  # a cell set twice keeps the last value
    assert cell(batch, gpu, "mem_temp", T0) == 50.0
    assert cell(batch, gpu, "power_draw", T0) == 300.5  # Telegraf's line joins the same row
    assert cell(batch, gpu, "gpu_temp", T0 + 5) == 42.0


def test_rows_come_out_in_time_then_slot_order() -> None:
    text = "\n".join(f"gpu,host=n1,gpu={g} gpu_temp=1 {(T0 + t) * NS}"
                     for t in (10, 0, 5) for g in (1, 0))
    frame = SchemaMapper().parse(text).frames[Scope.GPU]
    assert frame.ts.tolist() == [T0, T0, T0 + 5, T0 + 5, T0 + 10, T0 + 10]
    assert [frame.entities[r].unit for r in frame.rows] == ["1", "0"] * 3  # slot order: 1 then 0


def test_telegraf_nvidia_smi_fields_map_to_catalog_metrics() -> None:
    # Tags and fields as Telegraf's nvidia_smi input writes them (schema v12/v13).
    text = (
        "nvidia_smi,arch=Hopper,compute_mode=Default,host=dgx07,index=5,"
        "name=NVIDIA\\ H100\\ 80GB\\ HBM3,pstate=P0,uuid=GPU-1a2b "
        "temperature_gpu=61i,temperature_memory=70i,power_draw=512.25,utilization_gpu=99i,"
        "clocks_current_sm=1980i,ecc_errors_volatile_dram_correctable=4i,"
        'remapped_rows_pending="No",remapped_rows_failure="Yes",retired_pages_pending="No",'
        "clocks_event_reasons_counters_hw_therm_slowdown=1250000i,"
        "remapped_rows_correctable=2i "
        f"{T0 * NS}"
    )
    mapper = SchemaMapper(strict=False)
    batch = mapper.parse(text)
    assert batch.rejected == []
    gpu = Entity.gpu("dgx07", 5)
    expected = {"gpu_temp": 61, "mem_temp": 70, "power_draw": 512.25, "gpu_util": 99,
                "sm_clock": 1980, "ecc_sbe_volatile": 4, "remapped_rows_pending": 0,
                "remapped_rows_failure": 1, "retired_pages_pending": 0,
                "remapped_rows_correctable": 2}
    assert {m: cell(batch, gpu, m) for m in expected} == expected
    # Time spent throttled since the driver loaded is not the throttle state: ignored, and
    # counted as such.
    assert math.isnan(cell(batch, gpu, "throttle_thermal"))
    assert mapper.take_ignored().counts == {
        ("nvidia_smi", "clocks_event_reasons_counters_hw_therm_slowdown"): 1}


def test_every_telegraf_name_in_the_catalog_is_understood() -> None:
    for metric in CATALOG:
        if metric.telegraf:
            meas, name = metric.telegraf.split(".")
            spec = MEASUREMENTS[meas]
            assert CATALOG.columns(spec.scope)[spec.fields[name]] is metric


def test_telegraf_infiniband() -> None:
    text = (f"infiniband,device=mlx5_4,host=dgx07,port=1 symbol_error=3i,link_downed=1i,"
            f"port_rcv_data=123456789012i,port_xmit_data=5i {T0 * NS}")
    batch = SchemaMapper().parse(text)
    assert batch.rejected == []
    ib = Entity.ib_port("dgx07", "mlx5_4", 1)
    assert cell(batch, ib, "ib_symbol_error") == 3.0
    assert cell(batch, ib, "ib_link_downed") == 1.0
    assert cell(batch, ib, "ib_port_rcv_data") == 123456789012.0


def test_unknown_fields_are_rejected_and_the_rest_of_the_line_kept() -> None:
    text = (f"gpu,host=n1,gpu=0 gpu_temp=40,gpu_tmp=41 {T0 * NS}\n"
            f'nvidia_smi,host=n1,index=1 temperature_gpu=50i,fan_speed=30i,cuda_version="12.2",'
            f'serial="123" {T0 * NS}')
    batch = SchemaMapper().parse(text)
    assert [str(r) for r in batch.rejected] == [
        "line 1: unknown field for measurement 'gpu': gpu_tmp (n1:gpu0, gpu_tmp)",
        "line 2: unknown fields for measurement 'nvidia_smi': fan_speed, cuda_version (n1:gpu1)",
    ]
    assert batch.identity["n1:gpu1"].serial == "123"  # an identity field, not an unknown one
    assert cell(batch, Entity.gpu("n1", 0), "gpu_temp") == 40.0
    assert cell(batch, Entity.gpu("n1", 1), "gpu_temp") == 50.0
    lenient = SchemaMapper(strict=False).parse(text)
    assert lenient.rejected == []
    assert lenient.samples == 2


def test_unknown_measurements_are_rejected_with_their_line() -> None:
    text = (f"cpu,host=n1 usage_idle=99 {T0 * NS}\n"
            f"gpu,host=n1,gpu=0 gpu_temp=40 {T0 * NS}\n"
            f"mem,host=n1 used=5i {T0 * NS}")
    batch = SchemaMapper().parse(text)
    assert [r.line for r in batch.rejected] == [1, 3]
    assert batch.rejected[0].reason.startswith("unknown measurement 'cpu' (known: gpu,")
    assert batch.samples == 1
    assert SchemaMapper(strict=False).parse(text).rejected == []


def test_negative_counters_are_rejected_but_gauges_may_be_negative() -> None:
    text = (f"gpu,host=n1,gpu=0 ecc_sbe_volatile=-3i,gpu_temp_margin=-2.5,gpu_temp=40 {T0 * NS}\n"
            f"infiniband,host=n1,device=mlx5_0,port=1 symbol_error=-1i {T0 * NS}")
    batch = SchemaMapper().parse(text)
    assert [str(r) for r in batch.rejected] == [
        "line 1: counter ecc_sbe_volatile is negative: -3 (n1:gpu0, ecc_sbe_volatile)",
        "line 2: counter symbol_error is negative: -1 (n1:mlx5_0:1, symbol_error)",
    ]
    gpu = Entity.gpu("n1", 0)
    assert cell(batch, gpu, "gpu_temp_margin") == -2.5
    assert math.isnan(cell(batch, gpu, "ecc_sbe_volatile"))
    assert Scope.IB_PORT not in batch.frames  # its only field was refused


@pytest.mark.parametrize(("line", "reason"), [
    ("gpu,host=n1,gpu=0 gpu_temp=40", "missing timestamp"),
    (f"gpu,host=n1 gpu_temp=40 {T0 * NS}", "missing tag 'gpu'"),
    (f"gpu,gpu=0 gpu_temp=40 {T0 * NS}", "missing tag 'host'"),
    (f"gpu,host=n1,gpu=x gpu_temp=40 {T0 * NS}", "tag 'gpu': value 'x' is not a number"),
    (f"nvlink,host=n1,gpu=0,link=-1 nvlink_replay=1i {T0 * NS}", "tag 'link': value '-1'"),
    (f"gpu,host=a:b,gpu=0 gpu_temp=40 {T0 * NS}", "tag 'host': value 'a:b' holds characters"),
    (f"gpu,host=n1,gpu=0 remapped_rows_pending=0.5 {T0 * NS}",
     "field value 0.5 is not a whole number (the catalog stores remapped_rows_pending as an "
     "integer)"),
    (f"gpu,host=n1,gpu=0 ecc_sbe_volatile=2.5 {T0 * NS}", "not a whole number"),
    (f'gpu,host=n1,gpu=0 gpu_temp="hot" {T0 * NS}', "field value 'hot' is not a number"),
    (f'gpu,host=n1,gpu=0 remapped_rows_pending="maybe" {T0 * NS}', "'maybe' is not a number"),
    (f"xid,host=n1,gpu=0 code=-79i {T0 * NS}", "xid code must be a non-negative integer"),
    (f"xid,host=n1,gpu=0 code=7.5 {T0 * NS}", "xid code must be a non-negative integer"),
    (f"xid,host=n1,gpu=0 text=\"x\" {T0 * NS}", "xid point has no 'code' field"),
])
def test_bad_points_are_rejected_with_a_reason(line: str, reason: str) -> None:
    good = f"gpu,host=n9,gpu=1 gpu_temp=30 {T0 * NS}"
    batch = SchemaMapper().parse(f"{good}\n{line}\n{good}")
    assert any(reason in str(r) and r.line == 2 for r in batch.rejected), batch.rejected
    assert cell(batch, Entity.gpu("n9", 1), "gpu_temp") == 30.0


def test_parse_rejections_and_schema_rejections_share_the_batch() -> None:
    text = f"gpu,host=n1,gpu=0 gpu_temp=NaN {T0 * NS}\ngpu,host=n1,gpu=0 ecc_dbe_volatile=-1i 5"
    batch = SchemaMapper().parse(text)
    assert [r.line for r in batch.rejected] == [1, 2]


def test_entity_tables_are_reused_until_a_new_entity_appears() -> None:
    mapper = SchemaMapper()

    def round_(t: int, gpus: range) -> Batch:
        return mapper.parse("\n".join(f"gpu,host=n1,gpu={g} gpu_temp=1 {t * NS}" for g in gpus))

    first = round_(T0, range(4)).frames[Scope.GPU].entities
    assert round_(T0 + 5, range(4)).frames[Scope.GPU].entities is first
    assert round_(T0 + 10, range(2)).frames[Scope.GPU].entities is first  # a subset reuses
    grown = round_(T0 + 15, range(5)).frames[Scope.GPU]
    assert grown.entities is not first
    assert grown.entities.entities[:4] == first.entities  # old slots keep their place
    assert len(grown.entities) == 5
    assert round_(T0 + 20, range(5)).frames[Scope.GPU].entities is grown.entities
    assert mapper.table(Scope.GPU) is grown.entities
    assert mapper.table(Scope.NVLINK) is None


def test_batch_to_lines_writes_our_schema_and_round_trips() -> None:
    text = f"""\
nvidia_smi,host=n1,index=0 temperature_gpu=45i,power_draw=300.5 {T0 * NS}
gpu,host=n1,gpu=0 ecc_sbe_volatile=7i,remapped_rows_pending=1i {T0 * NS}
nvlink,host=n1,gpu=0,link=2 nvlink_replay=3i {(T0 + 1) * NS}
ib_port,host=n1,device=mlx5_0,port=1 ib_port_xmit_data=12345678901234i {T0 * NS}
xid,host=n1,gpu=0 code=48i {T0 * NS + 250_000_000}
"""
    batch = SchemaMapper().parse(text)
    lines = list(batch_to_lines(batch))
    assert lines == [
        f"gpu,gpu=0,host=n1 gpu_temp=45.0,power_draw=300.5,ecc_sbe_volatile=7i,"
        f"remapped_rows_pending=1i {T0 * NS}",
        f"ib_port,device=mlx5_0,host=n1,port=1 ib_port_xmit_data=12345678901234i {T0 * NS}",
        f"xid,gpu=0,host=n1 code=48i {T0 * NS + 250_000_000}",
        f"nvlink,gpu=0,host=n1,link=2 nvlink_replay=3i {(T0 + 1) * NS}",
    ]
    again = SchemaMapper().parse(lines)
    assert again.rejected == []
    for scope, frame in batch.frames.items():
        other = again.frames[scope]
        assert [e.key for e in other.entities.entities] == [
            e.key for e in frame.entities.entities]
        np.testing.assert_array_equal(other.values, frame.values)
        np.testing.assert_array_equal(other.ts, frame.ts)
    assert again.events == batch.events


def test_batch_to_lines_writes_the_catalog_types_and_skips_empty_rows() -> None:
    mapper = SchemaMapper()
    batch = mapper.parse(f"gpu,host=n1,gpu=0 gpu_temp=40 {T0 * NS}")
    frame = batch.frames[Scope.GPU]
    frame.values[0, :] = np.nan
    frame.values[0, col(Scope.GPU, "ecc_sbe_volatile")] = 3.0  # as nvidia-smi's text gives it
    frame.values[0, col(Scope.GPU, "gpu_temp")] = 41  # as dcgm-exporter's integers give it
    # A state with no integer form would be a type InfluxDB refuses: left out, not written.
    frame.values[0, col(Scope.GPU, "retired_pages_pending")] = 0.5
    assert list(batch_to_lines(batch)) == [
        f"gpu,gpu=0,host=n1 gpu_temp=41.0,ecc_sbe_volatile=3i {T0 * NS}"]
    frame.values[0, :] = np.nan
    assert list(batch_to_lines(batch)) == []
