"""Every `horae` command with Redis and PostgreSQL unreachable: exit status 1 and one error line
on stderr, no traceback, no password. The commands are enumerated from the click group, so a new
one must get a row here (or a reason why it keeps running)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from scheduler.cli.main import cli
from tests.integration.test_cli_errors import LOG_LINE

DEAD = [
    "--redis-url",
    "redis://:s3cret@127.0.0.1:1/0",
    "--database-url",
    "postgresql://u:pgs3cret@127.0.0.1:1/x",
]

# command path -> its arguments
COMMANDS: dict[str, list[str]] = {
    "audit failures": [],
    "audit grant": ["reader_role"],
    "audit lag": [],
    "audit prune": [],
    "audit show": ["j/x"],
    "console": ["--port", "0"],
    "cron add": ["n/x", "0 3 * * *", "--topic", "t/x"],
    "cron list": [],
    "cron delete": ["n/x"],
    "cron pause": ["n/x"],
    "cron resume": ["n/x"],
    "cron show": ["n/x"],
    "demo": [],
    "dlq delete": ["t/x", "j/x"],
    "dlq list": ["t/x"],
    "dlq purge": ["t/x", "--yes"],
    "dlq replay": ["t/x", "j/x"],
    "dlq topics": ["--json"],
    "jobs cancel": ["j/x"],
    "jobs delete": ["j/x"],
    "jobs list": [],
    "jobs flow": ["j/x"],
    "jobs reschedule": ["j/x", "2030-01-01T00:00:00Z"],
    "jobs retry": ["j/x"],
    "jobs show": ["j/x"],
    "jobs stats": [],
    "migrate": [],
    "partitions migrate": ["--to", "2"],
    "partitions status": [],
    "report": ["--since", "2030-01-01", "--until", "2030-01-01"],
    "topics blocked": ["t/x"],
    "topics delete": ["t/x"],
    "topics forget": ["t/x"],
    "topics list": [],
    "topics set": ["t/x", "--concurrency", "2"],
    "topics show": ["t/x"],
    "worker": ["--all-topics", "--startup-wait", "0"],  # (else it waits for Redis: 60 s)
    "workers list": [],
    "workers drain": ["w/x"],
}
# Commands that do not fail on unreachable servers, by design (each with the reason).
NOT_FAILING = {
    "audit relay": (
        "a relay keeps retrying until its servers answer (a service, stopped by a signal)"
    ),
    "services status": "reports each server's state, unreachable included (exit 0)",
    "services start": (
        "starts this data directory's embedded servers "
        "(the test run's own); reaches no configured one"
    ),
    "config show": "prints the settings and their sources; reaches no server",
    "services stop": (
        "stops this data directory's embedded servers: it would stop the test run's own"
    ),
}


# Deprecated commands kept one release (hidden) -> the command replacing them, with its arguments.
DEPRECATED: dict[str, str] = {
    "cron remove": "cron delete",
    "workers": "workers list",
}


def leaf_commands(group: click.Group, prefix: str = "") -> set[str]:
    """Every command path that runs something: leaves, and groups that run without a subcommand."""
    out: set[str] = set()
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            out |= leaf_commands(command, f"{path} ") | (
                {path} if command.invoke_without_command else set()
            )
        else:
            out.add(path)
    return out


def test_the_table_names_every_command() -> None:
    assert leaf_commands(cli) == set(COMMANDS) | set(NOT_FAILING) | set(DEPRECATED)
    assert not set(COMMANDS) & set(NOT_FAILING) and set(DEPRECATED.values()) <= set(COMMANDS)


def _hidden(group: click.Group, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, command in group.commands.items():
        out |= {f"{prefix}{name}"} if command.hidden else set()
        if isinstance(command, click.Group):
            out |= _hidden(command, f"{prefix}{name} ")
    return out


def test_only_the_deprecated_commands_are_hidden() -> None:
    assert _hidden(cli) == set(DEPRECATED) - {"workers"}  # (`workers` alone: the group, shown)


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_with_the_servers_down_a_command_exits_1_with_one_line(path: str, tmp_path: object) -> None:
    args = [*DEAD, *path.split(), *COMMANDS[path]]
    if path == "report":
        args += ["--out", str(tmp_path)]
    result = CliRunner().invoke(cli, args, prog_name="horae")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    # (log records and the progress bar `report` draws on stderr are not error lines)
    errors = [
        line
        for line in result.stderr.splitlines()
        if line.strip() and not LOG_LINE.match(line) and "\u2501" not in line
    ]
    assert result.exit_code == 1 and len(errors) == 1 and errors[0].startswith("Error: "), (
        result.exit_code,
        errors,
    )
    assert "Traceback" not in result.output and "s3cret" not in result.output, result.output


@pytest.mark.parametrize("path", sorted(DEPRECATED))
def test_a_deprecated_command_warns_and_still_runs(path: str) -> None:
    new = DEPRECATED[path]
    args = [*DEAD, *path.split(), *COMMANDS[new]]
    result = CliRunner().invoke(cli, args, prog_name="horae")
    lines = [
        line for line in result.stderr.splitlines() if line.strip() and not LOG_LINE.match(line)
    ]
    assert lines == [
        f"Warning: `horae {path}` is deprecated and will be removed in the next release; "
        f"use `horae {new}`",
        lines[-1],
    ], lines
    # then it runs as the new command does: here, to the unreachable servers
    assert result.exit_code == 1 and lines[-1].startswith("Error: cannot reach Redis"), lines
