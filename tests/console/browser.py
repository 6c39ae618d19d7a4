"""Debian's Chromium for the browser tests: installed when missing (as root, like CI on
these machines), else the tests fail saying why; never skipped."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from playwright.async_api import Browser, async_playwright

CHROMIUM = Path("/usr/bin/chromium")
# Headless as the machine's probe runs it: no sandbox (root), no GPU, and none of the
# background connections a closed network refuses.
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]

# The action buttons of table rows whose right edge lies past their scrolling box's.
CLIPPED_ACTIONS = """[...document.querySelectorAll(
        '.scroll td.actions button, .scroll td.actions a')]
    .filter(b => b.getBoundingClientRect().right
                 > b.closest('.scroll').getBoundingClientRect().right + 0.5)
    .map(b => b.textContent.trim())"""


def ensure_chromium() -> Path:
    """The path of Chromium, installing Debian's package first when it is missing.

    Raises:
        RuntimeError: it is missing and cannot be installed here (not root, no apt-get, or the
            install failed).
    """
    if CHROMIUM.exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(
            f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "chromium"]
    done = subprocess.run(
        install, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        subprocess.run(
            ["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600, check=False
        )
        done = subprocess.run(
            install, env=env, capture_output=True, text=True, timeout=900, check=False
        )
    if done.returncode != 0 or not CHROMIUM.exists():
        raise RuntimeError(f"could not install chromium: {done.stderr[-2000:]}")
    return CHROMIUM


@asynccontextmanager
async def chromium_browser() -> AsyncIterator[Browser]:
    """Debian's Chromium, headless, launched the one way every browser test launches it."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=str(ensure_chromium()), headless=True, args=LAUNCH_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()
