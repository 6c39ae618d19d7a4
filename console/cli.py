"""`horae console`: serve the console (pages and /api/v1) with uvicorn."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import click

from horae.settings import Settings


def register(group: click.Group, resolved: Callable[[click.Context], Settings]) -> None:
    """Add `console` to the `horae` command."""

    @group.command("console")
    @click.option(
        "--host",
        default=None,
        help="Address to listen on (default [console] host, 127.0.0.1). "
        "Any other than loopback needs a token.",
    )
    @click.option(
        "--port",
        type=click.IntRange(0, 65535),
        default=None,
        help="Port (default [console] port, 8080).",
    )
    @click.option(
        "--reports",
        "reports",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Where the nightly reports are (default [analytics] report_dir).",
    )
    @click.pass_context
    def console_command(
        ctx: click.Context, host: str | None, port: int | None, reports: Path | None
    ) -> None:
        """Serve the web console and the HTTP API."""
        try:
            import uvicorn

            from console.app import create_app
            from console.auth import check_bind
        except ImportError as exc:
            raise click.ClickException(
                f"the console needs its extra: pip install 'horae[console]' ({exc})"
            ) from exc

        c = ctx.find_root().obj.console
        host, port = host or c.host, c.port if port is None else port
        check_bind(host, c)
        settings = resolved(ctx)  # (starts the embedded servers when no URL is configured)
        asyncio.run(
            _reachable(settings)
        )  # down: one error line and exit 1 (HoraeGroup), not uvicorn's traceback
        app = create_app(settings, report_dir=reports)
        click.echo(
            f"horae console on http://{host}:{port}/ (namespace "
            f"{settings.namespace!r}); Ctrl-C stops it"
        )
        uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False)


async def _reachable(settings: Settings) -> None:
    """Connect and close a Scheduler: StorageError when Redis cannot be reached."""
    from scheduler.api import Scheduler

    s = Scheduler(settings=settings)
    try:
        await s.connect()
    finally:
        await s.close()
