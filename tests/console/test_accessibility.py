"""Every console page in Debian's Chromium, light and dark (prefers-color-scheme), at 1280 and
700 px: axe-core (tests/console/axe.py) finds no serious or critical violation, and no page
scrolls sideways at 700 px (a wide table scrolls inside its box, its rows' action buttons still in
view). Screenshots of the pages an operator looks at most go to the test's tmp dir (and
HORAE_SHOTS, when set)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.async_api import Browser, Page

from console.app import create_app
from horae import ScheduleArrivedEvent, TopicOptions, on_event
from tests.console.axe import ensure_axe
from tests.console.browser import CLIPPED_ACTIONS, chromium_browser
from tests.console.test_browser import Shots, served

pytestmark = pytest.mark.horae(raise_errors=False)
PAY, TICK, DLQ = "a11y.pay", "a11y.tick", "a11y.pay.dead"
WIDTHS = (1280, 700)
SCHEMES = ("light", "dark")
BLOCKING = ("serious", "critical")
# The pages screenshot at both widths in both schemes (the others are checked, not pictured).
PICTURED = {
    "overview",
    "overview-24h",
    "topic",
    "job",
    "dead-letters",
    "dead-letters-topic",
    "workers",
    "schedules",
    "api-docs",
}


@on_event(PAY)
async def pay(event: ScheduleArrivedEvent) -> None:
    """Fails when its payload asks for it."""
    if (event.payload or {}).get("fail"):
        raise RuntimeError("card declined: insufficient funds")


@on_event(TICK)
async def tick(event: ScheduleArrivedEvent) -> None:
    return None


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium_browser() as b:
        yield b


async def violations(page: Page, axe: str) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations of the page as it is now (WCAG 2.x A/AA and
    best practices), each with the first few nodes' selectors."""
    await page.evaluate(axe)
    found: list[dict[str, Any]] = await page.evaluate(
        """async (blocking) => {
            const r = await axe.run(document, {resultTypes: ['violations']});
            return r.violations.filter(v => blocking.includes(v.impact)).map(v => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.slice(0, 5).map(n => n.target.join(' ') + ' :: ' + n.failureSummary),
            }));
        }""",
        list(BLOCKING),
    )
    return found


async def test_no_page_has_a_serious_violation_light_or_dark_at_1280_and_700_px(
    horae, horae_clock, browser: Browser, tmp_path: Path
) -> None:
    axe = ensure_axe()
    await horae.configure_topic(PAY, TopicOptions(dead_letter=DLQ))
    for n in range(3):
        await horae.schedule_in(PAY, timedelta(0), payload={"n": n}, key=f"acct-{n}")
    failed = await horae.schedule_in(
        PAY, timedelta(0), payload={"fail": True, "order": 7}, retry={"attempts": 1}
    )
    await horae.schedule_in(PAY, timedelta(hours=2), payload={"later": True})
    await horae.schedule_cron("a11y-nightly", "*/5 * * * *", topic=TICK, tz="Europe/Paris")
    # a long dotted name with no space to wrap at (seen in CI: a declared schedule of another
    # module pushed the schedules table's actions out of view at 700 px)
    await horae.schedule_cron(
        "a11y.billing.statements.monthly:cron", "0 3 1 * *", topic=TICK, tz="America/Chicago"
    )
    await horae_clock.advance("12m")
    await horae_clock.run_until_idle()
    await horae.audit.flush()
    assert (await horae.get_job(failed)).state.value == "failed"  # type: ignore[union-attr]
    pages = {
        "overview": "/",
        "overview-24h": "/?range=24h",
        "topics": "/topics",
        "topic": f"/topics/{quote(PAY, safe='')}",
        "topic-24h": f"/topics/{quote(PAY, safe='')}?range=24h",
        "topic-jobs": f"/jobs?topic={quote(PAY)}",
        "jobs": "/jobs",
        "job": f"/jobs/{quote(failed, safe='')}",
        "dead-letters": "/dead-letters",
        "dead-letters-topic": f"/dead-letters?topic={quote(DLQ)}",
        "schedules": "/crons",
        "workers": "/workers",
        "analytics": "/analytics",  # (no report: its empty state)
        "api-docs": "/api/docs",
    }
    shots = Shots(tmp_path)
    problems: dict[str, list[dict[str, Any]]] = {}
    sideways: dict[str, int] = {}
    clipped: dict[str, list[str]] = {}
    async with served(create_app(scheduler=horae, report_dir=tmp_path / "none")) as url:
        for scheme in SCHEMES:
            for width in WIDTHS:
                ctx = await browser.new_context(
                    viewport={"width": width, "height": 900},
                    color_scheme=scheme,  # type: ignore[arg-type]
                    bypass_csp=True,  # (axe is injected as a script the console's CSP refuses)
                )
                page = await ctx.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
                for name, path in pages.items():
                    answer = await page.goto(url + path)
                    assert answer is not None and answer.status == 200, (name, answer)
                    if name == "api-docs":
                        await page.wait_for_selector(".opblock-summary-path", timeout=20_000)
                    where = f"{name} {scheme} {width}px"
                    if found := await violations(page, axe):
                        problems[where] = found
                    overflow = await page.evaluate(
                        "document.documentElement.scrollWidth - window.innerWidth"
                    )
                    if overflow > 0:
                        sideways[where] = overflow
                    # every row's action buttons in view, not past the right edge of the box
                    # their table scrolls in (at 700 px they stack instead)
                    hidden = await page.evaluate(CLIPPED_ACTIONS)
                    if hidden:
                        clipped[where] = hidden
                    if name in PICTURED:
                        await shots.take(page, f"{name}-{width}-{scheme}")
                assert errors == [], errors
                await ctx.close()
    assert problems == {}, "\n".join(
        f"{where}: {v['impact']} {v['id']} ({v['help']}): {v['nodes']}"
        for where, found in problems.items()
        for v in found
    )
    assert sideways == {}, f"pages wider than the window (px): {sideways}"
    assert clipped == {}, f"action buttons past their table's box: {clipped}"
