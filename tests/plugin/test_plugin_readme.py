"""The testing guide's first example (docs/how-to/testing.md, its test_billing.py) runs as
written: the file block is copied verbatim into a test file and run by pytest in a child process
(with a test whose listener fails after the last advance, which must fail that test's teardown).
tests/docs/ runs the page too; this test also checks what each test reported."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "how-to" / "testing.md"

# Loads the plugin where this checkout is not installed with its entry point yet.
CONFTEST = """
import importlib

def pytest_configure(config):
    plugin = importlib.import_module("scheduler.testing.plugin")
    if not config.pluginmanager.is_registered(plugin):
        config.pluginmanager.register(plugin, "horae")
"""

LATE_ERROR = """
import asyncio
import pytest
from horae import on_event

@on_event("late.boom")
async def boom(event):
    raise KeyError("boom after the last advance")

@pytest.mark.asyncio
async def test_an_error_after_the_last_advance_fails_the_teardown(horae, horae_clock):
    await horae.schedule_in("late.boom", 0)      # runs at once, in the background
    for _ in range(1000):
        if horae_clock.errors:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the listener did not run")
"""


def readme_example() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    [code] = re.findall(r'^```python title="test_billing.py"\n(.*?)^```', text, re.DOTALL | re.M)
    return code


def test_the_readme_example_runs_as_written(
    tmp_path: Path, redis_url: str, server_dsn: str
) -> None:
    (tmp_path / "test_readme_example.py").write_text(readme_example(), encoding="utf-8")
    (tmp_path / "test_late_error.py").write_text(LATE_ERROR, encoding="utf-8")
    (tmp_path / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nfilterwarnings = error\nasyncio_default_fixture_loop_scope = function\n",
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "HORAE_REDIS_URL": redis_url,
        "HORAE_DATABASE_URL": server_dsn,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.pop("HORAE_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert re.search(
        r"PASSED test_readme_example.py::test_invoices_go_out_at_3am_chicago_time", out
    ), out
    assert re.search(
        r"PASSED test_readme_example.py::test_a_declined_card_fails_after_its_retries", out
    ), out
    assert re.search(
        r"ERROR test_late_error.py::test_an_error_after_the_last_advance_fails_the_teardown", out
    ), out
    assert (
        "KeyError: 'boom after the last advance'" in out
        and "1 listener error(s) after the last advance" in out
    ), out
    assert re.search(r"\b3 passed, 1 error\b", out), out
