"""The documentation site builds offline (`make docs`): `mkdocs build --strict` has no warning (a
broken link, a missing page, an unresolved API reference), and the pages it builds load nothing
from another host (no web fonts, no CDN script or stylesheet): the site reads offline."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")
REMOTE = re.compile(r"^(?:https?:)?//", re.IGNORECASE)
# Attributes that make the browser fetch something, per tag (a plain <a href> does not)
LOADS = {
    "script": ("src",),
    "link": ("href",),
    "img": ("src", "srcset"),
    "iframe": ("src",),
    "source": ("src", "srcset"),
    "video": ("src", "poster"),
    "audio": ("src",),
    "embed": ("src",),
    "object": ("data",),
    "image": ("href", "xlink:href"),  # SVG inlined in a page
    "use": ("href", "xlink:href"),
}
# <link rel=...> that only names a URL (fetches nothing)
NAMING_RELS = {"canonical", "alternate", "author", "license", "me", "edit"}
CSS_REMOTE = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])((?:https?:)?//[^'")\s]+)""")
WEB_FONTS = ("fonts.googleapis", "fonts.gstatic", "use.typekit", "fonts.bunny")


class _Loads(HTMLParser):
    """The remote URLs a page's tags make the browser load."""

    def __init__(self) -> None:
        super().__init__()
        self.remote: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "link" and set((values.get("rel") or "").lower().split()) & NAMING_RELS:
            return
        for name in LOADS.get(tag, ()):
            for url in (values.get(name) or "").replace(",", " ").split():
                if REMOTE.match(url):
                    self.remote.append(f"<{tag} {name}={url!r}>")
        style = values.get("style") or ""
        self.remote.extend(f"<{tag} style=url({u!r})>" for u in CSS_REMOTE.findall(style))

    handle_startendtag = handle_starttag


def remote_loads(site: Path) -> list[str]:
    """Every remote reference the built site's HTML, CSS and JS would load."""
    found: list[str] = []
    for path in sorted(site.rglob("*")):
        if path.suffix not in (".html", ".css", ".js") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        where = path.relative_to(site)
        found.extend(f"{where}: web font host {h}" for h in WEB_FONTS if h in text)
        if path.suffix == ".html":
            parser = _Loads()
            parser.feed(text)
            found.extend(f"{where}: {r}" for r in parser.remote)
            for style in re.findall(r"<style[^>]*>(.*?)</style>", text, re.DOTALL | re.I):
                found.extend(f"{where}: <style> url({u})" for u in CSS_REMOTE.findall(style))
        elif path.suffix == ".css":
            found.extend(f"{where}: url({u})" for u in CSS_REMOTE.findall(text))
    return found


@pytest.fixture(scope="module")
def build(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`mkdocs build --strict` into a temporary directory (once for this file's tests)."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # mkdocs-material's end-of-life banner
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result, out


@pytest.mark.timeout(300)
def test_site_builds_strict_without_warnings(
    build: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, site = build
    lines = (result.stderr + result.stdout).splitlines()
    warnings = [line for line in lines if line.startswith(("WARNING", "ERROR"))]
    assert result.returncode == 0 and not warnings, (
        f"mkdocs build --strict exited with status {result.returncode}:\n"
        + "\n".join(warnings or lines[-40:])
    )
    assert (site / "index.html").is_file()
    assert (site / "search" / "search_index.json").is_file()


@pytest.mark.timeout(300)
def test_site_loads_nothing_from_another_host(
    build: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, site = build
    # No site, nothing to check: a failure (the build test says why), never a skip.
    assert result.returncode == 0, (
        "the site did not build: see test_site_builds_strict_without_warnings"
    )
    found = remote_loads(site)
    assert not found, "the built site loads from other hosts:\n" + "\n".join(found[:50])


def test_remote_loads_are_found(tmp_path: Path) -> None:
    """The check can fail: a CDN script, a web font stylesheet, a remote CSS url()."""
    (tmp_path / "index.html").write_text(
        '<html><head><script src="https://cdn.example.com/x.js"></script>'
        '<link rel="stylesheet" href="//cdn.example.com/y.css">'
        '<link rel="canonical" href="https://example.com/">'
        '</head><body><a href="https://example.com/docs">external docs are fine</a>'
        '<img src="assets/local.svg"></body></html>'
    )
    (tmp_path / "extra.css").write_text('@import "https://fonts.googleapis.com/css?family=Roboto";')
    found = remote_loads(tmp_path)
    assert found == [
        "extra.css: web font host fonts.googleapis",
        "extra.css: url(https://fonts.googleapis.com/css?family=Roboto)",
        "index.html: <script src='https://cdn.example.com/x.js'>",
        "index.html: <link href='//cdn.example.com/y.css'>",
    ]
