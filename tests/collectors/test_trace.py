"""The trace format: writing, streaming rounds back, foreign line protocol, labels."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import Scope
from collectors.frames import Batch, Entity
from collectors.labels import FailureMode, Label, LabelError, dump_labels, load_labels
from collectors.schema import SchemaMapper
from collectors.trace import LABELS_FILE, TraceReader, TraceWriter

T0 = 1_700_000_000
NS = 10**9


def make_round(mapper: SchemaMapper, t: int, nodes: int = 2) -> Batch:
    lines = []
    for n in range(nodes):
        for g in range(2):
            lines.append(f"gpu,host=n{n},gpu={g} gpu_temp={40 + g + t % 7},"
                         f"ecc_sbe_volatile={t - T0}i {t * NS}")
        lines.append(f"ib_port,host=n{n},device=mlx5_0,port=1 ib_symbol_error={n}i {t * NS}")
    lines.append(f"xid,host=n0,gpu=1 code=79i {t * NS + 1_000_000}")
    batch = mapper.parse(lines)
    assert batch.rejected == []
    return batch


def write_trace(directory: Path, rounds: int = 6, **kwargs: object) -> list[Batch]:
    mapper = SchemaMapper()
    batches = [make_round(mapper, T0 + 5 * k) for k in range(rounds)]
    with TraceWriter(directory, **kwargs) as w:  # type: ignore[arg-type]
        for b in batches:
            w.write(b)
    return batches


def same(a: Batch, b: Batch) -> None:
    assert set(a.frames) == set(b.frames)
    for scope, fa in a.frames.items():
        fb = b.frames[scope]
        assert [fa.entities[r].key for r in fa.rows] == [fb.entities[r].key for r in fb.rows]
        np.testing.assert_array_equal(fa.ts, fb.ts)
        np.testing.assert_array_equal(fa.values, fb.values)
    assert a.events == b.events


@pytest.mark.parametrize("compress", [True, False])
def test_written_trace_reads_back_round_by_round(tmp_path: Path, compress: bool) -> None:
    batches = write_trace(tmp_path, gzip=compress, rotate_rows=12)
    files = sorted(p.name for p in tmp_path.iterdir())
    suffix = ".lp.gz" if compress else ".lp"
    assert files == [f"trace-{i:06d}{suffix}" for i in range(3)]  # 7 lines a round, 12 a file
    opener = gzip.open if compress else open
    with opener(tmp_path / files[0], "rt") as f:
        assert f.readline().startswith("gpu,gpu=0,host=n0 gpu_temp=")
    reader = TraceReader(tmp_path)
    rounds = list(reader.rounds())
    assert [r.time for r in rounds] == [T0 + 5.0 * k for k in range(6)]
    for got, want in zip(rounds, batches, strict=True):
        assert got.batch.rejected == []
        same(got.batch, want)
    assert len(list(reader)) == 6  # a reader iterates again from the start


def test_rounds_do_not_depend_on_chunking(tmp_path: Path) -> None:
    write_trace(tmp_path, rotate_rows=10)
    big = list(TraceReader(tmp_path))
    for chunk in (1, 2, 3, 7):
        for a, b in zip(TraceReader(tmp_path, chunk_lines=chunk), big, strict=True):
            same(a, b)


def test_step_sets_the_round_length(tmp_path: Path) -> None:
    write_trace(tmp_path, rounds=6)
    rounds = list(TraceReader(tmp_path, step_s=15).rounds())
    assert [r.time for r in rounds] == [T0 - 5.0, T0 + 10.0, T0 + 25.0]  # buckets align to 15 s
    assert [len(r.batch.frames[Scope.GPU]) for r in rounds] == [8, 12, 4]  # 2, 3, 1 samples


def test_a_late_point_joins_the_round_being_read_with_its_own_time(tmp_path: Path) -> None:
    path = tmp_path / "t.lp"
    path.write_text("".join(f"gpu,host=n,gpu={g} gpu_temp={dt} {(T0 + dt) * NS}\n"
                            for g, dt in ((0, 0), (0, 5), (1, 4), (0, 10))))
    rounds = list(TraceReader(path).rounds())
    assert [r.time for r in rounds] == [T0, T0 + 5.0, T0 + 10.0]
    assert rounds[1].batch.frames[Scope.GPU].ts.tolist() == [T0 + 4.0, T0 + 5.0]


def test_reader_keeps_entity_tables_across_rounds(tmp_path: Path) -> None:
    write_trace(tmp_path)
    tables = {id(b.frames[Scope.GPU].entities) for b in TraceReader(tmp_path)}
    assert len(tables) == 1


def test_writer_appends_after_existing_parts_and_rejects_bad_rotation(tmp_path: Path) -> None:
    write_trace(tmp_path, rounds=2, gzip=False)
    mapper = SchemaMapper()
    with TraceWriter(tmp_path, gzip=False) as w:
        assert w.write(make_round(mapper, T0 + 100)) == 7
        assert w.write(Batch()) == 0
    assert [p.name for p in w.files] == ["trace-000001.lp"]
    assert [r.time for r in TraceReader(tmp_path).rounds()] == [T0, T0 + 5.0, T0 + 100.0]
    with pytest.raises(ValueError, match="rotate_rows"):
        TraceWriter(tmp_path, rotate_rows=0)


def test_telegraf_output_replays(tmp_path: Path) -> None:
    # What Telegraf's file output writes for nvidia_smi, infiniband and an unrelated input.
    path = tmp_path / "metrics.out"
    lines = []
    for k in range(3):
        t = (T0 + 10 * k) * NS + 123
        for i in range(2):
            lines.append(
                f"nvidia_smi,compute_mode=Default,host=dgx01,index={i},name=NVIDIA\\ H100,"
                f"pstate=P0,uuid=GPU-{i} fan_speed=0i,temperature_gpu={50 + k}i,"
                f'power_draw=400.5,remapped_rows_pending="No",driver_version="550.54" {t}')
        lines.append(f"infiniband,device=mlx5_0,host=dgx01,port=1 symbol_error={k}i,"
                     f"VL15_dropped=0i,port_xmit_data=99i {t}")
        lines.append(f"cpu,cpu=cpu-total,host=dgx01 usage_idle=97.5 {t}")
    path.write_text("\n".join(lines) + "\n")
    rounds = list(TraceReader(path, strict=False).rounds())
    assert [r.time for r in rounds] == [T0, T0 + 10.0, T0 + 20.0]
    last = rounds[-1].batch
    assert last.rejected == []
    gpu = last.frames[Scope.GPU]
    assert [e.key for e in gpu.entities.entities] == ["dgx01:gpu0", "dgx01:gpu1"]
    assert gpu.values[:, 0].tolist() == [52.0, 52.0]
    strict = next(TraceReader(path).rounds()).batch.rejected
    assert [r.line for r in strict] == [1, 2, 3, 4]  # unknown fields and the cpu measurement


def test_influx_inspect_export_replays(tmp_path: Path) -> None:
    path = tmp_path / "export.lp"
    path.write_text(
        "# INFLUXDB EXPORT: 1677-09-21T00:12:43Z - 2262-04-11T23:47:16Z\n"
        "# DDL\n"
        "CREATE DATABASE telegraf WITH NAME autogen\n"
        "CREATE RETENTION POLICY \"weekly\" ON \"telegraf\" DURATION 168h REPLICATION 1\n"
        "# DML\n"
        "# CONTEXT-DATABASE:telegraf\n"
        "# CONTEXT-RETENTION-POLICY:autogen\n"
        "# writing tsm data\n"
        f"nvidia_smi,host=a,index=0 temperature_gpu=40i {T0 * NS}\n"
        f"nvidia_smi,host=a,index=0 temperature_gpu=41i {(T0 + 5) * NS}\n"
    )
    batches = list(TraceReader(path))
    assert [b.rejected for b in batches] == [[], []]
    assert [b.frames[Scope.GPU].values[0, 0] for b in batches] == [40.0, 41.0]


def test_bad_lines_name_their_file_and_line_and_lose_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "a.lp").write_text(f"gpu,host=n,gpu=0 gpu_temp=1 {T0 * NS}\n"
                                   f"gpu,host=n,gpu=0 gpu_temp=NaN {T0 * NS}\n")
    with gzip.open(tmp_path / "b.lp.gz", "wt") as f:
        f.write(f"gpu,host=n,gpu=0 gpu_temp=2 {(T0 + 5) * NS}\n"
                "garbage\n"
                f"gpu,host=n,gpu=0 ecc_dbe_volatile=-1i,gpu_temp=3 {(T0 + 10) * NS}\n")
    (tmp_path / "notes.txt").write_text("ignored: not a trace file")
    rounds = list(TraceReader(tmp_path).rounds())
    assert [r.time for r in rounds] == [T0, T0 + 5.0, T0 + 10.0]
    assert [r.batch.frames[Scope.GPU].values[0, 0] for r in rounds] == [1.0, 2.0, 3.0]
    assert [[str(x) for x in r.batch.rejected] for r in rounds] == [
        ["line 2: a.lp: field value 'NaN' is not a number (line protocol has no NaN or "
         "infinity) (gpu_temp)"],
        ["line 2: b.lp.gz: missing field set"],
        ["line 3: b.lp.gz: counter ecc_dbe_volatile is negative: -1 (n:gpu0, ecc_dbe_volatile)"],
    ]


def test_numbers_too_long_are_refused_per_line_and_the_replay_goes_on(tmp_path: Path) -> None:
    # Over Python's 4,300-digit int() limit: a value and a timestamp (a traceback before).
    (tmp_path / "a.lp").write_text(f"gpu,host=n,gpu=0 gpu_temp=1 {T0 * NS}\n"
                                   f"gpu,host=n,gpu=0 ecc_dbe_volatile={'9' * 5000}i {T0 * NS}\n"
                                   f"gpu,host=n,gpu=0 gpu_temp=2 {'9' * 5000}\n"
                                   f"gpu,host=n,gpu=0 gpu_temp=3 {(T0 + 5) * NS}\n")
    rounds = list(TraceReader(tmp_path).rounds())
    assert [r.batch.frames[Scope.GPU].values[0, 0] for r in rounds] == [1.0, 3.0]
    reasons = [x.reason for x in rounds[0].batch.rejected]
    assert len(reasons) == 2 and all(r.startswith("a.lp: number too long: ") for r in reasons)


def test_truncated_gzip_keeps_what_came_before(tmp_path: Path) -> None:
    write_trace(tmp_path, rounds=40, rotate_rows=10_000)
    [part] = list(tmp_path.iterdir())
    data = part.read_bytes()
    part.write_bytes(data[: len(data) * 2 // 3])
    rounds = list(TraceReader(tmp_path).rounds())
    assert 5 < len(rounds) < 40
    assert [r.time for r in rounds] == [T0 + 5.0 * k for k in range(len(rounds))]
    errors = rounds[-1].batch.rejected
    assert len(errors) == 1 and "unreadable after line" in errors[0].reason
    assert errors[0].reason.startswith(part.name)


def test_missing_or_empty_traces_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no trace"):
        TraceReader(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match=r"no \*\.lp"):
        TraceReader(tmp_path)
    with pytest.raises(ValueError, match="step_s"):
        TraceReader(tmp_path, step_s=0)
    with pytest.raises(ValueError, match="chunk_lines"):
        TraceReader(tmp_path, chunk_lines=0)
    with pytest.raises(ValueError, match="precision"):
        TraceReader(tmp_path, precision="fortnight")


# ---- labels ----------------------------------------------------------------------------------

FAILURE = {"kind": "failure", "time": 1700003600.5, "node": "n001", "entity": "n001:gpu3",
           "scope": "gpu", "mode": "M1_hbm", "precursor_onset": 1700000000.0}
BENIGN = {"kind": "benign", "trap": "checkpoint_burst", "node": "n002",
          "entity": "n002:mlx5_0:1", "scope": "ib_port", "start": 1700000100, "end": None}

REPAIR = {"kind": "repair", "time": 1700007200.0, "node": "n001", "entity": "n001:gpu3",
          "scope": "gpu", "action": "gpu_reset", "mode": "M1_hbm"}


def test_labels_round_trip_through_the_writer_and_reader(tmp_path: Path) -> None:
    labels = [
        Label.failure(Entity.gpu("n001", 3), 1700003600.5, FailureMode.M1_HBM, 1700000000.0),
        Label.failure(Entity.nvlink("n001", 3, 7), 1700000500, FailureMode.M3_NVLINK,
                      seed=42),
        Label.benign(Entity.ib_port("n002", "mlx5_0", 1), "checkpoint_burst", 1700000100),
        Label("failure", "n003", "n003", Scope.NODE, time=5.0,
              mode=FailureMode.M7_UNOBSERVABLE),
        Label("repair", "n001", "n001:gpu3", Scope.GPU, time=1700007200.0, action="gpu_reset",
              mode=FailureMode.M1_HBM),
    ]
    write_trace(tmp_path, rounds=1)
    with TraceWriter(tmp_path) as w:
        for label in labels:
            w.add_label(label)
    assert TraceReader(tmp_path).labels() == labels
    lines = (tmp_path / LABELS_FILE).read_text().splitlines()
    assert json.loads(lines[0]) == FAILURE
    assert json.loads(lines[1])["seed"] == 42  # extra keys survive
    assert json.loads(lines[2]) == BENIGN
    dump_labels(labels, tmp_path / "copy.jsonl")
    assert load_labels(tmp_path / "copy.jsonl") == labels


def test_label_dicts_keep_unknown_keys() -> None:
    [label] = load_labels([json.dumps(FAILURE | {"severity": "high", "notes": [1, 2]})])
    assert label.mode is FailureMode.M1_HBM and label.scope is Scope.GPU
    assert label.extra == {"severity": "high", "notes": [1, 2]}
    assert label.to_dict() == FAILURE | {"severity": "high", "notes": [1, 2]}


def test_bad_labels_are_reported_together_with_line_numbers(tmp_path: Path) -> None:
    lines = [
        json.dumps(FAILURE),                                           # 1 good
        "{not json",                                                   # 2
        json.dumps(FAILURE | {"mode": "M9_gremlins"}),                 # 3
        json.dumps(FAILURE | {"scope": "nvlink"}),                     # 4
        json.dumps(FAILURE | {"precursor_onset": 1700009999.0}),       # 5
        json.dumps({k: v for k, v in FAILURE.items() if k != "time"}),  # 6
        "",                                                            # 7 blank: fine
        json.dumps(BENIGN | {"end": 1}),                               # 8
        json.dumps(BENIGN | {"kind": "maybe"}),                        # 9
        json.dumps([1, 2]),                                            # 10
        json.dumps(FAILURE | {"node": "n002"}),                        # 11
        json.dumps(FAILURE | {"time": "noon"}),                        # 12
        json.dumps(BENIGN | {"entity": "n002:gpuX"}),                  # 13
        json.dumps(REPAIR | {"action": ""}),                           # 14
        json.dumps(REPAIR),                                            # 15 good
        json.dumps(REPAIR | {"mode": None}),                           # 16 good: mode optional
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LabelError) as info:
        load_labels(path)
    errors = info.value.errors
    assert [e.split(":")[0] for e in errors] == [
        f"labels.jsonl line {n}" for n in (2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14)]
    text = "\n".join(errors)
    for phrase in ("Expecting property name", "mode 'M9_gremlins' is not one of M1_hbm",
                   "entity 'n001:gpu3' is not a nvlink entity of node 'n001'",
                   "precursor_onset 1700009999.0 is after the failure time 1700003600.5",
                   "'time' must be epoch seconds (a number), got None",
                   "end 1.0 is before start 1700000100.0",
                   "label kind 'maybe' is not one of failure, benign, repair",
                   "expected a JSON object, got list",
                   "is not a gpu entity of node 'n002'",
                   "got 'noon'",
                   "not an entity key: 'n002:gpuX'",
                   "'action' must be a non-empty string, got ''"):
        assert phrase in text, phrase
