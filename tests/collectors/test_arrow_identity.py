"""collectors.arrow_batch's `identity` kind: GPU identities through the relay -> service body,
decoded with the other kinds' bounds; a refused value named, the rest kept; bodies without
the kind as before."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from collectors.arrow_batch import (
    IDENTITY,
    META_FORMAT,
    ArrowPayloadError,
    Decoder,
    OverBudget,
    encode,
)
from collectors.catalog import Scope
from collectors.frames import Batch
from collectors.identity import FIELDS, GpuIdentity
from collectors.schema import SchemaMapper

T = 1_750_000_000.0
NS = int(T * 1e9)
A100 = GpuIdentity(uuid="GPU-8a56b2c1-0000-1111-2222-333344445555", serial="1652820012345",
                   pci_bus_id="00000000:18:00.0", model="NVIDIA A100-SXM4-80GB",
                   vbios="92.00.45.00.05", driver="550.54.15", at=T)


def _batch(**ids: GpuIdentity) -> Batch:
    b = SchemaMapper().parse(f"gpu,host=n1,gpu=0 gpu_temp=41 {NS}\n")
    b.identity = {k.replace("_", ":"): v for k, v in ids.items()}
    return b


def _body(rows: dict[str, list[object]] | dict[str, object],
          types: dict[str, pa.DataType] | None = None) -> bytes:
    """One body of an `identity` column only, its rows given by column."""
    types = types or {}
    arrays = [v if isinstance(v, pa.Array) else
              pa.array(v, types.get(k, pa.float64() if k == "at" else pa.string()))
              for k, v in rows.items()]
    rows_ = pa.StructArray.from_arrays(arrays, names=list(rows))
    col = pa.ListArray.from_arrays(pa.array([0, len(rows_)], pa.int32()), rows_)
    schema = pa.schema([pa.field(IDENTITY, col.type)], metadata={META_FORMAT: b"3"})
    out = pa.BufferOutputStream()
    with ipc.new_stream(out, schema) as w:
        w.write_batch(pa.RecordBatch.from_arrays([col], schema=schema))
    return bytes(out.getvalue())


def _rows(keys: list[str], at: list[float] | None = None, **values: list[str | None]
          ) -> dict[str, list[object]]:
    n = len(keys)
    out: dict[str, list[object]] = {"entity": list(keys), "at": list(at or [T] * n)}
    for f in FIELDS:
        out[f] = list(values.get(f, [""] * n))
    return out


def test_identities_go_through_with_the_samples_exactly() -> None:
    b = _batch(n1_gpu0=A100, n1_gpu1=GpuIdentity(uuid="GPU-1", at=T + 5))
    got = Decoder().decode(encode(b))
    assert got.batch.identity == b.identity
    assert got.batch.identity["n1:gpu1"].at == T + 5  # `at` is not compared: check it
    assert got.batch.identity["n1:gpu0"].at == T
    assert not got.batch.rejected
    assert len(got.batch.frames[Scope.GPU]) == 1
    assert got.rows == 3  # one sample row, two identity rows


def test_an_identity_with_no_samples_is_a_body_of_its_own() -> None:
    got = Decoder().decode(encode(Batch(identity={"n2:gpu7": A100})))
    assert got.batch.identity == {"n2:gpu7": A100}
    assert not got.batch.frames and not len(got.batch.events) and got.batch.samples == 0


def test_a_batch_without_identities_writes_no_identity_column() -> None:
    """What every body was before the kind: the same columns, decoded as before."""
    b = _batch()
    body = encode(b)
    assert IDENTITY not in ipc.open_stream(body).schema.names
    got = Decoder().decode(body)
    assert got.batch.identity == {} and len(got.batch.frames[Scope.GPU]) == 1


def test_one_gpus_identity_split_over_rows_and_a_resend_join_newer_on_top() -> None:
    body = _body(_rows(["n1:gpu0", "n1:gpu0", "n1:gpu0"], [T + 5, T, T + 5],
                       uuid=["GPU-a", "GPU-a", ""], serial=["", "OLD", "NEW"],
                       model=["", "Tesla T4", ""]))
    got = Decoder().decode(body).batch.identity["n1:gpu0"]
    # the older row's serial is undone by the newer; what only it says is kept
    assert (got.uuid, got.serial, got.model, got.at) == ("GPU-a", "NEW", "Tesla T4", T + 5)


def test_a_refused_value_is_named_and_the_rest_kept() -> None:
    body = _body(_rows(["n1:gpu0", "n1:gpu1"], uuid=["GPU-a", "GPU-b"],
                       serial=['12"; rm -rf /', "S2"], pci_bus_id=["18:00.0", "not a bus"],
                       driver=["N/A", None]))
    got = Decoder().decode(body)
    assert got.batch.identity == {
        "n1:gpu0": GpuIdentity(uuid="GPU-a", pci_bus_id="00000000:18:00.0"),
        "n1:gpu1": GpuIdentity(uuid="GPU-b", serial="S2")}
    assert sorted((r.entity, r.metric) for r in got.batch.rejected) == [
        ("n1:gpu0", "serial"), ("n1:gpu1", "pci_bus_id")]
    assert all(r.reason.startswith("identity ") for r in got.batch.rejected)
    assert got.refused_identity == {"n1:gpu0": {"serial": '12"; rm -rf /'},
                                    "n1:gpu1": {"pci_bus_id": "not a bus"}}


def test_refused_values_handed_on_are_refused_again_by_the_next_reader() -> None:
    """A body split by shard carries a refused value to its owner as it came
    (service.api.shard_split), which names it in its own answer."""
    first = Decoder().decode(_body(_rows(["n1:gpu0"], uuid=["GPU-a"], serial=["a\\b"])))
    again = Decoder().decode(encode(first.batch, raw_identity=first.refused_identity))
    assert again.batch.identity == {"n1:gpu0": GpuIdentity(uuid="GPU-a")}
    assert [(r.entity, r.metric) for r in again.batch.rejected] == [("n1:gpu0", "serial")]


def test_a_dictionary_entity_column_is_read_like_utf8() -> None:
    entity = pa.array(["n1:gpu0"]).dictionary_encode()
    body = _body({**_rows(["n1:gpu0"], uuid=["GPU-a"]), "entity": entity})
    assert pa.types.is_dictionary(ipc.open_stream(body).schema.field(IDENTITY).type.value_type
                                  .field("entity").type)
    assert Decoder().decode(body).batch.identity == {"n1:gpu0": GpuIdentity(uuid="GPU-a")}


@pytest.mark.parametrize("name,rows,types,why", [
    ("a node key", _rows(["n1"], uuid=["GPU-a"]), None, "is a node key, not a GPU's"),
    ("a link key", _rows(["n1:gpu0:nvlink3"], uuid=["GPU-a"]), None, "not a GPU's"),
    ("an option as a host", _rows(["-rf:gpu0"], uuid=["GPU-a"]), None, "starts with '-'"),
    ("not a key", _rows(["n1:gpu:x"], uuid=["GPU-a"]), None, "not an entity key"),
    ("a long key", _rows(["n" * 600 + ":gpu0"], uuid=["GPU-a"]), None, "an entity key of"),
    ("a null key", _rows([None], uuid=["GPU-a"]), None, "utf8 without nulls"),  # type: ignore[list-item]
    ("at not finite", _rows(["n1:gpu0"], [float("nan")], uuid=["GPU-a"]), None, "not finite"),
    ("at as text", _rows(["n1:gpu0"], uuid=["GPU-a"]), {"at": pa.string()}, "'at'"),
    ("a column missing", {k: v for k, v in _rows(["n1:gpu0"]).items() if k != "vbios"}, None,
     "must have the columns"),
    ("a column too many", {**_rows(["n1:gpu0"]), "board": ["x"]}, None,
     "must have the columns"),
    ("a number as a value", _rows(["n1:gpu0"]), {"serial": pa.int64()}, "column 'serial'"),
])
def test_hostile_identity_rows_refuse_the_body_naming_the_problem(
        name: str, rows: dict[str, list[object]], types: dict[str, pa.DataType] | None,
        why: str) -> None:
    if types and "at" in types:
        rows = {**rows, "at": [str(v) for v in rows["at"]]}
    if types and "serial" in types:
        rows = {**rows, "serial": [1]}
    with pytest.raises(ArrowPayloadError, match="identity") as err:
        Decoder().decode(_body(rows, types))
    assert why in str(err.value), name


def test_identity_rows_count_against_the_row_limit_and_the_new_entity_budget() -> None:
    from collectors.arrow_batch import Limits

    body = _body(_rows([f"n{i}:gpu0" for i in range(10)], uuid=[f"GPU-{i}" for i in range(10)]))
    with pytest.raises(ArrowPayloadError, match="more than 9 rows"):
        Decoder(Limits(max_rows=9)).decode(body)
    with pytest.raises(OverBudget):  # decoded off the event loop instead
        Decoder().decode(body, max_new=9)
    assert len(Decoder().decode(body, max_new=10).batch.identity) == 10


def test_a_reader_from_before_the_kind_refuses_the_body_whole_never_misreads_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the format stays "3": an older reader refuses a body with identities whole
    (`arrow-payload-refused`), and our agent and relay then send it as line protocol."""
    import collectors.arrow_batch as ab

    monkeypatch.setattr(ab, "KINDS", ab.KINDS - {IDENTITY})
    with pytest.raises(ArrowPayloadError, match="the columns must be kinds of"):
        Decoder().decode(encode(_batch(n1_gpu0=A100)))
    assert len(Decoder().decode(encode(_batch())).batch.frames[Scope.GPU]) == 1
