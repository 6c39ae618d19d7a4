"""GET /api/docs in Debian's Chromium: Swagger UI from the installed swagger-ui-py
renders the API's operations from /api/v1/openapi.json under the console's CSP, and no
request leaves 127.0.0.1 (no CDN, no validator badge). A screenshot goes to the test's
tmp dir (and HORAE_SHOTS, when set)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.async_api import Browser

from console.app import create_app
from tests.console.browser import chromium_browser
from tests.console.conftest import Env
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
