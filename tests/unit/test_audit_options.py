"""The relay's options come from `[audit]` settings: RelayOptions.from_settings and
`horae audit relay` (whose command-line options only override what they name)."""

from __future__ import annotations

from types import SimpleNamespace

import click
import pytest
from click.testing import CliRunner

import audit.cli
from audit.cli import Connections, register
from audit.options import RelayOptions
from audit.settings import AuditSettings


def test_from_settings_takes_every_audit_setting() -> None:
    settings = AuditSettings(
        batch_size=300, block_ms=40, claim_idle_ms=900, linger_ms=7, fold_cache=11
    )
    options = RelayOptions.from_settings(settings)
    assert (
        options.batch_size,
        options.block_ms,
        options.claim_idle_ms,
        options.linger_ms,
        options.fold_cache,
    ) == (300, 40, 900, 7, 11)
    assert RelayOptions.from_settings(settings, block_ms=None, batch_size=5).batch_size == 5


def test_relay_command_honours_linger_and_fold_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[RelayOptions] = []

    async def relay(
        conn: Connections, options: RelayOptions, health_host: str | None, health_port: int | None
    ) -> None:  # the command's runner, not a client
        seen.append(options)

    monkeypatch.setattr(audit.cli, "_relay", relay)

    @click.group()
    @click.pass_context
    def cli(ctx: click.Context) -> None:
        ctx.obj = SimpleNamespace(
            redis_url="redis://unused",
            database_url="postgresql://unused",
            namespace="t",
            audit=AuditSettings(linger_ms=7, fold_cache=11, block_ms=40),
        )

    register(cli)
    result = CliRunner().invoke(cli, ["audit", "relay", "--batch-size", "50"])
    assert result.exit_code == 0, result.output
    assert [(o.linger_ms, o.fold_cache, o.block_ms, o.batch_size) for o in seen] == [
        (7, 11, 40, 50)
    ]
