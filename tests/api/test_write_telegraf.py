"""Telegraf pushing to /write unchanged: a whole flush of a GPU node (nvidia_smi in the shapes of
Telegraf's nvidia-smi schema v12 and v13 parsers, nvidia_smi_mig, nvidia_smi_process,
infiniband with and without RDMA counters, cpu, mem) through the real app, answered as InfluxDB
answers: 204, what the catalog tracks stored, the rest ignored and counted, a resent or
step-sharing point overwriting.

The lines are our own, written in the shape Telegraf's parsers give them (field names and types
from plugins/inputs/nvidia_smi/schema_v12 and schema_v13 parser.go, plugins/inputs/infiniband):
tags sorted, strings quoted, integers with `i`, power as floats, nanosecond timestamps.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from collectors.catalog import CATALOG, Scope
from collectors.frames import Entity
from service.api.app import create_app
from service.api.state import Running
from service.history.samples_read import samples
from service.history.sinks import SQLiteSink
from service.settings import Settings
from tests.support.fleet import T0, ManualClock

S = 10**9
NS = int(T0) * S

# Schema v12 (nvsmi_device_v12.dtd, drivers 525-570): no ECC counters, no memory temperature,
# no thresholds; pending flags as "No"/"Yes" strings.
V12 = ("nvidia_smi,arch=Ampere,compute_mode=Default,host=gpu-a01,index={gpu},"
       "name=NVIDIA\\ A100-SXM4-80GB,pstate=P0,uuid=GPU-3e1a6b52-0c41-4d0e-9b7f-2a5c00{gpu:02d} "
       "clocks_current_graphics=1410i,clocks_current_memory=1593i,clocks_current_sm={sm}i,"
       "clocks_current_video=1275i,cuda_version=\"12.2\",current_ecc=\"Enabled\","
       "display_active=\"Disabled\",display_mode=\"Disabled\",driver_version=\"535.54.03\","
       "encoder_stats_average_fps=0i,encoder_stats_average_latency=0i,"
       "encoder_stats_session_count=0i,fbc_stats_average_fps=0i,fbc_stats_average_latency=0i,"
       "fbc_stats_session_count=0i,memory_free=80614i,memory_reserved=566i,memory_total=81920i,"
       "memory_used=739i,pcie_link_gen_current=4i,pcie_link_width_current=16i,"
       "power_draw={power},remapped_rows_correctable={remap}i,remapped_rows_failure=\"No\","
       "remapped_rows_pending=\"{pending}\",remapped_rows_uncorrectable=0i,"
       "serial=\"1324021030{gpu:03d}\",temperature_gpu={temp}i,utilization_decoder=0i,"
       "utilization_encoder=0i,utilization_gpu=97i,utilization_jpeg=0i,utilization_memory=41i,"
       "utilization_ofa=0i,vbios_version=\"92.00.45.00.03\" {ts}")

# Schema v13 (nvsmi_device_v13.dtd, drivers 575 and later): adds ECC counters, memory
# temperature, thresholds, T.Limit and the clocks-event time counters.
V13 = ("nvidia_smi,arch=Hopper,compute_mode=Default,host=gpu-b01,index={gpu},"
       "name=NVIDIA\\ H100\\ 80GB\\ HBM3,pstate=P0,"
       "uuid=GPU-7c0d2f41-88b2-4a61-b0e4-91d3a1{gpu:02d} "
       "clocks_current_graphics=1980i,clocks_current_memory=2619i,clocks_current_sm=1980i,"
       "clocks_current_video=1545i,clocks_event_reasons_counters_hw_power_brake=0i,"
       "clocks_event_reasons_counters_hw_therm_slowdown=0i,"
       "clocks_event_reasons_counters_sw_power_cap=81250000i,"
       "clocks_event_reasons_counters_sw_therm_slowdown=0i,"
       "clocks_event_reasons_counters_sync_boost=0i,cuda_version=\"13.0\","
       "current_ecc=\"Enabled\",display_active=\"Disabled\",display_mode=\"Disabled\","
       "driver_version=\"580.65.06\",ecc_errors_aggregate_dram_correctable={sbe_agg}i,"
       "ecc_errors_aggregate_dram_uncorrectable=0i,ecc_errors_aggregate_sram_correctable=0i,"
       "ecc_errors_aggregate_sram_threshold_exceeded=\"No\","
       "ecc_errors_aggregate_sram_uncorrectable=0i,ecc_errors_volatile_dram_correctable={sbe}i,"
       "ecc_errors_volatile_dram_uncorrectable={dbe}i,ecc_errors_volatile_sram_correctable=0i,"
       "ecc_errors_volatile_sram_uncorrectable=0i,memory_free=80472i,memory_reserved=595i,"
       "memory_total=81559i,memory_used=492i,module_power_draw=0.0,pcie_link_gen_current=5i,"
       "pcie_link_width_current=16i,pcie_rx_util=1200i,pcie_tx_util=900i,power_draw={power},"
       "power_limit=700.0,remapped_rows_correctable=0i,remapped_rows_failure=\"No\","
       "remapped_rows_pending=\"No\",remapped_rows_uncorrectable=0i,"
       "retired_pages_pending=\"No\",serial=\"1654922007{gpu:03d}\",temperature_gpu={temp}i,"
       "temperature_gpu_tlimit=47i,temperature_max_gpu_threshold=92i,"
       "temperature_max_mem_threshold=95i,temperature_max_threshold=92i,"
       "temperature_memory={mtemp}i,temperature_slow_threshold=89i,utilization_decoder=0i,"
       "utilization_encoder=0i,utilization_gpu=100i,utilization_jpeg=0i,utilization_memory=63i,"
       "utilization_ofa=0i,vbios_version=\"96.00.99.00.01\" {ts}")

MIG = ("nvidia_smi_mig,arch=Hopper,compute_index=0,compute_mode=Default,gpu_index={gi},"
       "host=gpu-b01,index={mig},name=NVIDIA\\ H100\\ 80GB\\ HBM3,pstate=P0,"
       "uuid=GPU-7c0d2f41-88b2-4a61-b0e4-91d3a107 memory_bar1_free=4095i,"
       "memory_bar1_total=4096i,memory_bar1_used=1i,memory_fb_free=9728i,"
       "memory_fb_reserved=0i,memory_fb_total=9856i,memory_fb_used=128i,"
       "sram_uncorrectable=0i {ts}")
PROCESS = "nvidia_smi_process,host=gpu-b01,name=python3,type=C pid=48211i,used_memory=62310i {ts}"

IB = ("infiniband,device=mlx5_{dev},host=gpu-a01,port=1 VL15_dropped=0i,"
      "excessive_buffer_overrun_errors=0i,link_downed={downed}i,link_error_recovery=0i,"
      "local_link_integrity_errors=0i,multicast_rcv_packets=0i,multicast_xmit_packets=0i,"
      "port_rcv_constraint_errors=0i,port_rcv_data=237159415345822i,port_rcv_errors=0i,"
      "port_rcv_packets=801977655075i,port_rcv_remote_physical_errors=0i,"
      "port_rcv_switch_relay_errors=0i,port_xmit_constraint_errors=0i,"
      "port_xmit_data=238334949937759i,port_xmit_discards=0i,port_xmit_packets=803162651391i,"
      "port_xmit_wait=4294967295i,symbol_error={sym}i,unicast_rcv_packets=801977655075i,"
      "unicast_xmit_packets=803162651391i {ts}")
# `rdma = true`: hw_counters as a second point of the same series and time.
IB_RDMA = ("infiniband,device=mlx5_{dev},host=gpu-a01,port=1 duplicate_request=0i,"
           "implied_nak_seq_err=0i,lifespan=10i,local_ack_timeout_err=0i,out_of_buffer=0i,"
           "out_of_sequence=0i,packet_seq_err=0i,rnr_nak_retry_err=0i,rx_read_requests=6000i,"
           "rx_write_requests=19000i {ts}")

CPU = ("cpu,cpu=cpu-total,host={host} usage_guest=0,usage_guest_nice=0,usage_idle=97.5,"
       "usage_iowait=0.1,usage_irq=0,usage_nice=0,usage_softirq=0.1,usage_steal=0,"
       "usage_system=0.8,usage_user=1.5 {ts}")
MEM = ("mem,host={host} active=3402350592i,available=1946231504896i,available_percent=94.4,"
       "buffered=2301952i,cached=10486214656i,free=1934592376832i,total=2061584302080i,"
       "used=115352797184i,used_percent=5.6 {ts}")


def flush(ts: int, *, temp: int = 61, power: float = 402.25, sbe: int = 3, dbe: int = 0,
          sym: int = 0, pending: str = "No") -> str:
    """One flush of two nodes: gpu-a01 (v12 driver, IB) and gpu-b01 (v13 driver, MIG)."""
    lines = []
    for g in range(2):
        lines.append(V12.format(gpu=g, sm=1410, power=power, remap=g, pending=pending,
                                temp=temp + g, ts=ts))
        lines.append(V13.format(gpu=g, power=power + 100, sbe_agg=40 + sbe, sbe=sbe, dbe=dbe,
                                temp=temp + 5 + g, mtemp=temp + 12 + g, ts=ts))
    lines += [MIG.format(gi=gi, mig=m, ts=ts) for gi, m in ((1, 0), (2, 1))]
    lines.append(PROCESS.format(ts=ts))
    for dev in range(2):
        lines.append(IB.format(dev=dev, downed=dev, sym=sym, ts=ts))
        lines.append(IB_RDMA.format(dev=dev, ts=ts))
    lines += [CPU.format(host=h, ts=ts) for h in ("gpu-a01", "gpu-b01")]
    lines += [MEM.format(host=h, ts=ts) for h in ("gpu-a01", "gpu-b01")]
    return "\n".join(lines) + "\n"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0 + 1)


@pytest.fixture
def client(settings: Settings, clock: ManualClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings, clock=clock, schedule=False)) as c:
        yield c


def _running(client: TestClient) -> Running:
    st: Running = client.app.state.gpuhealth  # type: ignore[attr-defined]
    return st


def latest(client: TestClient, scope: Scope, key: str, metric: str) -> float:
    w = _running(client).pipeline.store[scope]
    slot = w.slot(Entity.parse(key))
    assert slot is not None, key
    return float(w.last_val[slot, w.col(metric)])


def step_value(client: TestClient, scope: Scope, key: str, metric: str) -> float:
    """What the window store holds for the newest step (a counter's increase over it)."""
    w = _running(client).pipeline.store[scope]
    slot = w.slot(Entity.parse(key))
    assert slot is not None, key
    return float(w.window(metric, 1)[slot, 0])


def ignored(client: TestClient) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("gpuhealth_ignored_fields_total{"):
            labels, value = line.rsplit(" ", 1)
            parts = dict(p.split("=", 1) for p in labels[labels.index("{") + 1:-1].split(","))
            out[(parts["measurement"].strip('"'), parts["field"].strip('"'))] = float(value)
    return out


def test_a_whole_telegraf_flush_is_accepted_stored_and_the_rest_counted(
        client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    body = flush(NS)
    caplog.set_level(logging.INFO, logger="service.runtime.metrics")
    r = client.post("/write", params={"db": "telegraf"}, content=body)
    assert r.status_code == 204, r.text
    # v12: what it carries reaches the catalog, strings included.
    a0 = "gpu-a01:gpu0"
    assert latest(client, Scope.GPU, a0, "gpu_temp") == 61
    assert latest(client, Scope.GPU, a0, "power_draw") == 402.25
    assert latest(client, Scope.GPU, a0, "sm_clock") == 1410
    assert latest(client, Scope.GPU, a0, "gpu_util") == 97
    assert latest(client, Scope.GPU, a0, "remapped_rows_pending") == 0
    assert latest(client, Scope.GPU, a0, "remapped_rows_failure") == 0
    assert latest(client, Scope.GPU, "gpu-a01:gpu1", "remapped_rows_correctable") == 1
    for missing in ("mem_temp", "ecc_dbe_volatile", "gpu_slowdown_temp"):
        assert math.isnan(latest(client, Scope.GPU, a0, missing)), missing  # not in v12
    # v13: ECC, memory temperature and thresholds too.
    b1 = "gpu-b01:gpu1"
    assert latest(client, Scope.GPU, b1, "gpu_temp") == 67
    assert latest(client, Scope.GPU, b1, "mem_temp") == 74
    assert latest(client, Scope.GPU, b1, "ecc_sbe_volatile") == 3
    assert latest(client, Scope.GPU, b1, "ecc_dbe_volatile") == 0
    assert latest(client, Scope.GPU, b1, "ecc_sbe_aggregate") == 43
    assert latest(client, Scope.GPU, b1, "gpu_slowdown_temp") == 89
    assert latest(client, Scope.GPU, b1, "gpu_shutdown_temp") == 92
    assert latest(client, Scope.GPU, b1, "mem_max_temp") == 95
    assert latest(client, Scope.GPU, b1, "gpu_temp_margin") == 47
    assert latest(client, Scope.GPU, b1, "retired_pages_pending") == 0
    # infiniband: counters of both of a port's points (counters/ and hw_counters/).
    assert latest(client, Scope.IB_PORT, "gpu-a01:mlx5_1:1", "ib_link_downed") == 1
    assert latest(client, Scope.IB_PORT, "gpu-a01:mlx5_0:1", "ib_port_xmit_data") == (
        238334949937759)
    # Nothing else became an entity: MIG instances, processes, cpu and mem are not GPUs.
    st = _running(client)
    assert len(st.pipeline.store[Scope.GPU].entities) == 4
    assert len(st.pipeline.store[Scope.IB_PORT].entities) == 2
    # What was not tracked is counted per name and logged once per name.
    counts = ignored(client)
    assert counts[("cpu", "usage_idle")] == 2
    assert counts[("mem", "used_percent")] == 2
    assert ("nvidia_smi", "driver_version") not in counts  # the GPU's identity, kept:
    board = st.pipeline.identities.current(b1)
    assert board is not None
    assert (board.uuid, board.driver) == ("GPU-7c0d2f41-88b2-4a61-b0e4-91d3a101", "580.65.06")
    assert counts[("nvidia_smi", "clocks_event_reasons_counters_hw_therm_slowdown")] == 2
    assert counts[("nvidia_smi_mig", "memory_fb_used")] == 2
    assert counts[("nvidia_smi_process", "pid")] == 1
    assert counts[("infiniband", "VL15_dropped")] == 2
    assert counts[("infiniband", "rx_read_requests")] == 2
    assert ("nvidia_smi", "temperature_gpu") not in counts
    logged = [r.getMessage() for r in caplog.records if "ignoring" in r.getMessage()]
    assert sum("cpu.usage_idle" in m for m in logged) == 1
    # The next flush: accepted again, counted again, logged no more.
    caplog.clear()
    r = client.post("/write", params={"db": "telegraf"}, content=flush(NS + 10 * S, sbe=5))
    assert r.status_code == 204, r.text
    assert ignored(client)[("cpu", "usage_idle")] == 4
    assert not [r for r in caplog.records if "ignoring" in r.getMessage()]
    assert step_value(client, Scope.GPU, b1, "ecc_sbe_volatile") == 2  # 3 -> 5


def test_the_v2_output_path_takes_the_same_flush(client: TestClient) -> None:
    r = client.post("/api/v2/write", params={"org": "ops", "bucket": "telegraf"},
                    content=flush(NS), headers={"Content-Type": "text/plain; charset=utf-8"})
    assert r.status_code == 204, r.text
    assert latest(client, Scope.GPU, "gpu-b01:gpu0", "mem_temp") == 73


def test_an_identical_resend_changes_nothing(client: TestClient) -> None:
    assert client.post("/write", content=flush(NS - 5 * S, sbe=1)).status_code == 204
    body = flush(NS, sbe=4, sym=7)
    assert client.post("/write", content=body).status_code == 204
    assert client.post("/write", content=body).status_code == 204  # Telegraf's retry
    assert step_value(client, Scope.GPU, "gpu-b01:gpu0", "ecc_sbe_volatile") == 3
    assert latest(client, Scope.GPU, "gpu-b01:gpu0", "ecc_sbe_volatile") == 4
    assert step_value(client, Scope.IB_PORT, "gpu-a01:mlx5_0:1", "ib_symbol_error") == 7
    st = _running(client)
    assert st.pipeline.stats.samples_rejected == 0


def test_two_points_within_one_step_last_write_wins_in_a_batch_and_across_requests(
        client: TestClient, clock: ManualClock) -> None:
    clock.now = T0 + 2
    assert client.post("/write", content=flush(NS - 5 * S, sbe=1)).status_code == 204
    # `interval = "2s"`: one flush holds two gathers of the same GPUs within one 5-s step
    # (step T0 holds T0-2.5 s up to T0+2.5 s).
    body = flush(NS - 2 * S, temp=60, sbe=2) + flush(NS, temp=64, sbe=3, pending="Yes")
    r = client.post("/write", content=body)
    assert r.status_code == 204, r.text
    a0, b0 = "gpu-a01:gpu0", "gpu-b01:gpu0"
    assert step_value(client, Scope.GPU, a0, "gpu_temp") == 64
    assert step_value(client, Scope.GPU, a0, "remapped_rows_pending") == 1
    assert step_value(client, Scope.GPU, b0, "ecc_sbe_volatile") == 2  # 1 -> 3 in the step
    # The next request, still within the step (2 s later): it wins, increases add up.
    r = client.post("/write", content=flush(NS + 2 * S, temp=66, sbe=6, pending="No"))
    assert r.status_code == 204, r.text
    assert step_value(client, Scope.GPU, a0, "gpu_temp") == 66
    assert step_value(client, Scope.GPU, a0, "remapped_rows_pending") == 0
    assert step_value(client, Scope.GPU, b0, "ecc_sbe_volatile") == 5
    assert latest(client, Scope.GPU, b0, "ecc_sbe_volatile") == 6
    assert _running(client).pipeline.stats.samples_rejected == 0


def test_a_flush_with_malformed_lines_is_a_partial_write_naming_them(client: TestClient) -> None:
    good = flush(NS).splitlines()
    body = "\n".join([good[0], "nvidia_smi,host=gpu-a01,index=0 temperature_gpu=", *good[1:3],
                      "this is not line protocol", *good[3:]]) + "\n"
    r = client.post("/write", content=body)
    assert r.status_code == 400
    err = r.json()
    assert [x["line"] for x in err["rejections"]] == [2, 5]
    assert err["error"].startswith("partial write:") and err["error"].endswith("dropped=2")
    assert "line 2:" in err["error"] and "line 5:" in err["error"]
    assert latest(client, Scope.GPU, "gpu-b01:gpu1", "mem_temp") == 74  # the rest kept


def test_ignored_names_are_bounded_whatever_a_sender_invents(client: TestClient) -> None:
    fields = ",".join(f"f{i}=1i" for i in range(300))
    body = "\n".join(f"junk{m},host=n1 {fields} {NS}" for m in range(10))
    assert client.post("/write", content=body).status_code == 204
    counts = ignored(client)
    assert len(counts) <= 501
    assert counts[("(other)", "(other)")] == 3000 - (len(counts) - 1)
    # A name cut to a bounded length: a megabyte of name costs a hundred characters.
    long = "x" * 5000
    assert client.post("/write", content=f"{long},host=n1 {long}=1 {NS}").status_code == 204
    assert all(len(m) <= 100 and len(f) <= 100 for m, f in ignored(client))


HOSTILE = [
    ("gpu,host=gpu[001-512],gpu=0 ecc_dbe_volatile=1i", "host", "holds characters"),
    ("gpu,host=--all,gpu=0 ecc_dbe_volatile=1i", "host", "starts with '-'"),
    ("gpu,host=-h,gpu=0 gpu_temp=50", "host", "starts with '-'"),
    ("gpu,host=n1\\,n2,gpu=0 gpu_temp=50", "host", "holds characters"),
    ("gpu,host=n1\\ -w\\ n2,gpu=0 gpu_temp=50", "host", "holds characters"),
    ("gpu,host=n1..x,gpu=0 gpu_temp=50", "host", "empty label"),
    (f"gpu,host={'a' * 64},gpu=0 gpu_temp=50", "host", "longer than 63"),
    (f"gpu,host={'.'.join(['a' * 60] * 5)},gpu=0 gpu_temp=50", "host", "longer than 253"),
    ("gpu,host=n1,gpu=12345678901 gpu_temp=50", "gpu", "at most 10 digits"),
    ("nvidia_smi,host=n1,index=-1 temperature_gpu=50i", "index", "not a number"),
    ("ib_port,device=mlx5_0\\ --all,host=n1,port=1 ib_symbol_error=1i", "device",
     "holds characters"),
    ("infiniband,device=-mlx5,host=n1,port=1 symbol_error=1i", "device", "starts with '-'"),
    ("xid,host=gpu[1-2],gpu=0 code=79i", "host", "holds characters"),
    ("nvlink,gpu=0,host=n1,link=x nvlink_state=0i", "link", "not a number"),
]


def test_hostile_entity_names_are_refused_by_line_and_tag_and_the_rest_kept(
        client: TestClient) -> None:
    lines = [f"{line} {NS}" for line, _, _ in HOSTILE]
    lines.insert(3, f"gpu,host=gpu-c01.cluster.local,gpu=0 gpu_temp=58 {NS}")
    lines.append(f"gpuhealth_collector,collector=nvml,host=--all up=1i {NS}")
    lines.append(f"DCGM_FI_DEV_GPU_TEMP,Hostname=n1,gpu=0,host=gpu[1-4] gauge=41 {NS}")
    r = client.post("/write", content="\n".join(lines))
    assert r.status_code == 400
    err = r.json()
    by_line = {x["line"]: x["reason"] for x in err["rejections"]}
    numbers = [i for i in range(1, len(lines) + 1) if i != 4]
    assert sorted(by_line) == numbers
    for i, (_, tag, why) in zip([n for n in numbers if n <= len(HOSTILE) + 1], HOSTILE,
                                strict=True):
        assert f"tag {tag!r}" in by_line[i] and why in by_line[i], (i, by_line[i])
    assert "starts with '-'" in by_line[len(lines) - 1]
    assert "holds characters" in by_line[len(lines)]
    # The valid line of the batch is kept; nothing of the hostile ones became an entity.
    assert latest(client, Scope.GPU, "gpu-c01.cluster.local:gpu0", "gpu_temp") == 58
    st = _running(client)
    assert [e.key for e in st.pipeline.store[Scope.GPU].entities] == [
        "gpu-c01.cluster.local:gpu0"]
    assert not st.pipeline.store[Scope.IB_PORT].entities
    assert st.remote_statuses() == []


def test_a_sender_clock_ahead_moves_only_its_own_points(client: TestClient,
                                                        clock: ManualClock) -> None:
    clock.now = T0
    assert client.post("/write", content=flush(NS)).status_code == 204
    st = _running(client)
    head = st.pipeline.store.head
    # gpu-z01's clock runs 4 minutes ahead, inside max_future_s (300 s): its points are
    # kept, but every other entity's window does not age by 48 steps because of it.
    r = client.post("/write", content=f"gpu,host=gpu-z01,gpu=0 gpu_temp=50 {NS + 240 * S}")
    assert r.status_code == 204, r.text
    assert st.pipeline.store.head == head
    assert latest(client, Scope.GPU, "gpu-z01:gpu0", "gpu_temp") == 50
    assert step_value(client, Scope.GPU, "gpu-a01:gpu0", "gpu_temp") == 61
    # Past max_future_s it is refused, per point, and the rest of the batch is kept.
    r = client.post("/write", content=f"gpu,host=gpu-z01,gpu=1 gpu_temp=50 {NS + 400 * S}\n"
                                       f"gpu,host=gpu-y01,gpu=0 gpu_temp=51 {NS}")
    assert r.status_code == 400
    [rej] = r.json()["rejections"]
    assert rej["entity"] == "gpu-z01:gpu1" and "future" in rej["reason"]
    assert latest(client, Scope.GPU, "gpu-y01:gpu0", "gpu_temp") == 51


def test_ping_and_create_database_as_telegraf_sends_them(client: TestClient) -> None:
    for method in (client.get, client.head):
        r = method("/ping")
        assert r.status_code == 204 and r.headers["x-influxdb-version"].startswith("1.")
    # Telegraf's v1 output: a form-encoded POST, database name quoted.
    r = client.post("/query", content='q=CREATE+DATABASE+%22telegraf%22',
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200, r.text
    assert r.json() == {"results": [{"statement_id": 0}]}
    r = client.get("/query", params={"q": "create database gpus WITH DURATION 7d"})
    assert r.status_code == 200, r.text
    for q in ("DROP DATABASE telegraf", "SELECT * FROM gpu", 'CREATE DATABASE "a"; DROP x'):
        r = client.post("/query", params={"q": q})
        assert r.status_code == 400 and "CREATE DATABASE" in r.json()["error"], q


def _catalog_telegraf(measurement: str) -> dict[str, str]:
    return {m.telegraf.split(".", 1)[1]: m.name for m in CATALOG
            if m.telegraf and m.telegraf.startswith(measurement + ".")}


def _fields(line: str) -> set[str]:
    body = line.split(" ")
    # the name tag holds escaped spaces: fields are the second-to-last space-separated part
    return {item.split("=", 1)[0] for item in body[-2].split(",")}


@pytest.mark.parametrize("template,version", [(V12, "v12"), (V13, "v13")])
def test_the_catalog_maps_only_names_telegraf_emits(template: str, version: str) -> None:
    """Every Telegraf name in the catalog is one the v13 parser emits (v12's are a subset);
    and what each version carries decides which rules Telegraf can feed (docs/telegraf.md)."""
    mapped = _catalog_telegraf("nvidia_smi")
    v13 = _fields(V13.format(**_SAMPLE, ts=NS))
    # The next release's clocks-event flags (tests/api/test_write_telegraf_next.py).
    flags = {f"clocks_event_reason_{r}" for r in ("hw_thermal_slowdown", "sw_power_cap",
                                                   "hw_slowdown")}
    assert set(mapped) <= v13 | flags | {"retired_pages_multiple_single_bit",
                                         "retired_pages_double_bit"}
    fields = _fields(template.format(**_SAMPLE, ts=NS))
    got = {mapped[f] for f in fields if f in mapped}
    expected: dict[str, set[str]] = {
        "v12": {"gpu_temp", "power_draw", "sm_clock", "gpu_util", "remapped_rows_correctable",
                "remapped_rows_uncorrectable", "remapped_rows_pending",
                "remapped_rows_failure"},
        "v13": {"gpu_temp", "power_draw", "sm_clock", "gpu_util", "remapped_rows_correctable",
                "remapped_rows_uncorrectable", "remapped_rows_pending",
                "remapped_rows_failure", "retired_pages_pending", "mem_temp",
                "gpu_slowdown_temp", "gpu_shutdown_temp", "mem_max_temp", "gpu_temp_margin",
                "ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate",
                "ecc_dbe_aggregate", "ecc_sram_correctable"},
    }
    assert got == expected[version]
    assert {m.name for m in CATALOG if m.telegraf in {"nvidia_smi." + f for f in flags}} == {
        "throttle_thermal", "throttle_power", "throttle_hw_slowdown"}


_SAMPLE: dict[str, Any] = {"gpu": 0, "sm": 1410, "power": 400.5, "remap": 0, "pending": "No",
                           "temp": 60, "sbe_agg": 1, "sbe": 1, "dbe": 0, "mtemp": 70}


def test_the_sqlite_store_keeps_one_row_per_point_merged(client: TestClient,
                                                         settings: Settings) -> None:
    body = flush(NS, sbe=4)
    for _ in range(2):
        assert client.post("/write", content=body).status_code == 204
    # A later point of the same time carrying one field: merged into the row, not a new one.
    assert client.post("/write", content=f"gpu,host=gpu-b01,gpu=0 power_draw=333.5 {NS}"
                       ).status_code == 204
    db = sqlite3.connect(settings.storage.sqlite_path)
    try:
        rows = samples(db, Scope.GPU, "gpu-b01:gpu0", "gpu-b01", T0 - 60, T0 + 60,
                       ["gpu_temp", "power_draw", "ecc_sbe_volatile"])
    finally:
        db.close()
    assert rows == [(T0, (66.0, 333.5, 4.0))]


def test_a_store_written_before_keeps_its_newest_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    # As a file written before the index (and schema versions) existed: version 0, wide rows,
    # so the version-1 migration is what removes the duplicates (service/storage/schema.py).
    db.execute("CREATE TABLE gpu_samples (ts REAL NOT NULL, entity TEXT NOT NULL, "
               "node TEXT NOT NULL, gpu_temp REAL)")
    db.executemany("INSERT INTO gpu_samples (ts, entity, node, gpu_temp) VALUES (?, ?, ?, ?)",
                   [(T0, "n1:gpu0", "n1", 50.0), (T0, "n1:gpu0", "n1", 51.0),
                    (T0 + 5, "n1:gpu0", "n1", 52.0)])
    db.commit()
    db.close()
    SQLiteSink(path).close()
    db = sqlite3.connect(path)
    try:
        assert samples(db, Scope.GPU, "n1:gpu0", "n1", T0 - 60, T0 + 60, ["gpu_temp"]) == [
            (T0, (51.0,)), (T0 + 5, (52.0,))]
    finally:
        db.close()
