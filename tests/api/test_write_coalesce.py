"""Coalesced writes (service.api.coalesce) answer each sender as its own ingest would: the same
requests, over real HTTP on loopback, posted concurrently to a service that coalesces and one
by one to a service that ingests each request alone."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn

from collectors.catalog import Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from service.api import write_answer
from service.api.app import create_app
from service.api.coalesce import Pending, groups, merge
from service.settings import IngestSettings, Settings
from tests.support.fleet import T0

NS = int(T0 * 1e9)
STEP_NS = 5_000_000_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Service:
    def __init__(self, data_dir: Path, coalesce_ms: float) -> None:
        settings = Settings(storage={"data_dir": data_dir},  # type: ignore[arg-type]
                            ingest=IngestSettings(coalesce_ms=coalesce_ms,
                                                  max_new_gpus_per_batch=2))
        self.app = create_app(settings, clock=lambda: T0 + 60, schedule=False)
        self.port = _free_port()
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> Any:
        return self.app.state.gpuhealth


@pytest.fixture
def services(tmp_path: Path) -> Iterator[dict[str, _Service]]:
    """"alone" ingests each write by itself; "coalesced" waits 300 ms to merge them."""
    svcs = {"alone": _Service(tmp_path / "alone", 0), "coalesced": _Service(tmp_path / "co", 300)}
    for s in svcs.values():
        s.thread.start()
    deadline = time.monotonic() + 20
    while not all(s.server.started for s in svcs.values()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(s.server.started for s in svcs.values())
    try:
        yield svcs
    finally:
        for s in svcs.values():
            s.server.should_exit = True
            s.thread.join(timeout=20)


def _gpu(node: str, g: int, k: int, temp: float | str | None = None, ecc: int | None = None
         ) -> str:
    t = f"{40 + g}.5" if temp is None else temp
    e = k + g if ecc is None else ecc
    return f"gpu,host={node},gpu={g} gpu_temp={t},ecc_sbe_volatile={e}i {NS + k * STEP_NS}"


def _node(node: str, k: int, gpus: int = 2) -> list[str]:
    return [_gpu(node, g, k) for g in range(gpus)]


def _answer(r: httpx.Response) -> tuple[int, Any]:
    return r.status_code, (r.json() if r.content else None)


# Round 0 teaches both services nodes n1..n6 (2 GPUs each, within the new-entity limit).
_WARMUP = ["\n".join(_node(f"n{i}", 0)) for i in range(1, 7)]
# Round 1, posted at once: each request independent of the others' order.
_ROUND = {
    "good": "\n".join(_node("n1", 1)),
    "bad lines and a range": "\n".join([
        _gpu("n2", 0, 1), "not line protocol", _gpu("n2", 1, 1, temp="1e308")]),
    "new GPUs over the per-request limit": "\n".join(_node("n9", 1, gpus=4)),
    "a resend of round 0": "\n".join(_node("n3", 0)),
    "an event and a bad event": "\n".join([
        *_node("n4", 1), f"xid,host=n4,gpu=1 code=79i {NS + STEP_NS}",
        f"xid,host=n4,gpu=0 code=-1i {NS + STEP_NS}"]),
    "overlaps the next (same points)": "\n".join(_node("n5", 1)),
    "overlaps the previous (same points)": "\n".join(_node("n5", 1)),
    "a counter that went down": "\n".join([_gpu("n6", 0, 1, ecc=0), _gpu("n6", 1, 1)]),
}


def _post_all_at_once(url: str, bodies: list[str]) -> list[tuple[int, Any]]:
    out: list[tuple[int, Any]] = [(0, None)] * len(bodies)
    go = threading.Barrier(len(bodies))

    def post(i: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as c:
            go.wait()
            out[i] = _answer(c.post("/write", content=bodies[i].encode()))

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _gpu_view(url: str, key: str) -> Any:
    with httpx.Client(base_url=url, timeout=30) as c:
        r = c.get(f"/v1/gpus/{key}")
        if r.status_code != 200:
            return r.status_code
        return sorted((m["name"], m["value"]) for m in r.json()["metrics"])


@pytest.mark.slow
def test_concurrent_writes_answer_as_writes_ingested_alone(
        services: dict[str, _Service]) -> None:
    bodies = list(_ROUND.values())
    got: dict[str, list[tuple[int, Any]]] = {}
    for name, svc in services.items():
        with httpx.Client(base_url=svc.url, timeout=30) as c:
            for body in _WARMUP:
                assert c.post("/write", content=body.encode()).status_code == 204
            if name == "alone":
                got[name] = [_answer(c.post("/write", content=b.encode())) for b in bodies]
    got["coalesced"] = _post_all_at_once(services["coalesced"].url, bodies)
    for i, case in enumerate(_ROUND):
        assert got["coalesced"][i] == got["alone"][i], case
    by_case = dict(zip(_ROUND, got["coalesced"], strict=True))
    bad = by_case["bad lines and a range"]
    assert bad[0] == 400
    assert [(r["line"], r["entity"]) for r in bad[1]["rejections"]] == [
        (2, None), (None, "n2:gpu1")]
    assert by_case["new GPUs over the per-request limit"][1]["rejected"] == 4  # 2 GPUs x 2
    assert by_case["an event and a bad event"][1]["rejections"][0]["entity"] == "n4:gpu0"
    assert by_case["good"][0] == 204
    # The writes did share ingests, and both services hold the same data.
    co = services["coalesced"].running.coalescer
    assert co.requests == len(_WARMUP) + len(bodies)
    assert co.ingests < co.requests
    for key in ("n1:gpu0", "n2:gpu1", "n4:gpu1", "n5:gpu0", "n6:gpu0", "n9:gpu0", "n9:gpu3"):
        assert _gpu_view(services["coalesced"].url, key) == \
            _gpu_view(services["alone"].url, key), key
    a = services["alone"].running.pipeline.stats
    c = services["coalesced"].running.pipeline.stats
    assert (c.samples_ingested, c.samples_rejected) == (a.samples_ingested, a.samples_rejected)


def test_a_sender_that_goes_away_while_waiting_loses_nothing(
        services: dict[str, _Service]) -> None:
    svc = services["coalesced"]
    body = "\n".join(_node("n7", 0)).encode()
    with socket.create_connection(("127.0.0.1", svc.port)) as s:
        s.sendall(b"POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        # Gone before the 300-ms window closes.
    # The next write from another sender waits for the same or a later ingest.
    with httpx.Client(base_url=svc.url, timeout=30) as c:
        assert c.post("/write", content="\n".join(_node("n8", 0)).encode()).status_code == 204
    deadline = time.monotonic() + 10
    while svc.running.coalescer.requests < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    st = svc.running.pipeline.stats
    assert st.samples_ingested == 8  # both nodes' 2 GPUs x 2 values, once each
    assert _gpu_view(svc.url, "n7:gpu1") != 404


def _batch(node: str, gpus: int, ts: float) -> Batch:
    table = EntityTable(Scope.GPU, [Entity.gpu(node, g) for g in range(gpus)])
    f = Frame.empty(table)
    width = f.values.shape[1]
    b = Batch()
    b.add(Frame(table, np.arange(gpus, dtype=np.int32), np.full(gpus, ts),
                np.arange(gpus * width, dtype=np.float64).reshape(gpus, width)))
    return b


def test_merge_offsets_rows_and_groups_keep_arrival_order() -> None:
    a, b = _batch("a", 2, 1.0), _batch("b", 3, 2.0)
    m = merge([a, b])
    f = m.batch.frames[Scope.GPU]
    assert [e.key for e in f.entities.entities] == ["a:gpu0", "a:gpu1", "b:gpu0", "b:gpu1",
                                                   "b:gpu2"]
    assert f.rows.tolist() == [0, 1, 2, 3, 4]
    assert m.owner[Scope.GPU].tolist() == [0, 0, 1, 1, 1]
    # Two requests parsed by one mapper share its table: kept, rows as they were.
    fb = b.frames[Scope.GPU]
    first, second = Batch(), Batch()
    first.add(fb.take(np.array([True, True, False])))
    second.add(fb.take(np.array([False, False, True])))
    shared = merge([first, second])
    assert shared.batch.frames[Scope.GPU].entities is fb.entities
    assert shared.batch.frames[Scope.GPU].rows.tolist() == [0, 1, 2]
    assert shared.owner[Scope.GPU].tolist() == [0, 0, 1]
    assert f.ts.tolist() == [1.0, 1.0, 2.0, 2.0, 2.0]
    assert np.array_equal(f.values[2:], b.frames[Scope.GPU].values)

    def item(keys: set[str], alone: bool = False) -> Pending:
        return Pending(Batch(), frozenset(keys), 1, alone, None)  # type: ignore[arg-type]

    x, y, z, w = item({"a"}), item({"b"}), item({"a"}), item({"c"}, alone=True)
    v = item({"d"})
    assert groups([x, y, z, w, v]) == [[x, y], [z], [w], [v]]


def _parse_threads(svc: _Service, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the threads the line-protocol parses of `svc` run in, from now on."""
    mapper = svc.running.mappers[False]
    seen: list[str] = []
    parse = mapper.parse

    def recorded(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread().name)
        return parse(*args, **kwargs)

    monkeypatch.setattr(mapper, "parse", recorded)
    return seen


@pytest.mark.slow
def test_a_small_body_is_parsed_on_the_event_loop_one_inflating_past_the_cap_is_not(
        services: dict[str, _Service], monkeypatch: pytest.MonkeyPatch) -> None:
    svc = services["coalesced"]
    gz = {"Content-Encoding": "gzip"}
    with httpx.Client(base_url=svc.url, timeout=30) as c:  # the mapper exists from here on
        assert c.post("/write", content=_WARMUP[0].encode()).status_code == 204
        seen = _parse_threads(svc, monkeypatch)
        assert c.post("/write", content="\n".join(_node("n1", 1)).encode()).status_code == 204
        assert seen == [svc.thread.name]  # uvicorn's event loop: no hop to a worker thread
        # A small gzip body inflating within the cap: inflated and parsed on the loop too.
        r = c.post("/write", content=gzip.compress("\n".join(_node("n1", 2)).encode()),
                   headers=gz)
        assert r.status_code == 204 and seen[1] == svc.thread.name
        # One that inflates past it (small on the wire): off the event loop, inflated there.
        pad = "#" * 1000 + "\n"
        text = pad * (write_answer.INLINE_INFLATED_BYTES // len(pad) + 1) + "\n".join(
            _node("n1", 3))
        body = gzip.compress(text.encode())
        assert len(body) <= write_answer.INLINE_BODY_BYTES
        assert c.post("/write", content=body, headers=gz).status_code == 204
    assert len(seen) == 3 and seen[2] != svc.thread.name
    assert _gpu_view(svc.url, "n1:gpu1") != 404


class _WatchedLock:
    """The parsers' lock, telling when a thread other than its holder wants it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.wanted = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self.lock.acquire(blocking=False)
        if not got:
            self.wanted.set()
            got = blocking and self.lock.acquire(timeout=timeout)
        return got

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_body_meeting_a_busy_parser_waits_in_a_worker_thread(
        services: dict[str, _Service], monkeypatch: pytest.MonkeyPatch) -> None:
    """While another parse holds the parsers (a relay's large body in a worker thread), a
    small body is not parsed on the event loop (which must never wait for a lock): it goes
    to a worker thread, waits there, and is answered as any other."""
    svc = services["coalesced"]
    with httpx.Client(base_url=svc.url, timeout=30) as c:
        assert c.post("/write", content=_WARMUP[0].encode()).status_code == 204
    seen = _parse_threads(svc, monkeypatch)
    lock = _WatchedLock()
    monkeypatch.setattr(svc.running, "mapper_lock", lock)
    answers: list[int] = []
    with lock:
        sender = threading.Thread(target=lambda: answers.append(httpx.post(
            svc.url + "/write", content="\n".join(_node("n1", 1)).encode(),
            timeout=30).status_code))
        sender.start()
        assert lock.wanted.wait(timeout=30)
        with httpx.Client(base_url=svc.url, timeout=30) as c:  # the loop is not blocked
            assert c.get("/healthz").status_code == 200
    sender.join(timeout=30)
    assert answers == [204]
    assert len(seen) == 1 and seen[0] != svc.thread.name
    assert _gpu_view(svc.url, "n1:gpu1") != 404


class _CountingPipeline:
    """What Coalescer reads of a pipeline: ingest, here keeping every batch it is given as
    clean (or failing), and counting its calls."""

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.calls = fail, 0

    def ingest(self, batch: Batch, now: float, *, from_wire: bool = False,
               detail_limit: int | None = None) -> Any:
        from service.stages.ingest import IngestResult

        self.calls += 1
        if self.fail:
            raise RuntimeError("the store is gone")
        return IngestResult(accepted=0, clean=batch)


def _coalesce_three(pipeline: _CountingPipeline) -> tuple[list[Any], int]:
    """Three senders' batches through one window; their answers and how many times the worker
    thread handed something to the event loop."""
    import asyncio

    from service.api.coalesce import Coalescer

    async def main() -> tuple[list[Any], int]:
        loop = asyncio.get_running_loop()
        handed = [0]
        real = loop.call_soon_threadsafe

        def counted(*args: Any, **kw: Any) -> Any:
            # the coalescer's hand-overs (anyio's own return from the thread is not counted)
            handed[0] += getattr(args[0], "__module__", "") == "service.api.coalesce"
            return real(*args, **kw)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        c = Coalescer(pipeline, 0.05, lambda: T0)  # type: ignore[arg-type]
        batches = [_batch(n, 2, T0) for n in ("p", "q", "r")]
        answers = await asyncio.gather(
            *(c.ingest(b, (frozenset(f"{n}:gpu{g}" for g in range(2)), 100, False))
              for n, b in zip("pqr", batches, strict=True)), return_exceptions=True)
        return list(answers), handed[0]

    return asyncio.run(main())


def test_a_merged_ingest_answers_its_senders_in_one_hand_over() -> None:
    p = _CountingPipeline()
    answers, handed = _coalesce_three(p)
    assert p.calls == 1 and handed == 1  # one for the three answers (one each before)
    width = Frame.empty(EntityTable(Scope.GPU, [])).values.shape[1]
    # each sender's own kept values, counted from its rows of the merged result
    assert [a.accepted for a in answers] == [2 * width] * 3
    failed = _CountingPipeline(fail=True)
    answers, handed = _coalesce_three(failed)
    assert failed.calls == 1 and handed == 1
    assert all(isinstance(a, RuntimeError) for a in answers)


@pytest.mark.slow
def test_a_small_body_of_new_names_is_parsed_off_the_event_loop(
        services: dict[str, _Service], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each new entity costs the reference path tens of µs: a small gzip body naming
    thousands (a name flood) held the event loop, and /healthz, for hundreds of ms."""
    svc = services["coalesced"]
    gz = {"Content-Encoding": "gzip"}
    n = write_answer.INLINE_NEW_LINES * 4
    flood = "\n".join(f"gpu,host=flood{i},gpu=0 gpu_temp=40 {NS}" for i in range(n))
    body = gzip.compress(flood.encode())
    assert len(body) <= write_answer.INLINE_BODY_BYTES
    with httpx.Client(base_url=svc.url, timeout=30) as c:
        assert c.post("/write", content=_WARMUP[0].encode()).status_code == 204
        seen = _parse_threads(svc, monkeypatch)
        assert c.post("/write", content=body, headers=gz).status_code in (204, 400, 503)
        assert seen[0] != svc.thread.name
        # The same names again are known to the fast path: inline, as an agent's later rounds.
        assert c.post("/write", content=body, headers=gz).status_code in (204, 400, 503)
        assert seen[1] == svc.thread.name


@pytest.mark.slow
def test_a_small_arrow_body_of_new_keys_is_decoded_off_the_event_loop(
        services: dict[str, _Service], monkeypatch: pytest.MonkeyPatch) -> None:
    """As for lines: an Arrow body's keys not met before are made into entities at tens of µs
    each, so a small body of thousands held the event loop; known ones stay on it."""
    from collectors.arrow_batch import MEDIA_TYPE, encode
    from collectors.schema import SchemaMapper
    from service.api.write_arrow import decoder

    svc = services["coalesced"]
    n = write_answer.INLINE_NEW_LINES * 4
    batch = SchemaMapper().parse("\n".join(
        f"gpu,host=arrow{i},gpu=0 gpu_temp=40 {NS}" for i in range(n)))
    body = encode(batch)
    assert len(body) <= write_answer.INLINE_BODY_BYTES
    arrow = {"Content-Type": MEDIA_TYPE}
    with httpx.Client(base_url=svc.url, timeout=30) as c:
        assert c.post("/write", content=_WARMUP[0].encode()).status_code == 204
        dec = decoder(svc.running)
        seen: list[tuple[str, int | None]] = []
        decode = dec.decode

        def recorded(body: bytes, max_new: int | None = None) -> Any:
            seen.append((threading.current_thread().name, max_new))
            return decode(body, max_new)

        monkeypatch.setattr(dec, "decode", recorded)
        assert c.post("/write", content=body, headers=arrow).status_code in (204, 400, 503)
        # Tried on the loop within its budget, refused there, decoded in a worker thread.
        assert seen[0] == (svc.thread.name, write_answer.INLINE_NEW_LINES)
        assert seen[1][0] != svc.thread.name and seen[1][1] is None
        assert c.post("/write", content=body, headers=arrow).status_code in (204, 400, 503)
        assert seen[2:] == [(svc.thread.name, write_answer.INLINE_NEW_LINES)]  # met: inline
