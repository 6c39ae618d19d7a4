"""Draining a worker from the console: `GET /api/v1/workers` lists each live worker with its
state, `POST /api/v1/workers/{id}/drain` asks one to drain (202 for an operator, 403 for a
viewer, whose refusal is recorded, 404 for an id no live worker has); the Workers page shows
the same and its Drain form posts, redirects back and shows it draining."""

from __future__ import annotations

import base64
import re
from urllib.parse import quote

import httpx

from console.app import create_app
from scheduler.api import Scheduler
from tests.console.conftest import Env, registry, settings_for
from tests.console.test_pages import ORIGIN


def _basic(user: str, token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


async def test_drain_over_the_api_by_role(
    namespace: str, redis_url: str, database_url: str
) -> None:
    settings = settings_for(
        namespace, redis_url, database_url, viewer_token="v-secret", operator_token="o-secret"
    )
    beat = {
        "lease_ms": 900,
        "registry_ttl_ms": 900,
    }  # a heartbeat each 0.3 s: the drain is seen soon
    settings = settings.model_copy(update={"worker": settings.worker.model_copy(update=beat)})  # type: ignore[attr-defined]
    s = Scheduler(settings=settings, listeners=registry())
    await s.connect()
    try:
        async with s.worker(concurrency=2) as w:
            viewer, operator = _basic("ann", "v-secret"), {"Authorization": "Bearer o-secret"}
            transport = httpx.ASGITransport(app=create_app(scheduler=s), client=("10.0.0.7", 40000))
            async with httpx.AsyncClient(transport=transport, base_url="http://console:8080") as c:
                listed = await c.get("/api/v1/workers", headers=viewer)
                assert listed.status_code == 200, listed.text
                assert listed.json()["cursor"] is None, listed.text
                [entry] = listed.json()["items"]
                assert (entry["id"], entry["state"], entry["drain_requested_at"]) == (
                    w.id,
                    "running",
                    None,
                )
                assert entry["concurrency"] == 2 and sorted(entry["topics"]) == [
                    "pay.charge",
                    "pay.report",
                ]

                path = f"/api/v1/workers/{quote(w.id, safe='')}/drain"
                refused = await c.post(path, json={}, headers=viewer)
                assert refused.status_code == 403 and refused.json()["error"]["code"] == "FORBIDDEN"
                assert [x.state for x in await s.workers()] == ["running"], (
                    "a viewer changes nothing"
                )

                unknown = await c.post(
                    "/api/v1/workers/no-such:1:abc/drain", json={}, headers=operator
                )
                assert unknown.status_code == 404, unknown.text
                assert "'no-such:1:abc'" in unknown.json()["error"]["message"]

                accepted = await c.post(path, json={}, headers=operator)
                assert accepted.status_code == 202, accepted.text
                assert accepted.json()["outcome"] == "done" and w.id in accepted.json()["message"]
                [entry] = (await c.get("/api/v1/workers", headers=viewer)).json()["items"]
                assert entry["state"] == "draining" and entry["drain_requested_at"]
            await w.wait_stopped()  # (its heartbeat saw the request: it stopped itself)
        await s.audit.flush()
        log = [(a.actor, a.role, a.action, a.outcome) for a in await s.audit.actions(w.id)]
        assert log == [
            ("operator", "operator", "worker.drain", "done"),
            ("ann", "viewer", "worker.drain", "refused"),
        ]
    finally:
        await s.close()


async def test_the_workers_page_drains_with_a_form_and_shows_it_draining(env: Env) -> None:
    [worker] = await env.scheduler.workers()
    page = await env.client.get("/workers")
    assert page.status_code == 200 and worker.id in page.text and 'href="/workers"' in page.text
    form = re.search(
        r'<form method="post" action="([^"]+)" data-confirm="Drain worker[^"]*">'
        r'<input type="hidden" name="csrf" value="([^"]+)">',
        page.text,
    )
    assert form is not None, page.text
    assert form.group(1) == f"/workers/{quote(worker.id, safe='')}/drain"
    r = await env.client.post(form.group(1), data={"csrf": form.group(2)}, headers=ORIGIN)
    assert r.status_code == 303 and r.headers["location"].startswith(
        "/workers?msg=drain+requested"
    ), r.headers
    assert [w.state for w in await env.scheduler.workers()] == ["draining"]
    again = await env.client.get("/workers")
    assert "draining" in again.text and 'button class="drain"' not in again.text
    gone = await env.client.post(
        "/workers/no-such%3A1/drain", data={"csrf": form.group(2)}, headers=ORIGIN
    )
    assert (
        gone.status_code == 303
        and "no+live+worker" in gone.headers["location"]
        and "kind=warn" in gone.headers["location"]
    )
