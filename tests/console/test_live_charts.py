"""The charts live, in Debian's Chromium (Playwright): with the overview and a topic page open, a
job fails and the failure shows on the overview's chart and totals and on the topic page's
within one update, without a reload; the live indicator moves on, says "paused" while the tab
is hidden (no update then) and updates again once it is shown; the page's polite live region
tells a screen reader the changed counts once (not at every update) and that the updates paused
and resumed. Over HTTP: the charts' JSON
(`GET /api/v1/charts`) counts what happened, totals included, and the range is checked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from playwright.async_api import Browser, Page

from console.app import create_app
from horae import ScheduleArrivedEvent, on_event
from tests.console.browser import chromium_browser
from tests.console.test_browser import served

pytestmark = pytest.mark.horae(raise_errors=False)
TOPIC = "charts.pay"
EVERY_MS = 1000


@on_event(TOPIC)
async def pay(event: ScheduleArrivedEvent) -> None:
    """Fails when its payload asks for it."""
    if (event.payload or {}).get("fail"):
        raise RuntimeError(f"card declined for order {(event.payload or {}).get('order')}")


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium_browser() as b:
        yield b


def fast_settings(horae: Any) -> Any:
    """The scheduler's settings with the live parts refreshed every second."""
    console = horae.settings.console.model_copy(update={"refresh_ms": EVERY_MS})
    return horae.settings.model_copy(update={"console": console})


async def until(page: Page, expression: str, timeout: float = 15) -> None:
    """Poll `expression` in the page until true (the console's CSP refuses wait_for_function's
    eval)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await page.evaluate(expression):
        assert loop.time() < deadline, f"not within {timeout} s: {expression}"
        await asyncio.sleep(0.1)


# Records each text the live region is given (window.__said), from now on.
COUNT_ANNOUNCEMENTS = """() => {
    window.__said = [];
    const region = document.querySelector('#live-announce');
    new MutationObserver(() => window.__said.push(region.textContent))
        .observe(region, {childList: true, characterData: true, subtree: true});
}"""


async def run_jobs(horae: Any, horae_clock: Any, fail: bool, n: int = 1) -> None:
    for i in range(n):
        await horae.schedule_in(
            TOPIC, timedelta(0), payload={"fail": fail, "order": i}, retry={"attempts": 1}
        )
    await horae_clock.advance("1s")
    await horae_clock.run_until_idle()
    await horae.audit.flush()


async def test_a_failure_shows_on_the_overview_and_the_topic_page_without_a_reload(
    horae: Any, horae_clock: Any, browser: Browser
) -> None:
    await run_jobs(horae, horae_clock, fail=False, n=3)
    async with served(create_app(fast_settings(horae), scheduler=horae)) as url:
        pages: dict[str, Page] = {}
        errors: list[str] = []
        fetched: list[str] = []
        for name, path in (("overview", "/"), ("topic", f"/topics/{quote(TOPIC, safe='')}")):
            ctx = await browser.new_context(viewport={"width": 1280, "height": 900})
            page = await ctx.new_page()
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("request", lambda r: fetched.append(r.url) if "/partials/" in r.url else None)
            answer = await page.goto(url + path)
            assert answer is not None and answer.status == 200
            await page.evaluate("window.__notReloaded = true")
            pages[name] = page
        card = f"#charts section[data-topic='{TOPIC}']"
        overview, topic = pages["overview"], pages["topic"]
        totals = await overview.locator(f"{card} dl.totals").inner_text()
        assert "completed\n3" in totals and "failed\n0" in totals, totals
        assert await overview.locator(f"{card} svg.finished rect.bar-ok").count() == 1
        assert await overview.locator(f"{card} svg.finished rect.bar-bad").count() == 0
        assert "failed\n0" in await topic.locator("#topic-totals").inner_text()
        assert "live" in await overview.locator(".live-status").inner_text()
        first = await overview.locator(".live-status time").get_attribute("datetime")
        # The live region: polite, outside the refreshed part, silent while nothing changes.
        for page in pages.values():
            region = page.locator("#live-announce")
            assert await region.get_attribute("role") == "status"
            assert await region.get_attribute("aria-live") == "polite"
            assert await page.locator("[data-refresh] #live-announce").count() == 0
            await page.evaluate(COUNT_ANNOUNCEMENTS)
        await until(overview, f"document.querySelector('.live-status time').dateTime > '{first}'")
        await asyncio.sleep(EVERY_MS / 1000 * 1.5)  # (another update or two, nothing new)
        for page in pages.values():
            assert await page.evaluate("window.__said") == [], "announced with nothing new"

        await run_jobs(horae, horae_clock, fail=True, n=2)  # two failures in the hour

        # Within one update (every second here), both pages draw them, and say "2 failed".
        bad = f'document.querySelector("{card} svg.finished rect.bar-bad") !== null'
        await until(overview, bad, timeout=EVERY_MS / 1000 * 3 + 5)
        totals = await overview.locator(f"{card} dl.totals").inner_text()
        assert "failed\n2" in totals and "completed\n3" in totals, totals
        title = await overview.locator(f"{card} svg.finished g title").first.text_content()
        assert title and "3 completed, 2 failed" in title, title
        await until(topic, "document.querySelector('#topic-live svg.finished rect.bar-bad')")
        assert "failed\n2" in await topic.locator("#topic-totals").inner_text()
        signatures = await topic.locator("#signatures").inner_text()
        assert "RuntimeError: card declined for order <n>" in signatures and "\t2\t" in signatures
        for page in pages.values():
            assert await page.evaluate("window.__notReloaded === true"), "the page was reloaded"
        later = await overview.locator(".live-status time").get_attribute("datetime")
        assert first and later and later > first, (first, later)
        # ... and the region said so, once the counts had changed (not at every update since).
        said = await overview.evaluate("window.__said")
        assert said and "2 failed jobs" in said[-1] and "2 failed in the last hour" in said[-1]
        assert len(said) <= 2, said  # (Redis's counts may land an update before the audit's)
        topic_said = await topic.evaluate("window.__said")
        assert topic_said and topic_said[-1].startswith(f"Topic {TOPIC}: 2 failed jobs"), topic_said
        assert "2 failed in the last hour" in topic_said[-1], topic_said
        await asyncio.sleep(EVERY_MS / 1000 * 2.5)  # two more updates, nothing new: silence
        assert await overview.evaluate("window.__said") == said

        # Hidden: the indicator says paused and nothing is fetched; shown: an update at once.
        await overview.evaluate(
            """() => {
                Object.defineProperty(document, 'visibilityState',
                    {configurable: true, get: () => window.__vis || 'visible'});
                window.__vis = 'hidden';
                document.dispatchEvent(new Event('visibilitychange'));
            }"""
        )
        assert await overview.locator("#live[data-paused]").count() == 1
        assert (
            await overview.locator("#live-announce").text_content()
            == "Live updates paused while the tab is hidden."
        )
        assert await overview.locator(".paused-note").is_visible()
        await asyncio.sleep(0.3)  # (a request already under way may finish)
        mine = [u for u in fetched if "/partials/overview" in u]
        before = len(mine)
        await asyncio.sleep(EVERY_MS / 1000 * 2.5)
        assert len([u for u in fetched if "/partials/overview" in u]) == before
        await overview.evaluate(
            "window.__vis = 'visible'; document.dispatchEvent(new Event('visibilitychange'))"
        )
        await until(overview, "!document.querySelector('#live').hasAttribute('data-paused')")
        await until(
            overview,
            "document.querySelector('#live-announce').textContent.startsWith("
            "'Live updates resumed. 2 failed jobs')",
        )
        await asyncio.sleep(0.5)
        assert len([u for u in fetched if "/partials/overview" in u]) > before
        assert errors == [], errors


async def test_the_charts_api_counts_what_happened(horae: Any, horae_clock: Any) -> None:
    await run_jobs(horae, horae_clock, fail=False, n=2)
    await run_jobs(horae, horae_clock, fail=True, n=2)
    transport = httpx.ASGITransport(app=create_app(scheduler=horae))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as c:
        one = await c.get("/api/v1/charts", params={"topic": TOPIC, "range": "1h"})
        assert one.status_code == 200 and one.headers["content-type"] == "application/json"
        [series] = one.json()["topics"]
        assert (series["topic"], series["step_s"], len(series["completed"])) == (TOPIC, 60, 60)
        assert (series["total_completed"], series["total_failed"]) == (2, 2)
        assert sum(series["completed"]) == 2 and sum(series["failed"]) == 2
        assert sum(series["lateness_buckets"]) == 4 and series["lateness_p99_ms"] is not None
        day = (await c.get("/api/v1/charts", params={"range": "24h"})).json()
        assert day["range"] == "24h"
        mine = [s for s in day["topics"] if s["topic"] == TOPIC]
        assert len(mine) == 1 and len(mine[0]["completed"]) == 24
        assert (mine[0]["total_completed"], mine[0]["total_failed"]) == (2, 2)
        bad = await c.get("/api/v1/charts", params={"range": "7d"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "range", bad.text
        page = await c.get("/", params={"range": "7d"})
        assert page.status_code == 400 and "range must be one of 1h, 24h" in page.text
        for path in ("/?range=24h", f"/topics/{quote(TOPIC, safe='')}?range=24h"):
            answer = await c.get(path)
            assert answer.status_code == 200 and "2 failed" in answer.text, path
