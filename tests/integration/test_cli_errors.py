"""The whole `horae` CLI turns errors into one line on stderr, never a traceback: exit 2 for a usage
error (a bad option or argument, a module --app cannot import, a refused value, a bad config file),
1 for a runtime one (Redis or PostgreSQL unreachable, an unexpected failure); no password of a URL
reaches the line."""

from __future__ import annotations

import re
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from scheduler.api import Scheduler
from scheduler.cli.main import cli
from tests.conftest import ROOT
from tests.procs import child_env

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
DEAD_REDIS = "redis://:s3cret@127.0.0.1:1/0"


def horae(*args: str) -> tuple[int, list[str], str]:
    """Exit code, stderr's lines that are not log records, and everything printed."""
    result = CliRunner().invoke(cli, list(args), prog_name="horae")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    errors = [line for line in result.stderr.splitlines() if not LOG_LINE.match(line)]
    return result.exit_code, errors, result.output


@pytest.mark.parametrize(
    ("args", "code", "start"),
    [
        (("jobs", "show"), 2, "Error: Missing argument 'JOB_ID'. (see 'horae jobs show --help')"),
        (("jobs", "list", "--limit", "0"), 2, "Error: Invalid value for '--limit'"),
        (("jobs", "list", "--state", "done"), 2, "Error: Invalid value for '--state'"),
        (("--no-such-option", "jobs", "list"), 2, "Error: No such option '--no-such-option'"),
        (("jobs", "frobnicate"), 2, "Error: No such command 'frobnicate'"),
        (
            ("--config", "/nonexistent/horae.toml", "jobs", "list"),
            2,
            "Error: config file /nonexistent/horae.toml",
        ),
        (("worker", "--app", "missing_module_xyz"), 2, "Error: cannot import 'missing_module_xyz'"),
        (
            ("worker", "--concurrency", "0", "--all-topics"),
            2,
            "Error: Invalid value for '--concurrency': 0 is not",
        ),
        (
            ("worker", "--concurrency", "-5", "--all-topics"),
            2,
            "Error: Invalid value for '--concurrency': -5 is not",
        ),
        (
            ("--redis-url", DEAD_REDIS, "jobs", "list"),
            1,
            "Error: cannot reach Redis at redis://:***@127.0.0.1:1/0",
        ),
        (("--redis-url", DEAD_REDIS, "workers", "list", "--json"), 1, "Error: cannot reach Redis"),
        (("--redis-url", DEAD_REDIS, "jobs", "cancel", "x"), 1, "Error: cannot reach Redis"),
        (("--redis-url", DEAD_REDIS, "dlq", "list", "x.dlq"), 1, "Error: cannot reach Redis"),
        (("--redis-url", DEAD_REDIS, "topics", "list"), 1, "Error: cannot reach Redis"),
        (("--redis-url", DEAD_REDIS, "cron", "list"), 1, "Error: cannot reach Redis"),
        (
            (
                "--redis-url",
                DEAD_REDIS,
                "--database-url",
                "postgresql://u:pgs3cret@127.0.0.1:1/x",
                "audit",
                "failures",
            ),
            1,
            "Error: audit trail query failed",
        ),
        (
            ("--redis-url", DEAD_REDIS, "audit", "failures", "--since", "soon"),
            2,
            "Error: Invalid value for --since",
        ),
    ],
)
def test_one_line_and_the_exit_code(args: tuple[str, ...], code: int, start: str) -> None:
    got, errors, output = horae(*args)
    assert (got, len(errors)) == (code, 1) and errors[0].startswith(start), (got, errors)
    assert "Traceback" not in output and "s3cret" not in output
    if code == 1 and "cannot reach" in start:
        assert "check that the server runs" in errors[0]


def test_a_bad_value_against_redis_is_a_usage_error(redis_url: str, namespace: str) -> None:
    code, errors, _ = horae(
        "--redis-url", redis_url, "--namespace", namespace, "jobs", "list", "--cursor", "zzz"
    )
    assert code == 2 and len(errors) == 1 and errors[0].startswith("Error: cursor"), errors


def test_an_unexpected_error_is_one_line_and_keeps_its_traceback_under_v(
    redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: Scheduler, topic: str | None = None) -> dict[str, int]:
        raise RuntimeError("something broke")

    monkeypatch.setattr(Scheduler, "stats", broken)
    code, errors, _ = horae("--redis-url", redis_url, "--namespace", namespace, "jobs", "stats")
    assert (code, errors) == (
        1,
        ["Error: RuntimeError: something broke (run with -v for the traceback)"],
    )
    result = CliRunner().invoke(
        cli, ["--redis-url", redis_url, "--namespace", namespace, "-v", "jobs", "stats"]
    )
    assert isinstance(result.exception, RuntimeError)


def test_the_installed_command_prints_one_line() -> None:
    """Through a real process: stderr has the error line and log records only, exit status 1."""
    env = child_env()
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from scheduler.cli.main import main; main()",
            "--redis-url",
            DEAD_REDIS,
            "jobs",
            "list",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    errors = [line for line in done.stderr.splitlines() if not LOG_LINE.match(line)]
    assert (
        done.returncode == 1
        and len(errors) == 1
        and errors[0].startswith("Error: cannot reach Redis")
    ), done.stderr
    assert "s3cret" not in done.stderr + done.stdout and done.stdout == ""


def _commands(group: click.Group, path: str) -> list[tuple[str, click.Command]]:
    found = []
    for name, command in group.commands.items():
        found.append((f"{path} {name}", command))
        if isinstance(command, click.Group):
            found += _commands(command, f"{path} {name}")
    return found


def test_every_subcommand_and_option_has_help_text() -> None:
    commands = _commands(cli, "horae")
    assert {
        "horae jobs list",
        "horae jobs show",
        "horae workers list",
        "horae cron show",
        "horae audit failures",
    } <= {p for p, _ in commands}
    assert [p for p, c in commands if not (c.help or "").strip()] == []
    assert [
        (p, o.opts)
        for p, c in commands
        for o in c.params
        if isinstance(o, click.Option) and not o.help
    ] == []
    for path, _ in commands:
        result = CliRunner().invoke(cli, [*path.split()[1:], "--help"], prog_name="horae")
        assert result.exit_code == 0 and "Usage: " + path in result.output, path
