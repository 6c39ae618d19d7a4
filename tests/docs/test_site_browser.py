"""The documentation site in Debian's Chromium, served over HTTP as a reader would open it: the
getting-started page, the life of a job (its SVG diagram drawn) and the settings reference render
at 1280 and 700 px, light and dark, with no sideways scrolling of the page at 700 px and no
request leaving the host (no CDN, no web font). Screenshots go to the test's tmp dir (and
HORAE_SHOTS, when set)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.async_api import Browser

from tests.console.browser import chromium_browser
from tests.console.test_browser import Shots

ROOT = Path(__file__).resolve().parents[2]
PAGES = {
    "getting-started": ("getting-started/", "Getting started"),
    "life-of-a-job": ("concepts/life-of-a-job/", "life of a job"),
    "settings": ("reference/settings/", "Settings"),
}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site built (as `make docs` does) and served on 127.0.0.1."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(out)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
async def chromium() -> AsyncIterator[Browser]:
    async with chromium_browser() as b:
        yield b


@pytest.mark.parametrize("width", [1280, 700])
@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_the_key_pages_render_offline(
    site: str, chromium: Browser, tmp_path: Path, width: int, scheme: str
) -> None:
    ctx = await chromium.new_context(
        viewport={"width": width, "height": 900},
        color_scheme=scheme,  # type: ignore[arg-type]
    )
    page = await ctx.new_page()
    hosts: set[str] = set()
    problems: list[str] = []
    page.on("request", lambda req: hosts.add(urlsplit(req.url).hostname or req.url))
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    shots = Shots(tmp_path)
    for name, (path, heading) in PAGES.items():
        answer = await page.goto(site + path)
        assert answer is not None and answer.status == 200, path
        title = await page.locator("article h1").first.inner_text()
        assert heading.lower() in title.lower(), (path, title)
        overflow = await page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at {width}px"
        if name == "life-of-a-job":
            drawn = await page.evaluate(
                "Array.from(document.querySelectorAll('article img[src$=\".svg\"]'))"
                ".map(i => i.complete && i.naturalWidth > 0)"
            )
            assert drawn and all(drawn), f"the life-of-a-job diagram is not drawn: {drawn}"
        await shots.take(page, f"docs-{name}-{width}-{scheme}")
    assert hosts == {"127.0.0.1"}, f"requests left the host: {sorted(hosts)}"
    assert problems == []
    await ctx.close()
