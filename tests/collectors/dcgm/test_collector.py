"""DcgmExporterCollector against real HTTP servers on loopback: the real L4 page, a 500, a server
that hangs past the timeout, a closed port, a page that changes between scrapes, and the node
named by the page's Hostname unless that is the exporter's own pod name."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from collectors.base import Collector
from collectors.catalog import Scope
from collectors.dcgm import DcgmExporterCollector
from tests.collectors.dcgm.pages import L4, exposition, needs_pages
from tests.collectors.own_captures import DCGM_PAGE, read

Respond = Callable[[BaseHTTPRequestHandler], None]


@contextmanager
def serve(respond: Respond) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            respond(self)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def page(body: str, status: int = 200) -> Respond:
    def respond(h: BaseHTTPRequestHandler) -> None:
        data = body.encode()
        h.send_response(status)
        h.send_header("Content-Type", "text/plain; version=0.0.4")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
    return respond


@needs_pages
def test_scrapes_the_real_page() -> None:
    with serve(page(exposition(L4))) as url:
        c = DcgmExporterCollector(url, clock=lambda: 1_700_000_000_000_000_000)
        assert isinstance(c, Collector)
        batch = c.collect()
        c.close()
    assert c.status.up and c.status.reason == ""
    assert not batch.rejected
    frame = batch.frames[Scope.GPU]
    assert frame.entities[0].key == "i-030791dc5a37cd257:gpu0"
    assert batch.samples == 9
    assert frame.ts[0] == 1_700_000_000.0
    assert c.unknown_fields["DCGM_FI_PROF_DRAM_ACTIVE"] == 1


def test_http_500_is_down_with_the_status() -> None:
    with serve(page("boom", status=500)) as url:
        c = DcgmExporterCollector(url)
        batch = c.collect()
    assert not c.status.up
    assert "HTTP 500" in c.status.reason and url in c.status.reason
    assert batch.samples == 0


def test_hung_server_times_out() -> None:
    release = threading.Event()

    def hang(h: BaseHTTPRequestHandler) -> None:
        release.wait(5)

    with serve(hang) as url:
        c = DcgmExporterCollector(url, timeout_s=0.2)
        batch = c.collect()
        release.set()
    assert not c.status.up
    assert "no answer within 0.2 s" in c.status.reason
    assert batch.samples == 0


def test_refused_connection() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens on the port now
    c = DcgmExporterCollector(f"http://127.0.0.1:{port}/metrics", timeout_s=1)
    batch = c.collect()
    assert not c.status.up and "cannot connect" in c.status.reason
    assert batch.samples == 0


def test_garbage_and_empty_pages_are_down_then_recovery() -> None:
    body = ["<html><body>not metrics</body></html>\n"]

    def respond(h: BaseHTTPRequestHandler) -> None:
        page(body[0])(h)

    with serve(respond) as url:
        c = DcgmExporterCollector(url, host="n1")
        c.collect()
        assert not c.status.up and "not Prometheus text exposition" in c.status.reason
        body[0] = "go_goroutines 3\n"
        c.collect()
        assert not c.status.up and "no DCGM_FI_* samples" in c.status.reason
        body[0] = 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40\n'
        batch = c.collect()
    assert c.status.up and c.status.reason == ""
    assert batch.frames[Scope.GPU].values.shape[0] == 1


def test_xid_event_only_when_the_last_xid_changes() -> None:
    body = [""]

    def respond(h: BaseHTTPRequestHandler) -> None:
        page(body[0])(h)

    def xid(code: int) -> str:
        return f'DCGM_FI_DEV_XID_ERRORS{{gpu="3",Hostname="n9"}} {code}\n'

    events: list[list[tuple[str, float]]] = []
    with serve(respond) as url:
        c = DcgmExporterCollector(url)
        for code in (13, 13, 79, 79, 0, 48):
            body[0] = xid(code)
            b = c.collect()
            assert c.status.up, c.status.reason
            events.append([(k, v) for k, v in zip(b.events.keys, b.events.values, strict=True)])
    # 13 is the baseline seen at start; 79 and 48 are new; a reset to 0 is no Xid.
    assert events == [[], [], [("n9:gpu3", 79.0)], [], [], [("n9:gpu3", 48.0)]]


def test_the_node_is_the_pages_hostname_when_it_names_a_node() -> None:
    """dcgm-exporter scraped directly with NODE_NAME set: its Hostname is the node."""
    with serve(page(read(DCGM_PAGE))) as url:
        c = DcgmExporterCollector(url, clock=lambda: 1_700_000_000_000_000_000)
        batch = c.collect()
        c.close()
    assert c.status.up and not batch.rejected
    gpu = batch.frames[Scope.GPU]
    assert sorted({e.key for e in gpu.entities}) == ["gpu-node-b07:gpu0", "gpu-node-b07:gpu1"]


def test_a_page_named_by_the_exporters_pod_is_refused_unless_the_collector_names_the_node(
        ) -> None:
    """Under the GPU operator without NODE_NAME, Hostname is the exporter's own pod: no node
    of that name is made; one refusal per page says why. The collector's `host` option names
    the node instead."""
    body = read(DCGM_PAGE).replace('Hostname="gpu-node-b07"',
                                   'Hostname="nvidia-dcgm-exporter-7x2kq"')
    with serve(page(body)) as url:
        c = DcgmExporterCollector(url)
        batch = c.collect()
        named = DcgmExporterCollector(url, host="gpu-node-b07")
        kept = named.collect()
        c.close()
        named.close()
    assert batch.frames == {} and batch.samples == 0
    assert len(batch.rejected) == 1
    why = batch.rejected[0]
    assert why.reason.startswith("Hostname=nvidia-dcgm-exporter-7x2kq is a pod name of the "
                                 "nvidia-dcgm-exporter DaemonSet, not a node name")
    assert why.reason.endswith("(40 samples refused)")
    assert why.line == next(i for i, line in enumerate(body.splitlines(), 1)
                            if line.startswith("DCGM_FI"))
    assert c.last_stats.skipped["named by a pod name, not a node"] == 40
    assert not kept.rejected
    assert sorted({e.key for e in kept.frames[Scope.GPU].entities}) == [
        "gpu-node-b07:gpu0", "gpu-node-b07:gpu1"]
