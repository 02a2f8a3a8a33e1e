"""collectors.arrow_batch against hostile dictionaries and metadata (issue 29): a body's
dictionaries are bounded (keys, bytes, key length) before Arrow reads them, keys no row names
are never turned into entities (unless the rows name enough of the dictionary: a relay's
roster), entity tables are kept within a byte budget, and every other field a sender controls
(metadata size, batches, dictionaries, deltas, lengths claimed past the body) is refused
before it costs time or memory."""

from __future__ import annotations

import contextlib
import random

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import collectors.arrow_batch as ab
from bench.fuzz_arrow import KINDS, claimed_length, hostile_arrow_bodies
from collectors.arrow_batch import (
    MAX_DICTIONARIES,
    MAX_META_BYTES,
    MEDIA_TYPE,
    META_FORMAT,
    META_METRICS,
    WHOLE_KEYS,
    ArrowPayloadError,
    Decoder,
    Limits,
)
from collectors.byte_budget import ByteBudgetCache
from collectors.catalog import Scope
from collectors.frames import Entity

T = 1_750_000_000.0


def _body(keys: list[str], rows: list[int], schema_meta: dict[bytes, bytes] | None = None
          ) -> bytes:
    """A format-3 body: one gpu column whose rows name `keys[rows[i]]`, no metric."""
    ent = pa.DictionaryArray.from_arrays(pa.array(rows, pa.int32()), pa.array(keys, pa.string()))
    struct = pa.StructArray.from_arrays([ent, pa.array([T] * len(rows))], names=["entity", "ts"])
    f = pa.field("gpu", pa.list_(struct.type), nullable=False, metadata={META_METRICS: b""})
    schema = pa.schema([f], metadata={META_FORMAT: b"3", **(schema_meta or {})})
    out = pa.BufferOutputStream()
    with ipc.new_stream(out, schema) as w:
        w.write_batch(pa.RecordBatch.from_arrays(
            [pa.ListArray.from_arrays(pa.array([0, len(rows)], pa.int32()), struct)],
            schema=schema))
    return bytes(out.getvalue())


def _named(decoded: ab.Decoded) -> list[str]:
    f = decoded.batch.frames[Scope.GPU]
    return [f.entities[i].key for i in f.rows.tolist()]


def test_a_dictionary_of_many_keys_decodes_only_the_keys_rows_name() -> None:
    """Issue 29: one row and 500,000 keys made 500,000 entities (about 380 MB and 10 s of
    name checks a body). Within the limits the body is taken for its row alone."""
    d = Decoder()
    for tag in ("a", "b"):  # fresh keys each body: no cache absorbs the second
        keys = [f"{tag}{i}:gpu0" for i in range(500_000)]
        got = d.decode(_body(keys, [123_456, 7, 123_456]))
        assert got.keys == 500_000 and got.parsed == 2
        assert _named(got) == [f"{tag}123456:gpu0", f"{tag}7:gpu0", f"{tag}123456:gpu0"]
        assert len(got.batch.frames[Scope.GPU].entities) == 2
    assert d.table_bytes < 10_000  # two tables of two entities (and their keys' bytes)


def test_a_body_listing_more_keys_than_the_limits_is_refused_before_decoding() -> None:
    keys = [f"n{i}:gpu0" for i in range(5_000)]
    with pytest.raises(ArrowPayloadError, match="more than 4000 keys in all"):
        Decoder(Limits(max_keys=4_000)).decode(_body(keys, [0]))
    with pytest.raises(ArrowPayloadError, match="more than 20000 bytes in all"):
        Decoder(Limits(max_key_bytes=20_000)).decode(_body(keys, [0]))
    with pytest.raises(ArrowPayloadError, match="an entity key of 100005 bytes"):
        Decoder().decode(_body(["n" * 100_000 + ":gpu0"], [0]))


def test_an_error_quoting_a_key_quotes_a_bounded_part_of_it() -> None:
    with pytest.raises(ArrowPayloadError) as err:
        Decoder(Limits(max_key_length=200_000)).decode(_body(["x" * 100_000 + ":gpu0:"], [0]))
    assert len(str(err.value)) < 500


def test_a_relays_roster_is_kept_whole_and_found_again() -> None:
    """A relay writes its whole roster with each body (collectors.agent.relay_roster): when
    the rows name enough of it, the table is the whole dictionary and the next body finds it
    by its bytes, whatever rows it names (even one)."""
    roster = [f"r{i // 8}:gpu{i % 8}" for i in range(4_000)]
    d = Decoder()
    first = d.decode(_body(roster, list(range(0, 4_000, 10))))  # 400 rows: a tenth named
    table = first.batch.frames[Scope.GPU].entities
    assert len(table) == 4_000 and first.parsed == 4_000
    again = d.decode(_body(roster, [3_999]))
    assert again.batch.frames[Scope.GPU].entities is table and again.parsed == 0
    assert _named(again) == ["r499:gpu7"]
    # a roster met first with a handful of rows is not decoded whole
    other = [f"s{i // 8}:gpu{i % 8}" for i in range(4_000)]
    few = Decoder().decode(_body(other, [5, 3_000, 5]))
    assert few.parsed == 2 and _named(few) == ["s0:gpu5", "s375:gpu0", "s0:gpu5"]
    small = Decoder().decode(_body(other[:WHOLE_KEYS], [0]))  # a small one is, always
    assert small.parsed == WHOLE_KEYS


def test_entity_tables_are_kept_within_a_byte_budget() -> None:
    """Kept by their estimated bytes: a count bound let 16,384 tables of any size stay."""
    budget = 400_000
    d = Decoder(max_tables=10_000, max_table_bytes=budget)
    kept = []
    for n in range(40):  # tables of 200 entities: about 70 KB each, so about 6 fit
        keys = [f"b{n}x{i}:gpu0" for i in range(200)]
        got = d.decode(_body(keys, list(range(200))))
        kept.append(got.batch.frames[Scope.GPU].entities)
        assert 0 < d.table_bytes <= budget
    last = [f"b39x{i}:gpu0" for i in range(200)]
    assert d.decode(_body(last, [0])).batch.frames[Scope.GPU].entities is kept[-1]  # recent
    first = [f"b0x{i}:gpu0" for i in range(200)]
    assert d.decode(_body(first, list(range(200)))).parsed == 200  # evicted long ago
    huge = [f"h{i}:gpu0" for i in range(2_000)]  # alone over the budget: decoded, not kept
    before = d.table_bytes
    assert d.decode(_body(huge, list(range(2_000)))).parsed == 2_000
    assert d.table_bytes == before


def test_the_byte_budget_cache_evicts_the_least_recently_used() -> None:
    c: ByteBudgetCache[str, int] = ByteBudgetCache(max_bytes=100, max_entries=3)
    assert c.put("a", 1, 40) and c.put("b", 2, 40)
    assert c.get("a") == 1  # now the most recently used
    assert c.put("c", 3, 40)  # over 100 bytes: "b" goes, not "a"
    assert c.get("b") is None and c.get("a") == 1 and c.bytes == 80
    assert not c.put("d", 4, 101) and c.bytes == 80 and len(c) == 2  # alone over budget
    c.put("e", 5, 1)
    c.put("f", 6, 1)  # past three entries: the least recently used ("a" was read after "c")
    assert len(c) == 3 and c.get("c") is None and c.get("a") == 1


def test_metadata_dictionaries_and_deltas_are_bounded_before_arrow_reads_them() -> None:
    big = {b"x": b"v" * (MAX_META_BYTES + 1)}
    with pytest.raises(ArrowPayloadError, match="schema message's metadata is"):
        Decoder().decode(_body(["n1:gpu0"], [0], schema_meta=big))
    # A stream's messages are counted before its columns are read: a flat layout will do.
    schema = pa.schema([pa.field("entity", pa.dictionary(pa.int32(), pa.string())),
                        pa.field("ts", pa.float64())],
                       metadata={META_FORMAT: b"3"})

    def stream(delta: bool, n: int) -> bytes:
        out = pa.BufferOutputStream()
        with ipc.new_stream(out, schema,
                            options=ipc.IpcWriteOptions(emit_dictionary_deltas=delta)) as w:
            keys: list[str] = []
            for j in range(n):
                keys = [*keys, f"n{j}:gpu0"] if delta else [f"n{j}:gpu0"]
                ent = pa.DictionaryArray.from_arrays(pa.array([len(keys) - 1], pa.int32()),
                                                     pa.array(keys))
                w.write_batch(pa.RecordBatch.from_arrays([ent, pa.array([T])], schema=schema))
        return bytes(out.getvalue())

    with pytest.raises(ArrowPayloadError, match="delta dictionary"):
        Decoder().decode(stream(True, 3))
    with pytest.raises(ArrowPayloadError, match=f"more than {MAX_DICTIONARIES} dictionaries"):
        Decoder().decode(stream(False, MAX_DICTIONARIES + 1))  # before the batches' bound
    assert MAX_DICTIONARIES <= ab.MAX_BATCHES


def test_lengths_claimed_past_the_body_are_refused_not_allocated() -> None:
    """A record batch (or one of its buffers) claiming 2**31 to 2**62 rows or bytes: refused
    (a buffer past the body once read as OSError, which escaped as a 500)."""
    for seed in range(30):
        body = claimed_length(random.Random(seed), "c")
        with contextlib.suppress(ArrowPayloadError):
            Decoder().decode(body)


@pytest.mark.slow
def test_every_hostile_body_is_refused_or_taken_never_raised_otherwise() -> None:
    """bench.fuzz_arrow's bodies (the fuzz benchmark's Arrow class) through the decoder a
    service makes: ArrowPayloadError or a batch, nothing else, and no table kept for keys no
    row named."""
    from service.api.write_arrow import make_decoder
    from service.settings import IngestSettings

    d = make_decoder(IngestSettings(max_gpus=2_000))
    seen: dict[str, int] = {}
    for kind, body, content_type in _some(hostile_arrow_bodies(random.Random(29)), 60):
        assert content_type == MEDIA_TYPE
        seen[kind] = seen.get(kind, 0) + 1
        try:
            got = d.decode(body)
        except ArrowPayloadError:
            continue
        assert got.parsed <= max(WHOLE_KEYS, 16 * got.rows), kind
    assert set(seen) == set(KINDS)
    assert d.table_bytes < 2_000_000


def _some(it: object, n: int) -> list[tuple[str, bytes, str]]:
    import itertools

    return list(itertools.islice(it, n))  # type: ignore[call-overload]


def test_an_entity_parsed_from_a_named_key_is_what_the_key_says() -> None:
    keys = [f"n{i}:gpu{i % 8}" for i in range(10_000)]
    rows = [9_999, 0, 4_242]
    got = Decoder().decode(_body(keys, rows))
    f = got.batch.frames[Scope.GPU]
    assert [f.entities[i] for i in f.rows.tolist()] == [Entity.parse(keys[r]) for r in rows]
    assert f.rows.dtype == np.int32


def test_collector_reports_are_held_to_line_protocols_names_and_a_bounded_error() -> None:
    """A node agent's collector status by Arrow: host and collector names are checked as line
    protocol's are (they reach /metrics labels), and a report's error text is kept bounded
    (remembered per collector: up to 50,000 of them)."""
    from collectors.arrow_batch import encode
    from collectors.collector_status import MAX_ERROR, CollectorReport
    from collectors.frames import Batch

    def report(host: str, collector: str = "nvml", error: str = "") -> bytes:
        return encode(Batch(), [CollectorReport(host, collector, not error, 0.1, 5, error, T)])

    for host, collector in (("h" * 300, "nvml"), ("-rf", "nvml"), ("n1", "a,b=c"),
                            ("n1", "c" * 5_000_000)):
        with pytest.raises(ArrowPayloadError, match="stream 'collectors', row 0: ") as err:
            Decoder().decode(report(host, collector))
        assert len(str(err.value)) < 300
    got = Decoder().decode(report("n1", error="e" * 10_000_000)).reports
    assert [(r.host, len(r.error)) for r in got] == [("n1", MAX_ERROR)]
