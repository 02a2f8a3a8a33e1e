"""The notification pipeline's sending half: every message goes to its receiver with one
retry policy (exponential backoff, honouring Retry-After, only for failures the receiver
calls transient, bounded by the group's interval), on an event loop of its own so a slow SMTP
server never holds up a scoring tick. Only a delivered message is written to the log, and as
soon as its receiver answered (a crash right after must not send it again): answers that come
in while a write is under way share the next one, written off the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass

from service.notify.dispatcher import Dispatcher, Outgoing
from service.notify.message import Delivery, Message, Notifier

log = logging.getLogger(__name__)
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Sent:
    message: Message
    delivery: Delivery
    receiver_type: str
    attempts: int


def integration_of(receiver: Notifier | None) -> str:
    """The channel: "record", "email", "pagerduty", ... from the receiver's class name."""
    if receiver is None:
        return "missing"
    return type(receiver).__name__.removesuffix("Receiver").lower()


class Sender:
    def __init__(self, receivers: Mapping[str, Notifier], dispatcher: Dispatcher, *,
                 retry_initial_s: float = 1.0, retry_max_s: float = 60.0,
                 timeout_s: float = 30.0, background: bool = True,
                 sleep: Sleep = asyncio.sleep, concurrency: int = 20,
                 may_send: Callable[[], bool] = lambda: True) -> None:
        """`may_send`: whether this replica may still notify (it holds the leader lease, by
        its own clock), asked before every attempt: a leader that was paused or cut off
        past its lease resumes without sending what it had queued or was retrying; those
        messages stay in the shared outbox, for whoever leads now to send."""
        self.receivers = dict(receivers)
        self.may_send = may_send
        self.abandoned = 0  # messages left to the next leader
        self.last_sent_at: float | None = None  # wall time of the newest delivery from here
        self.dispatcher = dispatcher
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.timeout_s = timeout_s
        self.concurrency = concurrency
        self._sleep = sleep
        self._done: list[Sent] = []
        self._lock = threading.Lock()
        self._pending: set[Future[None]] = set()
        self.sent = 0
        self.failed = 0
        # Per (receiver name, integration): /metrics labels a failing receiver by these.
        self.sent_by: dict[tuple[str, str], int] = {}
        self.failed_by: dict[tuple[str, str], int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        if background:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="notify",
                                            daemon=True)
            self._thread.start()

    def submit(self, outs: list[Outgoing]) -> None:
        if not outs:
            return
        if self._loop is None:
            asyncio.run(self._send_all(outs))
            return
        fut = asyncio.run_coroutine_threadsafe(self._send_all(outs), self._loop)
        with self._lock:
            self._pending.add(fut)
        fut.add_done_callback(self._forget)

    @property
    def running(self) -> bool:
        """Whether messages submitted now would be sent: the sending thread is alive (inline
        senders always are)."""
        return self._thread is None or (self._loop is not None and self._thread.is_alive())

    def _forget(self, fut: Future[None]) -> None:
        with self._lock:
            self._pending.discard(fut)

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Block until everything submitted is delivered or given up (tests, shutdown)."""
        end = time.monotonic() + timeout_s
        while True:
            with self._lock:
                pending = list(self._pending)
            if not pending:
                return True
            left = end - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(Exception):  # reported by _send_one already
                pending[0].result(timeout=left)

    def counts(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        """Delivered and failed messages per (receiver, integration), every configured
        receiver listed from the start (at 0) so a rate over them exists before a failure."""
        with self._lock:
            sent, failed = dict(self.sent_by), dict(self.failed_by)
        for name, r in self.receivers.items():
            key = (name, integration_of(r))
            sent.setdefault(key, 0)
            failed.setdefault(key, 0)
        return sent, failed

    def drain(self) -> list[Sent]:
        """Deliveries finished since the last call (the InfluxDB recorder writes them)."""
        with self._lock:
            out, self._done = self._done, []
        return out

    async def _send_all(self, outs: list[Outgoing]) -> None:
        # Bounded: hundreds of SMTP sessions, or requests queued in one HTTP pool, at once
        # were measured slower than twenty at a time (bench.alerting).
        gate = asyncio.Semaphore(self.concurrency)
        settle = _Settler(self.dispatcher)

        async def one(o: Outgoing) -> None:
            async with gate:
                await self._send_one(o, settle)

        await asyncio.gather(*(one(o) for o in outs))

    async def _send_one(self, o: Outgoing, settle: _Settler) -> None:
        msg = o.message
        receiver = self.receivers.get(msg.receiver)
        start = time.monotonic()
        waited = 0.0  # counted too, so an injected sleep still ends the retries
        attempts = 0
        delay = self.retry_initial_s
        while True:
            if not self.may_send():
                self.dispatcher.abandon(o)
                with self._lock:
                    self.abandoned += 1
                log.warning("notification to %s not sent: this replica no longer leads; it "
                            "stays in the outbox for the leader", msg.receiver)
                return
            attempts += 1
            if receiver is None:
                d = Delivery(False, False, f"no receiver named {msg.receiver!r}")
            else:
                d = await self._attempt(receiver, msg)
            if d.ok or not d.retry:
                break
            wait = max(delay, d.retry_after_s or 0.0)
            if max(time.monotonic() - start, waited) + wait > o.budget_s:
                break  # the next flush of the group tries again
            await self._sleep(wait)
            waited += wait
            delay = min(delay * 2, self.retry_max_s)
        await settle(o, d)
        kind = integration_of(receiver)
        with self._lock:
            self._done.append(Sent(msg, d, kind, attempts))
            tally = self.sent_by if d.ok else self.failed_by
            tally[msg.receiver, kind] = tally.get((msg.receiver, kind), 0) + 1
            if d.ok:
                self.sent += 1
                self.last_sent_at = time.time()
            else:
                self.failed += 1
        if not d.ok:
            log.error("notification to %s failed after %d attempt(s): %s", msg.receiver,
                      attempts, d.detail)

    async def _attempt(self, receiver: Notifier, msg: Message) -> Delivery:
        try:
            return await asyncio.wait_for(receiver.notify(msg), self.timeout_s)
        except TimeoutError:
            return Delivery(False, True, f"no answer within {self.timeout_s:.0f} s")
        except Exception as e:  # a receiver bug: say so, never retry it blindly
            log.exception("receiver %s raised", msg.receiver)
            return Delivery(False, False, f"receiver error: {type(e).__name__}: {e}")

    def close(self) -> None:
        """Deliver what is in flight, then stop; a second call does nothing."""
        self.wait(10.0)
        loop, self._loop = self._loop, None
        if loop is not None:
            for r in self.receivers.values():
                aclose = getattr(r, "aclose", None)
                if callable(aclose):
                    try:
                        asyncio.run_coroutine_threadsafe(aclose(), loop).result(5.0)
                    except Exception:
                        log.exception("closing receiver %s", r.name)
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(5.0)
            loop.close()
        for r in self.receivers.values():
            close = getattr(r, "close", None)
            if callable(close):
                close()
        self.receivers = {}


class _Settler:
    """Reports answers to the dispatcher (log and outbox) as they come, in a worker thread:
    whoever finds no write under way writes everything queued, the others' answers included,
    so under load one transaction carries many answers and none waits for a batch to fill."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self._queue: list[tuple[Outgoing, bool | Delivery]] = []
        self._lock = asyncio.Lock()

    async def __call__(self, o: Outgoing, d: Delivery) -> None:
        self._queue.append((o, d))
        async with self._lock:
            batch, self._queue = self._queue, []
            if not batch:
                return  # written by the one before
            try:
                await asyncio.to_thread(self.dispatcher.done_many, batch)
            except Exception:  # the log is down: the outbox sends it again after a restart
                log.exception("notification log: %d answer(s) not written", len(batch))
