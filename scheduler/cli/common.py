"""What every `horae` command shares: the one place that turns an exception into one error
line and an exit status (HoraeGroup), whole tables when piped (print_table) and the JSON
form of values (to_json: datetimes RFC 3339 UTC with milliseconds, tracebacks as lists of lines)
and the one JSON document a --json option prints (a list: {"items": [...], "cursor": ...}).

Exit status: 0 success; 2 a usage error (a bad option or argument, a refused value, a
module --app cannot import, a bad config value); 1 a runtime error (Redis or PostgreSQL
unreachable, no such job). A URL's password never reaches the error line.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from horae.settings import Settings
from scheduler.core.errors import ConfigError, ScheduleError, SchedulerError, StorageError
from scheduler.core.outbox import error_doc  # noqa: F401 - the JSON form of an error record, for the commands
from scheduler.core.procutil import hide_password
from scheduler.core.progress import LogLine, Progress
from scheduler.core.timeutil import rfc3339

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.IGNORECASE)


class Invalid(click.ClickException):
    """A usage or validation error: one line, exit status 2."""

    exit_code = 2


def warn_renamed(old: str, new: str) -> None:
    """One line on stderr for a deprecated command (a hidden alias kept one release): the command
    that replaces it. stdout stays as it was, for scripts that read it."""
    click.echo(
        f"Warning: `horae {old}` is deprecated and will be removed in the next release; "
        f"use `horae {new}`",
        err=True,
    )


def mask_urls(text: str) -> str:
    """`text` with the password of every URL in it replaced by ***."""
    return _URL.sub(lambda m: hide_password(m.group(0)), text)


def _usage_line(exc: click.UsageError) -> str:
    hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
    return exc.format_message().rstrip() + hint


def one_line(exc: BaseException) -> click.ClickException:
    """The ClickException a command's exception becomes: one line, the exit status of its kind."""
    if isinstance(exc, click.UsageError):
        return Invalid(mask_urls(_usage_line(exc)))
    if isinstance(exc, click.ClickException):
        masked = mask_urls(exc.format_message())
        if masked == exc.format_message():
            return exc
        return Invalid(masked) if exc.exit_code == 2 else click.ClickException(masked)
    if isinstance(exc, (ScheduleError, ConfigError)):
        return Invalid(mask_urls(str(exc)))
    if isinstance(exc, ImportError):
        return Invalid(
            f"cannot import {exc.name or 'a module'!r} ({exc}): check --app module[:registry] and "
            "that the module is importable from the current directory"
        )
    if (
        isinstance(exc, StorageError)
        or isinstance(exc, (OSError, TimeoutError))
        or (type(exc).__module__.split(".")[0] in ("redis", "asyncpg"))
    ):
        return click.ClickException(
            f"{mask_urls(str(exc) or type(exc).__name__)} (check that the server runs "
            f"and that --redis-url / --database-url, or HORAE_REDIS_URL / "
            f"HORAE_DATABASE_URL, point at it)"
        )
    if isinstance(exc, SchedulerError):
        return click.ClickException(mask_urls(str(exc)))
    return click.ClickException(
        f"{type(exc).__name__}: {mask_urls(str(exc))} (run with -v for the traceback)"
    )


class HoraeGroup(click.Group):
    """The root group: every exception of a subcommand becomes one line (one_line); with -v an
    unexpected one keeps its traceback."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise one_line(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            # The reader went away (`horae jobs list | head`): not an error of ours or of a
            # server. Quiet, as the shell's own tools are; stdout is closed so the interpreter's
            # last flush does not fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise click.exceptions.Exit(141) from None
        except Exception as exc:
            if ctx.meta.get("horae.verbose") and not isinstance(
                exc, (click.ClickException, SchedulerError, ImportError, OSError)
            ):
                raise
            raise one_line(exc) from exc


def no_relay(settings: Settings) -> Settings:
    """The settings of a command that does not read the audit: this process relays nothing, so it
    needs no PostgreSQL (the outbox is still written when the audit is on)."""
    return settings.model_copy(update={"audit": settings.audit.model_copy(update={"relay": False})})


def print_table(console: Console, table: Table) -> None:
    """Print a table whole: on a terminal long cells wrap; piped, each row stays one line."""
    out = console if console.is_terminal else Console(width=100_000, no_color=True, highlight=False)
    out.print(table)


def iso(value: datetime | None) -> str | None:
    """An instant as every output shows it (timeutil.rfc3339: 2026-11-27T00:45:12.020Z; None stays
    None)."""
    return rfc3339(value)


def when_text(value: datetime | None) -> str:
    """An instant in a table cell: rfc3339, "-" when there is none."""
    return rfc3339(value) or "-"


def error_lines(error: Mapping[str, Any] | None) -> list[str]:
    """An error record as a table shows it (`jobs show`, `audit show`): "Type: first line of the
    message", the listener that raised it, the other failures, then the traceback's lines."""
    if not error:
        return []
    message = str(error.get("message") or "")
    lines = [f"{error.get('type', '')}: {message.splitlines()[0] if message else ''}"]
    if error.get("listener"):
        lines.append(f"listener: {error['listener']}")
    lines += [f"also failed: {other}" for other in error.get("other_failures") or ()]
    trace = error.get("traceback") or ""
    lines += trace.splitlines() if isinstance(trace, str) else [str(line) for line in trace]
    return lines


def to_json(value: Any) -> Any:
    """A value in its JSON form: dataclasses as objects of their fields, enums as their value,
    datetimes ISO 8601 UTC, timedeltas as seconds, tuples as lists, `last_error` with its
    traceback as lines; a Progress as {percent, message}, a log line as {attempt, at, line}."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Progress):
        return {"percent": value.percent, "message": value.message}
    if isinstance(value, LogLine):
        return {"attempt": value.attempt, "at": iso(value.at), "line": str(value)}
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: (
                to_json(error_doc(getattr(value, f.name)))
                if f.name == "last_error"
                else to_json(getattr(value, f.name))
            )
            for f in fields(value)
        }
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def echo_json(value: Any) -> None:
    """Print one JSON document."""
    click.echo(json.dumps(to_json(value), default=str))


def echo_items(items: Any, cursor: str | None = None) -> None:
    """Print a list as the one JSON document every --json list is: {"items": [...], "cursor": ...}
    (cursor: the next page's, null when there is none)."""
    echo_json({"items": list(items), "cursor": cursor})
