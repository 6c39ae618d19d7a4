"""`horae worker` as a user runs it from their project directory (issue 19): `--app
myapp` imports ./myapp.py; no listeners refuses to start; the nightly analytics cron
is added only when asked (`--nightly` or `[analytics] nightly = true`), and said."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from listeners import ListenerRegistry, default_registry
from scheduler.cli.main import cli
from tests.integration.engine_fixtures import make_scheduler
from tests.logging_guard import root_logging  # noqa: F401  (a fixture)
from tests.procs import HORAE, READY_LINE, ROOT

MYAPP = """
from listeners import on_event

@on_event("myapp.ping")
async def ping(event):
    pass
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project directory with myapp.py, outside the horae checkout."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "myapp.py").write_text(MYAPP)
    return root


def worker_env(project: Path, redis_url: str, database_url: str, namespace: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORAE_", "XDG_"))}
    return {
        **env,
        "PYTHONPATH": str(ROOT),
        "HOME": str(project.parent / "home"),
        "HORAE_REDIS_URL": redis_url,
        "HORAE_DATABASE_URL": database_url,
        "HORAE_NAMESPACE": namespace,
    }


def run_worker_until_ready(
    args: list[str], cwd: Path, env: dict[str, str], timeout: float = 30.0
) -> str:
    """Start `horae worker ARGS` in `cwd`, wait for its ready line, SIGTERM it; its stderr."""
    log_path = cwd.parent / f"worker-{time.monotonic_ns()}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([HORAE, "worker", *args], cwd=cwd, env=env, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + timeout
            while READY_LINE not in log_path.read_text(errors="replace"):
                assert proc.poll() is None, (
                    f"worker exited {proc.returncode}:\n{log_path.read_text()}"
                )
                assert time.monotonic() < deadline, f"worker not ready:\n{log_path.read_text()}"
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0, log_path.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return log_path.read_text(errors="replace")


async def cron_names(redis_url: str, namespace: str) -> list[str]:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        return [c.name for c in await s.list_crons()]


async def test_app_from_the_current_directory_and_no_nightly_unless_asked(
    project: Path, redis_url: str, database_url: str, namespace: str
) -> None:
    out = run_worker_until_ready(
        ["--app", "myapp"], project, worker_env(project, redis_url, database_url, namespace)
    )

    assert "nightly" not in out, out
    assert await cron_names(redis_url, namespace) == []


@pytest.mark.parametrize("asked_by", ["--nightly", "config file"])
async def test_nightly_when_asked_is_added_and_said(
    project: Path, redis_url: str, database_url: str, namespace: str, asked_by: str
) -> None:
    args = ["--app", "myapp"]
    if asked_by == "--nightly":
        args.append("--nightly")
    else:
        (project / "horae.toml").write_text("[analytics]\nnightly = true\n")
        (project / "sub").mkdir()  # run from a subdirectory: the file is found upward
    cwd = project if asked_by == "--nightly" else project / "sub"
    if asked_by != "--nightly":
        (cwd / "myapp.py").write_text(MYAPP)

    out = run_worker_until_ready(args, cwd, worker_env(project, redis_url, database_url, namespace))

    assert (
        f"nightly analytics on: cron horae.audit.nightly "
        f"(30 2 * * * UTC) in namespace {namespace!r}" in out
    ), out
    assert await cron_names(redis_url, namespace) == ["horae.audit.nightly"]


@pytest.mark.usefixtures("root_logging")
@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            [],
            {},
            "the worker has no listeners: pass --app "
            "module[:registry], or --all-topics to claim every topic",
        ),
        (
            ["--all-topics", "--nightly"],
            {"HORAE_AUDIT__RELAY": "false"},
            "the nightly analytics report needs this worker to "
            "relay the audit trail ([audit] enabled and relay)",
        ),
        (
            ["--all-topics"],
            {"HORAE_ANALYTICS__NIGHTLY": "true", "HORAE_AUDIT__ENABLED": "false"},
            "the nightly analytics report needs this worker to "
            "relay the audit trail ([audit] enabled and relay)",
        ),
    ],
)
def test_refused_before_connecting_one_line_exit_2(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    # Without --app the worker serves the default registry, which the test modules of the
    # pytest plugin fill at collection (module-level @on_event, as users write them).
    monkeypatch.setattr(default_registry, "__dict__", ListenerRegistry().__dict__)
    monkeypatch.chdir(project)
    env = {**env, "HOME": str(project.parent / "home"), "HORAE_REDIS_URL": "redis://127.0.0.1:1/0"}

    result = CliRunner().invoke(cli, ["worker", *args], env=env)

    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [f"Error: {message}"]
