"""`horae topics`: list, show, set and delete topics' configuration (TopicOptions) and show a
key_strict_fifo topic's blocked keys (thin wrappers over the Scheduler facade; registered by
scheduler/cli/main.py).

Errors are one line on stderr: exit 2 for a usage or validation error (a ScheduleError:
nothing was stored), 1 for anything else (Redis unreachable, no such topic).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from horae.settings import Settings
from scheduler.api import Scheduler
from scheduler.cli.common import Invalid, echo_items, print_table, when_text
from scheduler.core.errors import ScheduleError, TopicInUse
from scheduler.core.flow import RateLimit
from scheduler.core.retry import BACKOFF_TYPES, JITTER_MODES, RetryPolicy
from scheduler.core.timeutil import parse_duration
from scheduler.core.topic_options import POLICIES, TopicOptions, describe
from scheduler.facade.listing import every_topic
from scheduler.store.reads import COUNT_KEYS
from scheduler.store.topic_memory import KnownTopic

Run = Callable[[Any], Any]
# Fields `set --unset` clears (policy is fixed once stored).
CLEARABLE = (
    "retry",
    "timeout",
    "rate_limit",
    "concurrency",
    "priority_default",
    "warning_size",
    "dead_letter",
)


class OneLineCommand(click.Command):
    """A subcommand whose usage errors (a bad option value, a missing argument) are one line, exit
    2."""

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
            raise Invalid(exc.format_message()) from exc


@contextmanager
def _refusals() -> Iterator[None]:
    """A ScheduleError (refused input, nothing stored) becomes exit status 2."""
    try:
        yield
    except TopicInUse as exc:
        raise Invalid(str(exc).replace("pass force=True", "pass --force")) from exc
    except ScheduleError as exc:
        raise Invalid(str(exc)) from exc


def _ms_text(ms: int | None) -> str:
    """Milliseconds in the largest unit that divides them: 90000 -> "90s", 7200000 -> "2h"."""
    if ms is None:
        return "-"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _cells(doc: dict[str, Any]) -> dict[str, str]:
    """The table text of each field of a topic's JSON form."""
    retry, rl = doc["retry"], doc["rate_limit"]
    if retry is not None:
        b = retry["backoff"]
        retry_text = (
            f"{retry['attempts']} attempts, {b['type']} {_ms_text(b['delay'])} "
            f"(max {_ms_text(b['max_delay'])}, jitter {b['jitter']})"
        )
    return {
        "policy": doc["policy"],
        "retry": "-" if retry is None else retry_text,
        "timeout": _ms_text(doc["timeout_ms"]),
        "rate limit": "-"
        if rl is None
        else f"{rl['max']}/{_ms_text(rl['per_ms'])}" + (" per key" if rl["per_key"] else ""),
        "concurrency": "-" if doc["concurrency"] is None else str(doc["concurrency"]),
        "priority": str(doc["priority_default"]),
        "warning size": "-" if doc["warning_size"] is None else str(doc["warning_size"]),
        "dead letter": doc["dead_letter"] or "-",
    }


def _duration(text: str) -> float | str:
    """A CLI duration: seconds as a plain number, or "500ms"/"30s"/"5m"/"1h30m"/"1d12h"."""
    try:
        return float(text)
    except ValueError:
        return text


def parse_rate_limit(text: str, per_key: bool) -> RateLimit:
    """`MAX/PER` ("50/1s", "10/500ms", "5/m": PER a duration or a bare unit) as a RateLimit.

    Raises:
        Invalid: not MAX/PER; InvalidFlowOption: out of bounds.
    """
    max_text, sep, per_text = text.partition("/")
    per_text = per_text.strip()
    if not sep or not max_text.strip().isdigit() or not per_text:
        raise Invalid(f"--rate-limit must be MAX/PER such as 50/1s or 10/500ms; got {text!r}")
    per = f"1{per_text}" if per_text in ("ms", "s", "m", "h", "d") else _duration(per_text)
    return RateLimit(int(max_text), per, per_key)


def _retry(
    base: RetryPolicy,
    attempts: int | None,
    backoff: str | None,
    delay: str | None,
    max_delay: str | None,
    jitter: str | None,
) -> dict[str, Any]:
    """The plain retry form: `base` with the given parts replaced (checked by configure_topic)."""
    plain = base.to_dict()
    b = plain["backoff"]
    if attempts is not None:
        plain["attempts"] = attempts
    if backoff is not None:
        b["type"] = backoff
    if delay is not None:
        b["delay"] = round(parse_duration(_duration(delay), "--retry-delay") * 1000)
    if max_delay is not None:
        b["max_delay"] = round(parse_duration(_duration(max_delay), "--retry-max-delay") * 1000)
    if jitter is not None:
        b["jitter"] = jitter
    return plain


_TOPIC_COLUMNS = (
    "topic",
    "configured",
    "policy",
    "concurrency",
    "rate limit",
    "timeout",
    "priority",
    "warning size",
    "dead letter",
    "retry",
)


def register(cli: click.Group, run: Run, console: Console) -> None:
    """Add the `topics` group to the `horae` command."""

    @cli.group()
    def topics() -> None:
        """Topics' configuration: policy, retry, timeout, rate limit, concurrency, priority, dead
        letters."""

    @topics.command("list", cls=OneLineCommand)
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help='One JSON object {"items": [...], "cursor": null} instead of a table.',
    )
    @click.pass_obj
    def topics_list(settings: Settings, as_json: bool) -> None:
        """Every topic that has jobs, a configuration or memory (as the console lists them), by
        name: its options (the defaults when it has no configuration) and its jobs per state."""

        async def main() -> tuple[list[dict[str, Any]], list[KnownTopic]]:
            async with Scheduler(settings=settings) as s:
                names = await every_topic(s)
                found = await asyncio.gather(*(s.get_topic(n) for n in names))
                counts = await s.stats_by_topic()
                known = await s.known_topics()
            zero = dict.fromkeys(COUNT_KEYS, 0)
            return [
                {
                    **describe(n, o or TopicOptions()),
                    "configured": o is not None,
                    "counts": counts.get(n, zero),
                }
                for n, o in zip(names, found)
            ], known

        docs, known = run(main())
        if as_json:
            echo_items(docs)
            return
        table = Table(*_TOPIC_COLUMNS, title=f"topics in {settings.namespace}")
        for doc in docs:
            c = _cells(doc)
            table.add_row(
                *(
                    Text(x)
                    for x in (
                        doc["name"],
                        "yes" if doc["configured"] else "no",
                        c["policy"],
                        c["concurrency"],
                        c["rate limit"],
                        c["timeout"],
                        c["priority"],
                        c["warning size"],
                        c["dead letter"],
                        c["retry"],
                    )
                )
            )
        print_table(console, table)
        print_table(console, known_table(known, settings.namespace))

    @topics.command("forget", cls=OneLineCommand)
    @click.argument("name")
    @click.pass_obj
    def topics_forget(settings: Settings, name: str) -> None:
        """Forget that a worker served topic NAME: its waiting jobs complete as no_listener (unless
        a worker with listeners for it serves it again)."""

        async def main() -> tuple[bool, bool]:
            async with Scheduler(settings=settings) as s:
                with _refusals():
                    forgotten = await s.forget_topic(name)
                live = any(name in w.topics for w in await s.workers())
            return forgotten, live

        forgotten, live = run(main())
        if not forgotten:
            raise click.ClickException(
                f"topic {name!r} is not known in namespace {settings.namespace!r} "
                "(no worker served it within [worker] topic_memory)"
            )
        click.echo(
            f"forgot topic {name}"
            + (
                ": a live worker serves it, so its next heartbeat makes it known again"
                if live
                else ""
            )
        )

    @topics.command("show", cls=OneLineCommand)
    @click.argument("name")
    @click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
    @click.pass_obj
    def topics_show(settings: Settings, name: str, as_json: bool) -> None:
        """The stored configuration of topic NAME."""

        async def main() -> TopicOptions | None:
            async with Scheduler(settings=settings) as s:
                with _refusals():
                    return await s.get_topic(name)

        options = run(main())
        if options is None:
            raise click.ClickException(
                f"no configuration for topic {name!r} in namespace {settings.namespace!r}"
            )
        _show(console, describe(name, options), as_json)

    @topics.command("set", cls=OneLineCommand)
    @click.argument("name")
    @click.option(
        "--policy",
        type=click.Choice(POLICIES),
        default=None,
        help="How jobs queue (fixed once stored; default standard for a new topic).",
    )
    @click.option(
        "--concurrency", type=int, default=None, help="At most this many running at once (>= 1)."
    )
    @click.option(
        "--rate-limit",
        default=None,
        metavar="MAX/PER",
        help="At most MAX jobs started per PER, e.g. 50/1s (PER 1ms..1d).",
    )
    @click.option(
        "--rate-per-key/--no-rate-per-key",
        default=None,
        help="The rate limit applies per job key (default: per topic; kept when omitted).",
    )
    @click.option(
        "--timeout", default=None, metavar="DURATION", help="Default per-attempt limit, e.g. 2m."
    )
    @click.option(
        "--priority-default",
        default=None,
        metavar="PRIORITY",
        help="Jobs' default priority: -1000..1000, or low, normal, high.",
    )
    @click.option(
        "--warning-size", type=int, default=None, help="Warn when this many jobs wait (>= 1)."
    )
    @click.option(
        "--dead-letter",
        default=None,
        metavar="TOPIC",
        help="Where jobs failing for good are copied.",
    )
    @click.option("--retry-attempts", type=int, default=None, help="Attempts in total (1..20).")
    @click.option(
        "--retry-backoff", type=click.Choice(BACKOFF_TYPES), default=None, help="Backoff type."
    )
    @click.option(
        "--retry-delay",
        default=None,
        metavar="DURATION",
        help="First retry delay, e.g. 30s (1s..1h).",
    )
    @click.option(
        "--retry-max-delay",
        default=None,
        metavar="DURATION",
        help="Cap of any retry delay (1s..1d).",
    )
    @click.option(
        "--retry-jitter",
        type=click.Choice(JITTER_MODES),
        default=None,
        help="Jitter of retry delays.",
    )
    @click.option(
        "--unset",
        multiple=True,
        type=click.Choice(CLEARABLE),
        help="Clear this field (repeatable).",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print the stored configuration as JSON.")
    @click.pass_obj
    def topics_set(
        settings: Settings,
        name: str,
        policy: str | None,
        concurrency: int | None,
        rate_limit: str | None,
        rate_per_key: bool | None,
        timeout: str | None,
        priority_default: str | None,
        warning_size: int | None,
        dead_letter: str | None,
        retry_attempts: int | None,
        retry_backoff: str | None,
        retry_delay: str | None,
        retry_max_delay: str | None,
        retry_jitter: str | None,
        unset: tuple[str, ...],
        as_json: bool,
    ) -> None:
        """Create or change topic NAME's configuration: the options given change, the others stay
        (read, then written; --unset clears a field). A stored policy cannot change."""
        retry_parts = (retry_attempts, retry_backoff, retry_delay, retry_max_delay, retry_jitter)
        given = {
            "retry": any(p is not None for p in retry_parts),
            "timeout": timeout is not None,
            "rate_limit": rate_limit is not None,
            "concurrency": concurrency is not None,
            "priority_default": priority_default is not None,
            "warning_size": warning_size is not None,
            "dead_letter": dead_letter is not None,
        }
        both = [f for f in unset if given[f]]
        if both:
            raise Invalid(f"--unset {both[0]} and a value for it exclude each other")

        async def main() -> TopicOptions:
            async with Scheduler(settings=settings) as s:
                with _refusals():
                    current = await s.get_topic(name) or TopicOptions()
                    changes: dict[str, Any] = {f: None for f in unset}
                    changes.update(
                        {
                            k: v
                            for k, v in {
                                "policy": policy,
                                "concurrency": concurrency,
                                "warning_size": warning_size,
                                "dead_letter": dead_letter,
                                "priority_default": priority_default,
                                "timeout": None if timeout is None else _duration(timeout),
                            }.items()
                            if v is not None
                        }
                    )
                    if "priority_default" in unset:
                        changes["priority_default"] = 0
                    rl = current.rate_limit
                    if rate_limit is not None:
                        keyed = (
                            rate_per_key if rate_per_key is not None else bool(rl and rl.per_key)
                        )
                        changes["rate_limit"] = parse_rate_limit(rate_limit, keyed)
                    elif rate_per_key is not None:
                        if rl is None or "rate_limit" in unset:
                            raise Invalid(
                                "--rate-per-key needs a rate limit: give --rate-limit MAX/PER"
                            )
                        changes["rate_limit"] = replace(rl, per_key=rate_per_key)
                    if given["retry"]:
                        base = (
                            current.retry
                            if isinstance(current.retry, RetryPolicy)
                            else s.default_retry
                        )
                        changes["retry"] = _retry(base, *retry_parts)
                    await s.configure_topic(name, replace(current, **changes))
                stored = await s.get_topic(name)
            if stored is None:
                raise click.ClickException(f"topic {name!r} was deleted meanwhile")
            return stored

        _show(console, describe(name, run(main())), as_json)

    @topics.command("delete", cls=OneLineCommand)
    @click.argument("name")
    @click.option(
        "--force", is_flag=True, help="Delete even while the topic has jobs (the jobs stay)."
    )
    @click.pass_obj
    def topics_delete(settings: Settings, name: str, force: bool) -> None:
        """Delete topic NAME's configuration (refused while it has jobs, unless --force)."""

        async def main() -> bool:
            async with Scheduler(settings=settings) as s:
                with _refusals():
                    return await s.delete_topic(name, force)

        if not run(main()):
            raise click.ClickException(
                f"no configuration for topic {name!r} in namespace {settings.namespace!r}"
            )
        click.echo(f"deleted the configuration of topic {name}")

    @topics.command("blocked", cls=OneLineCommand)
    @click.argument("name")
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help='One JSON object {"items": [...], "cursor": null} instead of one key per line.',
    )
    @click.pass_obj
    def topics_blocked(settings: Settings, name: str, as_json: bool) -> None:
        """The keys of key_strict_fifo topic NAME whose queue is blocked, one per line, sorted."""

        async def main() -> list[str]:
            async with Scheduler(settings=settings) as s:
                with _refusals():
                    return await s.blocked_keys(name)

        keys = run(main())
        if as_json:
            echo_items(keys)
            return
        click.echo("\n".join(keys), nl=bool(keys))


_KNOWN_COLUMNS = (
    "known topic",
    "served now",
    "last served",
    "by",
    "waiting jobs",
    "waiting for a worker since",
)


def known_table(known: list[KnownTopic], namespace: str) -> Table:
    """The known topics (served within [worker] topic_memory), and the jobs of each that wait for a
    worker."""
    table = Table(*_KNOWN_COLUMNS, title=f"topics workers served in {namespace}")
    for t in known:
        table.add_row(
            *(
                Text(x)
                for x in (
                    t.topic,
                    "yes" if t.served else "no",
                    when_text(t.last_served),
                    f"{t.app} ({t.worker})",
                    str(t.waiting),
                    when_text(t.waiting_since),
                )
            )
        )
    return table


def _show(console: Console, doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(doc))
        return
    table = Table("field", "value", title=f"topic {doc['name']}")
    for field, text in _cells(doc).items():
        table.add_row(field, Text(text))
    print_table(console, table)
