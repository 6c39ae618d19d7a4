"""GET /api/docs in Debian's Chromium: Swagger UI from the installed swagger-ui-py
renders the API's operations from /api/v1/openapi.json under the console's CSP, and no
request leaves 127.0.0.1 (no CDN, no validator badge). A screenshot goes to the test's
tmp dir (and HORAE_SHOTS, when set). From a page in Chromium, the API takes `"delay": "1h30m"`
and answers a 409 in the error shape to cancelling a failed job."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.async_api import Browser

from console.app import create_app
from tests.console.browser import chromium_browser
from tests.console.conftest import Env, failing_job
from tests.console.test_browser import Shots, served


@pytest.fixture
async def chromium() -> AsyncIterator[Browser]:
    async with chromium_browser() as b:
        yield b


async def test_the_api_reference_renders_its_operations_from_this_host_only(
    env: Env, chromium: Browser, tmp_path: Path
) -> None:
    async with served(create_app(scheduler=env.scheduler)) as url:
        ctx = await chromium.new_context(viewport={"width": 1360, "height": 900})
        page = await ctx.new_page()
        hosts: list[str] = []
        problems: list[str] = []
        page.on("request", lambda req: hosts.append(urlsplit(req.url).hostname or req.url))
        page.on("pageerror", lambda exc: problems.append(str(exc)))
        page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
        answer = await page.goto(url + "/api/docs")
        assert answer is not None and answer.status == 200
        await page.wait_for_selector(".opblock-summary-path", timeout=20_000)
        paths = await page.locator(".opblock-summary-path").all_inner_texts()
        doc = (await env.client.get("/api/v1/openapi.json")).json()
        # every operation of the document, the new ones included
        assert len(paths) == sum(len(ops) for ops in doc["paths"].values()), paths
        for expected in (
            "/api/v1/jobs",
            "/api/v1/jobs/{job_id}/cancel",
            "/api/v1/dead-letters",
            "/api/v1/dead-letters/{job_id}/replay",
            "/api/v1/workers",
        ):
            assert expected in [p.replace("\u200b", "") for p in paths], (expected, paths)
        await page.locator(".opblock-summary-path", has_text="/api/v1/dead-letters").first.click()
        await page.wait_for_selector(".opblock-body", timeout=10_000)
        shots = Shots(tmp_path)
        await shots.take(page, "api-docs")
        assert [h for h in hosts if h != "127.0.0.1"] == [], hosts
        assert any(h == "127.0.0.1" for h in hosts)
        assert problems == [], problems  # a CSP refusal is a console error
        await ctx.close()


async def test_only_the_bundle_files_the_page_uses_are_served(env: Env) -> None:
    css = await env.client.get("/api/docs/assets/swagger-ui.css")
    assert (
        css.status_code == 200
        and css.headers["content-type"].startswith("text/css")
        and len(css.content) > 10_000
    )
    for name in ("swagger-initializer.js", "index.html", "..%2Fpyproject.toml"):
        r = await env.client.get(f"/api/docs/assets/{name}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND", (name, r.text)
    page = await env.client.get("/api/docs")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert "https://" not in page.text and "http://" not in page.text


# A JSON call from the page, as a script of the console's own origin makes it.
CALL = """async ([path, body]) => {
    const r = await fetch(path, {method: 'POST', headers: {'Content-Type': 'application/json'},
                                 body: JSON.stringify(body)});
    return [r.status, await r.json()];
}"""


async def test_from_chromium_a_delay_of_1h30m_is_taken_and_cancelling_a_failed_job_is_a_409(
    env: Env, chromium: Browser
) -> None:
    failed = await failing_job(env.scheduler)
    async with served(create_app(scheduler=env.scheduler)) as url:
        ctx = await chromium.new_context()
        page = await ctx.new_page()
        await page.goto(url + "/api/docs")
        status, body = await page.evaluate(
            CALL, ["/api/v1/jobs", {"topic": "pay.report", "delay": "1h30m", "timeout": "2s"}]
        )
        assert status == 201 and body["created"] is True, (status, body)
        job = await env.scheduler.get_job(body["job_id"])
        assert job is not None and job.state.value == "scheduled" and job.timeout_ms == 2000
        assert 89 * 60 <= (job.run_at - job.created_at).total_seconds() <= 91 * 60
        status, body = await page.evaluate(CALL, [f"/api/v1/jobs/{failed}/cancel", {}])
        assert status == 409, (status, body)
        assert body["error"]["code"] == "STATE_CONFLICT" and body["error"]["field"] is None
        assert f"job {failed} is failed" in body["error"]["message"], body
        assert (await env.scheduler.get_job(failed)).state.value == "failed"  # type: ignore[union-attr]
        await ctx.close()
