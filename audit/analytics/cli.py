"""`horae report`: export, analyze and publish a window with a Rich progress
display, then print the alerts. `register(cli)` adds it to the horae group;
`main` is a thin entry to the same command (python -m audit.analytics, spark-submit)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from audit.analytics.location import DatasetLocation
from audit.analytics.options import AnalyticsConfig
from audit.analytics.report.headline import headline, no_alerts_text, unjudged_text
from audit.analytics.results import AlertRule
from audit.analytics.window import ReportWindow, check_zone, parse_day, yesterday
from scheduler.core.errors import SchedulerError

if (
    TYPE_CHECKING
):  # the pipeline (pyarrow, and pyspark when it runs) is imported by the command only
    from audit.analytics.pipeline import ReportRequest, ReportResult
    from audit.analytics.settings import ReportSettings

F = TypeVar("F", bound=Callable[..., Any])


class RichProgress:
    """The pipeline's stages as Rich progress bars (on stderr)."""

    def __init__(self, console: Console) -> None:
        self.bars = Progress(
            TextColumn("{task.description:<8}"),
            BarColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.tasks: dict[str, TaskID] = {}
        self.counts: dict[str, int] = {}

    def __enter__(self) -> RichProgress:
        self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bars.stop()

    def stage(self, name: str, total: int | None = None) -> None:
        self.tasks[name] = self.bars.add_task(name, total=total, note="")
        self.counts[name] = 0

    def advance(self, name: str, amount: int = 1, note: str = "") -> None:
        self.counts[name] += amount
        text = f"{note}: {self.counts[name]:,} rows" if name == "export" else note
        self.bars.update(self.tasks[name], advance=amount, note=text)

    def finish(self, name: str, note: str = "") -> None:
        task = self.tasks[name]
        total = self.bars.tasks[self.tasks[name]].total
        self.bars.update(task, total=total or 1, completed=total or 1, note=note)


RELATIVE_DAYS = {"today": 0, "yesterday": 1}


def _day(ctx: click.Context, param: click.Parameter, value: str | None) -> date | str | None:
    """A date, or "today"/"yesterday" (resolved in the report zone by build_request)."""
    if value is None or value.lower() in RELATIVE_DAYS:
        return value.lower() if value else None
    try:
        return parse_day(value)
    except SchedulerError as exc:
        raise click.BadParameter(str(exc)) from exc


def _resolve(value: date | str | None, zone: str, now: datetime) -> date | None:
    if isinstance(value, str):
        return yesterday(now, zone) + timedelta(days=1 - RELATIVE_DAYS[value])
    return value


def report_options(func: F) -> F:
    """The options shared by `horae report` and `python -m audit.analytics`."""
    options = [
        click.option(
            "--since",
            callback=_day,
            help="First day YYYY-MM-DD, or today / yesterday (default: yesterday in --zone).",
        ),
        click.option("--until", callback=_day, help="Last day, inclusive (default: --since)."),
        click.option(
            "--out",
            type=click.Path(file_okay=False, path_type=Path),
            help="Output directory (default: <report_dir>/<since>[_<until>]).",
        ),
        click.option(
            "--master",
            help="Spark master: local[*], spark://host:7077, yarn, sc://host:15002 (Spark "
            "Connect) (default: analytics.master; under spark-submit its own).",
        ),
        click.option("--zone", help="IANA zone the days are counted in (default: analytics.zone)."),
        click.option(
            "--dataset",
            help=(
                "Exported dataset URI: a path, s3a://, hdfs://... (default: analytics.dataset_uri)."
            ),
        ),
        click.option(
            "--baseline-days",
            type=click.IntRange(0, 90),
            help="Trailing baseline length (default: analytics.baseline_days).",
        ),
        click.option(
            "--alert-margin",
            type=click.FloatRange(0, 1),
            help="Alert when failure rate > baseline + margin (default: analytics.alert_margin).",
        ),
        click.option(
            "--alert-min-jobs",
            type=click.IntRange(0),
            help="Only topics with this many jobs alert (default: analytics.alert_min_jobs).",
        ),
        click.option(
            "--top-errors",
            type=click.IntRange(1, 1000),
            help="Error signatures in the summary (default: analytics.top_errors).",
        ),
        click.option(
            "--source",
            type=click.Choice(["parquet", "jdbc"]),
            help=(
                "parquet: export then read the dataset; jdbc: Spark "
                "reads PostgreSQL (default: analytics.source)."
            ),
        ),
        click.option(
            "--jars", help="spark.jars, e.g. /usr/share/java/postgresql.jar for --source jdbc."
        ),
        click.option(
            "--conf",
            "conf",
            multiple=True,
            metavar="KEY=VALUE",
            help="Extra Spark setting (repeat).",
        ),
        click.option(
            "--no-export", is_flag=True, help="Analyze the dataset as it is (no Postgres export)."
        ),
        click.option("--refresh-baseline", is_flag=True, help="Re-export the baseline days too."),
        click.option("--no-db", is_flag=True, help="Do not upsert the Grafana tables."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def build_request(
    config: AnalyticsConfig,
    database_url: str | None,
    opts: dict[str, Any],
    now: datetime | None = None,
) -> ReportRequest:
    """ReportRequest from the command's options over the config's defaults.

    Raises:
        SchedulerError: (AnalyticsError) for a bad window, zone or dataset URI.
    """
    from audit.analytics.pipeline import ReportRequest

    zone = opts.get("zone") or config.zone
    check_zone(zone)
    moment = now or datetime.now(UTC)
    since = _resolve(opts.get("since"), zone, moment)
    until = _resolve(opts.get("until"), zone, moment)
    if since is None and until is None:
        since = until = yesterday(moment, zone)
    since = since or until
    until = until or since
    assert since is not None and until is not None
    window = ReportWindow(
        since,
        until,
        zone,
        config.baseline_days if opts.get("baseline_days") is None else opts["baseline_days"],
    )
    conf = config.spark_settings()
    for item in opts.get("conf") or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE; got {item!r}", param_hint="--conf")
        conf[key.strip()] = value
    if opts.get("jars"):
        conf["spark.jars"] = opts["jars"]
    out = opts.get("out") or Path(config.report_dir) / window.label
    return ReportRequest(
        window=window,
        out=Path(out),
        dataset=DatasetLocation.parse(opts.get("dataset") or config.dataset),
        database_url=database_url,
        master=opts.get("master") or config.master,
        source=opts.get("source") or config.source,
        export=not opts.get("no_export"),
        refresh_baseline=bool(opts.get("refresh_baseline")),
        publish_db=not opts.get("no_db"),
        rule=AlertRule(
            config.alert_margin if opts.get("alert_margin") is None else opts["alert_margin"],
            config.alert_min_jobs if opts.get("alert_min_jobs") is None else opts["alert_min_jobs"],
        ),
        top_errors=opts.get("top_errors") or config.top_errors,
        signatures_per_day=config.signatures_per_day,
        jdbc_partitions=config.jdbc_partitions,
        spark_conf=conf,
    )


def print_result(result: ReportResult, console: Console) -> None:
    """The alerts (or that there are none) and where the report is."""
    analysis = result.analysis
    topics = len(analysis.totals)
    console.print(
        f"{topics} topic{'' if topics == 1 else 's'}, {headline(analysis.overall)}", highlight=False
    )
    if analysis.alerts:
        table = Table(title="Alerts", title_style="bold red")
        for column in ("topic", "alert", "failure rate", "baseline rate"):
            table.add_column(column)
        for a in result.analysis.alerts:
            table.add_row(
                a.topic,
                a.kind,
                "–" if a.failure_rate is None else f"{a.failure_rate:.1%}",
                "–" if a.baseline_rate is None else f"{a.baseline_rate:.1%}",
            )
        console.print(table)
        if why := unjudged_text(analysis.unjudged(), names=5):
            console.print(f"Not judged: {why}.", highlight=False)
    else:
        console.print(no_alerts_text(analysis, names=5) + ".", highlight=False)
    console.print(f"summary: {result.summary}")
    console.print(f"report:  {result.html.resolve()}")


def execute(
    config: AnalyticsConfig, database_url: str | None, opts: dict[str, Any]
) -> ReportResult:
    """Run a report for a command: progress on stderr, result on stdout.

    Raises:
        click.ClickException: for any pipeline error, with its message.
    """
    from audit.analytics.pipeline import run_report

    out = Console(width=None if sys.stdout.isatty() else 120)
    err = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    try:
        request = build_request(config, database_url, opts)
        with RichProgress(err) as progress:
            result = run_report(request, progress)
    except SchedulerError as exc:
        raise click.ClickException(str(exc)) from exc
    print_result(result, out)
    return result


def _database_url(settings: ReportSettings) -> str:
    if settings.database_url:
        return settings.database_url
    from scheduler.core.datadir import data_dir_of
    from scheduler.ops.servers import (
        ensure_postgres,
    )  # no URL configured: the embedded server, as everywhere

    return ensure_postgres(data_dir_of(settings))


@click.command("report")
@report_options
@click.pass_obj
def report(settings: ReportSettings, /, **opts: Any) -> None:
    """Failure analytics of a window: export, analyze (Spark), publish; prints the alerts."""
    url = (
        None
        if opts.get("no_export") and opts.get("no_db") and opts.get("source") != "jdbc"
        else _database_url(settings)
    )
    execute(AnalyticsConfig.from_settings(settings), url, opts)


def register(cli: click.Group) -> None:
    """Add `report` to the horae command group (its ctx.obj is the project's Settings)."""
    cli.add_command(report)


@click.command("report", help=report.help)
@click.option(
    "--database-url", envvar="HORAE_DATABASE_URL", help="PostgreSQL URL (env HORAE_DATABASE_URL)."
)
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), help="horae TOML config file."
)
@report_options
@click.pass_context
def main(
    ctx: click.Context, /, database_url: str | None, config_path: str | None, **opts: Any
) -> None:
    """`report` standalone (python -m audit.analytics, spark-submit): Settings from --config
    and the environment, then the same command."""
    from horae.settings import load_settings  # a process entry: a composition root

    try:
        ctx.obj = load_settings(config_path, database_url=database_url)
    except SchedulerError as exc:
        raise click.ClickException(str(exc)) from exc
    ctx.invoke(report, **opts)
