"""axe-core for the accessibility test, from the npm registry: installed on first use into
.horae/npm (git-ignored) with the machine's npm, the version pinned here, so a fresh clone
gets the same rules; the test fails saying why when npm is missing or the install fails."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

AXE_VERSION = "4.14.1"
ROOT = Path(__file__).resolve().parents[2]
PREFIX = ROOT / ".horae" / "npm"
SCRIPT = PREFIX / "node_modules" / "axe-core" / "axe.min.js"


def installed_version() -> str | None:
    """The version of axe-core under PREFIX, or None when it is not there."""
    package = SCRIPT.parent / "package.json"
    if not SCRIPT.is_file() or not package.is_file():
        return None
    import json

    return str(json.loads(package.read_text()).get("version"))


def ensure_axe() -> str:
    """axe-core's script (axe.min.js), installing the pinned version first when needed.

    Raises:
        RuntimeError: npm is missing, or the install failed (its output's tail said).
    """
    if installed_version() != AXE_VERSION:
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is missing: install Debian's npm to fetch axe-core")
        PREFIX.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [npm, "install", "--prefix", str(PREFIX), "--no-audit", "--no-fund",
             f"axe-core@{AXE_VERSION}"],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        if done.returncode != 0 or installed_version() != AXE_VERSION:
            raise RuntimeError(
                f"npm install axe-core@{AXE_VERSION} failed: {(done.stderr or done.stdout)[-2000:]}"
            )
    return SCRIPT.read_text()
