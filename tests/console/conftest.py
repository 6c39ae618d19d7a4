"""Fixtures of the console tests: a connected Scheduler on the test's own namespace and
database, its worker running `pay.*` listeners, and the console app over HTTP (in-process
for the API tests; a real `horae console` process for the browser tests: test_browser.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import httpx
import pytest

from console.app import create_app
from horae.settings import load_settings
from listeners import ListenerRegistry
from scheduler.api import Scheduler

# Text that would run if a page rendered it as HTML.
XSS_PAYLOAD = '<script>window.__pwned=1</script>"><img src=x onerror="window.__pwned=2">'


def registry() -> ListenerRegistry:
    """pay.charge fails when its payload says so (with a message carrying markup)."""
    reg = ListenerRegistry()

    @reg.on_event("pay.charge")
    async def charge(event: object) -> None:
        payload = getattr(event, "payload", None) or {}
        if payload.get("fail"):
            raise RuntimeError(f"card declined {XSS_PAYLOAD}")

    @reg.on_event("pay.report")
    async def report(event: object) -> None:
        return None

    return reg


@dataclass
class Env:
    scheduler: Scheduler
    client: httpx.AsyncClient
    app: object


def settings_for(namespace: str, redis_url: str, database_url: str, **console: object) -> object:
    base = load_settings(env={})
    return base.model_copy(
        update={
            "redis_url": redis_url,
            "database_url": database_url,
            "namespace": namespace,
            "console": base.console.model_copy(update=console),
        }
    )


@pytest.fixture
async def env(namespace: str, redis_url: str, database_url: str) -> AsyncIterator[Env]:
    """An open console (no tokens: loopback operator) over a scheduler with a running worker."""
    s = Scheduler(settings=settings_for(namespace, redis_url, database_url), listeners=registry())
    await s.connect()
    app = create_app(scheduler=s)
    async with s.worker(concurrency=5):
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1:8080"
        ) as client:
            yield Env(s, client, app)
    await s.close()


async def settle(s: Scheduler, job_id: str, timeout: float = 10) -> None:
    """Wait until the job ended and the audit has its rows."""
    await s.wait(job_id, timeout=timeout)
    await s.audit.flush()


async def failing_job(s: Scheduler, topic: str = "pay.charge") -> str:
    job_id = await s.schedule_in(
        topic,
        timedelta(0),
        payload={"fail": True, "note": XSS_PAYLOAD},
        metadata={"who": XSS_PAYLOAD},
        retry={"attempts": 1},
    )
    await settle(s, job_id)
    return job_id
