"""The `horae` command: thin wrappers over the Scheduler facade."""

from __future__ import annotations

import asyncio
import faulthandler
import importlib
import json
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

try:  # first: checks that scheduler, listeners, audit and console are this distribution's
    from horae import _packages

    _packages.check_packages()
except ImportError as exc:  # a module of the user's shadows one of them (horae/_packages.py)
    raise SystemExit(f"Error: {exc}") from None

from horae.settings import Settings, load_settings
from listeners import ListenerRegistry, default_registry
from scheduler.api import Scheduler
from scheduler.cli.common import (
    HoraeGroup,
    echo_items,
    no_relay,
    print_table,
    warn_renamed,
    when_text,
)
from scheduler.cli.startup import serve_when_reachable
from scheduler.core.outbox import SCHEDULE_FAILED_TOPIC
from scheduler.observe.health import HealthServer, bind_host, worker_readiness
from scheduler.observe.logs import configure_logging
from scheduler.observe.telemetry import setup_telemetry

console = Console(width=None if sys.stdout.isatty() else 200)


def _load_app(spec: str | None) -> ListenerRegistry:
    """Import `module` or `module:attr` so its @on_event listeners register.

    `attr` may name a ListenerRegistry; otherwise the default registry is used.
    """
    if not spec:
        return default_registry
    module_name, _, attr = spec.partition(":")
    sys.path.insert(0, str(Path.cwd()))
    module = importlib.import_module(module_name)
    if attr:
        registry = getattr(module, attr)
        if not isinstance(registry, ListenerRegistry):
            raise click.BadParameter(
                f"{spec} is a {type(registry).__name__}, not a ListenerRegistry", param_hint="--app"
            )
        return registry
    return default_registry


@click.group(cls=HoraeGroup)
@click.version_option(package_name="horae", prog_name="horae", message="%(prog)s %(version)s")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML config file.",
)
@click.option(
    "--redis-url",
    envvar="HORAE_REDIS_URL",
    default=None,
    help="Redis URL (default: embedded server).",
)
@click.option(
    "--database-url",
    envvar="HORAE_DATABASE_URL",
    default=None,
    help="PostgreSQL URL (default: embedded).",
)
@click.option(
    "--namespace", envvar="HORAE_NAMESPACE", default=None, help="Key namespace (default: horae)."
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.pass_context
def cli(
    ctx: click.Context,
    config_path: str | None,
    redis_url: str | None,
    database_url: str | None,
    namespace: str | None,
    verbose: bool,
) -> None:
    """horae: delayed and cron jobs on Redis, with retries and an audit trail.

    Errors are one line on stderr: exit status 2 for a usage error, 1 for a runtime one."""
    ctx.meta["horae.verbose"] = verbose
    ctx.obj = load_settings(
        config_path, redis_url=redis_url, database_url=database_url, namespace=namespace
    )
    configure_logging(logging.DEBUG if verbose else logging.INFO, ctx.obj.telemetry.json_logs)


def _run(coro: Any) -> Any:
    """Run a command's coroutine; its errors become one line in HoraeGroup (cli_common.one_line)."""
    return asyncio.run(coro)


@cli.command()
@click.option("--app", default=None, help="module[:registry] whose @on_event listeners to run.")
@click.option(
    "--concurrency",
    type=click.IntRange(1, 10_000),
    default=None,
    help="Attempts at once, 1..10000 (default from config).",
)
@click.option(
    "--topics",
    default=None,
    help="Comma-separated topics to serve (default: those --app has listeners for, "
    "plus topics no worker served).",
)
@click.option(
    "--all-topics",
    is_flag=True,
    default=False,
    help="Claim every topic (jobs of a topic no worker served complete as no_listener; a known "
    "topic's jobs wait for a worker with its listeners).",
)
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=None,
    help="Seconds in-flight attempts may finish on stop.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65_535),
    default=None,
    help="Serve Prometheus metrics on this port.",
)
@click.option(
    "--metrics-host",
    default=None,
    help=(
        "Address of the metrics port (default [telemetry] "
        "metrics_host: loopback, 0.0.0.0 in a container)."
    ),
)
@click.option(
    "--health-port",
    type=click.IntRange(1, 65_535),
    default=None,
    help="Serve GET /healthz and /readyz on this port (default [worker] health_port; 0 = off).",
)
@click.option(
    "--health-host",
    default=None,
    help=(
        "Address of the health port (default [worker] "
        "health_host: loopback, 0.0.0.0 in a container)."
    ),
)
@click.option(
    "--startup-wait",
    type=click.FloatRange(0),
    default=None,
    help="Seconds to keep trying to reach Redis at start before exiting with the error "
    "(default [worker] startup_wait_s; 0 = exit at once).",
)
@click.option(
    "--nightly",
    is_flag=True,
    default=False,
    help="Also schedule and run the nightly analytics report (cron horae.audit.nightly in this "
    "namespace); or [analytics] nightly = true.",
)
@click.pass_obj
def worker(
    settings: Settings,
    app: str | None,
    concurrency: int | None,
    topics: str | None,
    all_topics: bool,
    grace: float | None,
    metrics_port: int | None,
    metrics_host: str | None,
    health_port: int | None,
    health_host: str | None,
    startup_wait: float | None,
    nightly: bool,
) -> None:
    """Run a worker until SIGINT/SIGTERM or `horae workers drain ID`, then stop gracefully: /readyz
    turns 503 at once, then running attempts get --grace seconds ([worker] grace_s) to finish."""
    registry = _load_app(app)
    if all_topics and topics:
        _refuse("--topics and --all-topics exclude each other")
    if (
        not all_topics
        and not topics
        and not [t for t in registry.topics() if t != SCHEDULE_FAILED_TOPIC]
    ):
        _refuse(
            "the worker has no listeners: pass --app "
            "module[:registry], or --all-topics to claim every topic"
        )
    nightly = nightly or settings.analytics.nightly
    if nightly and not (settings.audit.enabled and settings.audit.relay):
        _refuse(
            "the nightly analytics report needs this worker to "
            "relay the audit trail ([audit] enabled and relay)"
        )
    telemetry = setup_telemetry(settings.telemetry, metrics_port, metrics_host)
    port = settings.worker.health_port if health_port is None else health_port
    health = (
        HealthServer(
            bind_host(settings.worker.health_host if health_host is None else health_host),
            port,
            option="--health-port ([worker] health_port)",
        )
        if port
        else None
    )
    topic_list = [t.strip() for t in topics.split(",") if t.strip()] if topics else None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stopping(sig: signal.Signals) -> None:  # unready first (probes see it), then the drain
            if health is not None:
                health.drain(f"draining after {sig.name}")
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping, sig)
        loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
        if health is not None:
            await health.start()
        try:
            await serve_worker(stop)
        finally:
            if health is not None:
                await health.close()

    async def serve_worker(stop: asyncio.Event) -> None:
        wait_s = settings.worker.startup_wait_s if startup_wait is None else startup_wait
        await serve_when_reachable(lambda started: serve_once(stop, started), wait_s, stop)

    async def serve_once(stop: asyncio.Event, started: Callable[[], None]) -> None:
        async with Scheduler(settings=settings, listeners=registry) as s:
            if nightly:
                from audit.analytics.nightly import install_nightly

                click.echo(await install_nightly(s), err=True)
            async with s.worker(
                concurrency=concurrency, topics=topic_list, grace=grace, all_topics=all_topics
            ) as w:

                def drained(reason: str) -> None:  # `horae workers drain`: the SIGTERM path, exit 0
                    if health is not None:
                        health.drain(reason)
                    stop.set()

                started()  # from here on, the worker rides out Redis outages itself
                w.on_drain = drained
                if health is not None:
                    health.ready = worker_readiness(s.workers, w.id, [settings.redis_url])
                    click.echo(
                        f"health on http://{health.host}:{health.port}/healthz and /readyz",
                        err=True,
                    )
                if telemetry.metrics_port:
                    click.echo(
                        f"metrics on http://{telemetry.metrics_host}:{telemetry.metrics_port}/metrics",
                        err=True,
                    )
                click.echo(f"worker {w.id} running (Ctrl-C to stop)", err=True)
                await stop.wait()

    try:
        _run(main())
    finally:
        telemetry.shutdown()


def _refuse(message: str) -> None:
    """One error line on stderr, exit status 2 (a usage error)."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


def _dump_tasks() -> None:
    """SIGUSR1: print what every asyncio task and thread is waiting on (a stuck worker, live)."""
    print(f"--- SIGUSR1: {len(asyncio.all_tasks())} asyncio tasks", file=sys.stderr)
    for task in asyncio.all_tasks():
        task.print_stack(limit=8, file=sys.stderr)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()


@cli.command()
@click.pass_obj
def demo(settings: Settings) -> None:
    """Run the demo: a few jobs in two time zones, retries, a failure; prints a table."""
    from scheduler.cli.demo import run_demo

    _run(run_demo(settings, console))


@cli.group()
def cron() -> None:
    """Recurring schedules."""


_CRON_COLUMNS = (
    "name",
    "cron",
    "zone",
    "topic",
    "next run (zone)",
    "next run (UTC)",
    "last run (UTC)",
    "misfire",
    "paused",
    "declared",
)


@cron.command("list")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='One JSON object {"items": [...], "cursor": null} of the schedules instead of a table.',
)
@click.pass_obj
def cron_list(settings: Settings, as_json: bool) -> None:
    """Every schedule with its next run in its own zone and in UTC ("declared: in code" for one
    kept by workers from an @on_event declaration)."""
    from zoneinfo import ZoneInfo

    async def main() -> None:
        async with Scheduler(settings=no_relay(settings)) as s:
            crons = await s.list_crons()
        if as_json:
            echo_items(crons)
            return
        table = Table(*_CRON_COLUMNS, title=f"cron schedules in {settings.namespace}")
        for c in crons:
            nxt = c.next_run_at
            cells = (
                c.name,
                c.trigger,
                c.tz,
                c.topic,
                nxt.astimezone(ZoneInfo(c.tz)).strftime("%Y-%m-%d %H:%M:%S %Z") if nxt else "-",
                when_text(nxt),
                when_text(c.last_run_at),
                c.misfire,
                "yes" if c.paused else "no",
                "in code" if c.declared else "no",
            )
            table.add_row(*cells)
        print_table(console, table)

    _run(main())


@cron.command("add")
@click.argument("name")
@click.argument("expression")
@click.option("--topic", required=True, help="The topic of each tick's job.")
@click.option("--tz", default="UTC", show_default=True, help="IANA zone the expression is read in.")
@click.option("--payload", default="null", help="JSON payload of each tick.")
@click.option(
    "--misfire",
    type=click.Choice(["coalesce", "skip", "all"]),
    default=None,
    help="Ticks missed while down: one run (coalesce, the default), none (skip), each (all).",
)
@click.pass_obj
def cron_add(
    settings: Settings,
    name: str,
    expression: str,
    topic: str,
    tz: str,
    payload: str,
    misfire: str | None,
) -> None:
    """Create or update the schedule NAME with a cron EXPRESSION."""
    try:
        body = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--payload") from exc

    async def main() -> None:
        async with Scheduler(settings=settings) as s:
            info = await s.schedule_cron(
                name, expression, topic=topic, tz=tz, payload=body, misfire=misfire
            )
        click.echo(f"{info.name}: next run {info.next_run_at:%Y-%m-%d %H:%M:%S} UTC")

    _run(main())


_CRON_HELP = {
    "delete": "Delete the schedule NAME (the jobs it created stay).",
    "pause": "Pause the schedule NAME: no ticks fire until it is resumed.",
    "resume": "Resume the schedule NAME from its next tick (ticks passed while paused do not run).",
}
# A renamed `cron` command -> its new name; the old one stays, hidden, for one release.
_CRON_RENAMED = {"remove": "delete"}


def _cron_action(verb: str) -> Any:
    renamed = _CRON_RENAMED.get(verb)
    action = renamed or verb

    help = _CRON_HELP[action]
    if renamed is not None:
        help = f"Deprecated (removed in the next release): `horae cron {renamed}`. {help}"

    @cron.command(verb, help=help, hidden=renamed is not None)
    @click.argument("name")
    @click.pass_obj
    def command(settings: Settings, name: str) -> None:
        if renamed is not None:
            warn_renamed(f"cron {verb}", f"cron {renamed}")

        async def main() -> bool:
            async with Scheduler(settings=settings) as s:
                if action == "delete":
                    return await s.delete_cron(name)
                return await (s.pause_cron(name) if action == "pause" else s.resume_cron(name))

        changed = _run(main())
        if action == "delete" and not changed:
            raise click.ClickException(
                f"no cron schedule named {name!r} in namespace {settings.namespace!r}"
            )
        click.echo(f"{name}: {verb + 'd' if changed else 'unchanged'}")

    return command


for _verb in ("delete", "pause", "resume", *_CRON_RENAMED):
    _cron_action(_verb)


@cli.group()
def services() -> None:
    """The embedded Redis and PostgreSQL servers under the data directory."""


@services.command("start")
@click.pass_obj
def services_start(settings: Settings) -> None:
    """Start the embedded servers of this project's data directory (those not given by URL),
    or find them running; print which servers are used, where."""
    from scheduler.core.datadir import data_dir_of
    from scheduler.ops.servers import resolve_services

    urls = resolve_services(
        settings.redis_url,
        settings.database_url,
        data_dir_of(settings),
        need_database=settings.audit.enabled,
        appendfsync=settings.redis_appendfsync,
    )
    click.echo(urls.describe())


@services.command("stop")
@click.pass_obj
def services_stop(settings: Settings) -> None:
    """Stop the embedded servers of this project's data directory (never another project's)."""
    from scheduler.core.datadir import data_dir_of
    from scheduler.ops.servers import stop_all

    stopped = stop_all(data_dir_of(settings))
    click.echo("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@services.command("status")
@click.pass_context
def services_status(ctx: click.Context) -> None:
    """The config file and data directory in use; each server's URL and whether it runs or
    answers."""
    import os

    from scheduler.core.datadir import config_file
    from scheduler.ops.service_status import status_lines

    config = config_file(ctx.find_root().params.get("config_path"), os.environ)
    for line in status_lines(ctx.obj, config):
        click.echo(line)


@cli.group("config")
def config_group() -> None:
    """The settings in use, and every setting there is."""


@config_group.command("show")
@click.option(
    "--defaults",
    is_flag=True,
    help="Print the annotated settings file instead: every setting, its default and what it means "
    "(a starting point for horae.toml).",
)
@click.pass_context
def config_show(ctx: click.Context, defaults: bool) -> None:
    """Every setting's effective value, one line each, with its source: default, file PATH,
    environment VAR or option; passwords and tokens masked. Nothing is started."""
    import os

    from horae.settings import setting_sources
    from scheduler.cli.config_show import annotated_defaults, data_dir_default, show_lines
    from scheduler.core.datadir import config_file

    if defaults:
        click.echo(annotated_defaults(), nl=False)
        return
    root = ctx.find_root()
    path = root.params.get("config_path")
    options = {
        "redis_url": "--redis-url",
        "database_url": "--database-url",
        "namespace": "--namespace",
    }
    given = {
        name: f"option {flag}"
        for name, flag in options.items()
        if root.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    }
    sources = setting_sources(path, os.environ, given)
    for line in show_lines(ctx.obj, sources, data_dir_default(config_file(path, os.environ))):
        click.echo(line)


def _resolved_settings(ctx: click.Context) -> Settings:
    """Settings with both URLs filled in (embedded servers started when none is set)."""
    from scheduler.core.datadir import data_dir_of
    from scheduler.ops.servers import resolve_services

    settings: Settings = ctx.find_root().obj
    urls = resolve_services(
        settings.redis_url,
        settings.database_url,
        data_dir_of(settings),
        appendfsync=settings.redis_appendfsync,
    )
    return settings.model_copy(
        update={"redis_url": urls.redis_url, "database_url": urls.database_url}
    )


def _register_extensions() -> None:
    """Commands of the audit and console packages, `dlq`, `topics`, `jobs` (and `jobs flow`),
    `partitions`, `workers` and `cron show`, wired here: the CLI is a composition root."""
    from audit.analytics.cli import register as register_analytics
    from audit.cli import register
    from console.cli import register as register_console
    from scheduler.cli.dlq import register as register_dlq
    from scheduler.cli.flows import register as register_flows
    from scheduler.cli.jobs import register as register_jobs
    from scheduler.cli.partitions import register as register_partitions
    from scheduler.cli.topics import register as register_topics
    from scheduler.cli.workers import register as register_workers

    register(cli, _resolved_settings)
    register_analytics(cli)
    register_dlq(cli, _run, console)
    register_topics(cli, _run, console)
    register_jobs(cli, _run, console)
    register_flows(cli, _run, console)
    register_workers(cli, _run, console)
    register_partitions(cli, _run)
    register_console(cli, _resolved_settings)


_register_extensions()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="horae")
