"""The liveness probe answers while every worker thread is busy: a sync route waits for a
free thread of the pool that parses writes, and under a write flood a probe waited 300 ms
(bench.fuzz, issue 29)."""

from __future__ import annotations

import asyncio

import anyio
import anyio.to_thread
import httpx
from fastapi import FastAPI

from service.api import read


def test_healthz_needs_no_worker_thread() -> None:
    app = FastAPI()
    app.include_router(read.router)

    async def probe() -> int:
        limiter = anyio.to_thread.current_default_thread_limiter()
        holders = [object() for _ in range(int(limiter.total_tokens))]
        for h in holders:  # every worker thread taken, as a flood of parses takes them
            await limiter.acquire_on_behalf_of(h)
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://t") as client:
                r = await asyncio.wait_for(client.get("/healthz"), timeout=5)
                return r.status_code
        finally:
            for h in holders:
                limiter.release_on_behalf_of(h)

    assert asyncio.run(probe()) == 200
