"""Fixtures of the security tests: certificates made for the run, a TLS-only redis-server
of the run's own with ACL users for two namespaces (redis_tls.py), and a TLS-only
PostgreSQL with an owner, a relay and a reader role (postgres_tls.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace

import asyncpg
import pytest
from click.testing import CliRunner

from audit.settings import AuditSettings
from tests.audit_cli import host
from tests.security.certs import Certs, make_certs
from tests.security.postgres_tls import DATABASE, ROLES, TlsPostgres, start_tls_postgres
from tests.security.redis_tls import TlsRedis, start_tls_redis

NS_A, NS_B = "tenant-a", "tenant-b"
USER_A, USER_B = "horae-a", "horae-b"


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[TlsRedis]:
    """The run's TLS redis-server: users horae-a (namespace tenant-a), horae-b (tenant-b), admin."""
    server = start_tls_redis(
        tmp_path_factory.mktemp("redis-tls"), certs, {USER_A: NS_A, USER_B: NS_B}
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tls_postgres(certs: Certs) -> Iterator[TlsPostgres]:
    """The run's TLS-only PostgreSQL: database horae_audit owned by horae_owner; roles
    horae_relay and horae_reader that can log in and own nothing."""
    server = start_tls_postgres(certs)
    try:
        asyncio.run(_create_roles(server))
        yield server
    finally:
        server.stop()


async def _create_roles(server: TlsPostgres) -> None:
    admin = await asyncpg.connect(server.admin_url())
    try:
        for role in ROLES:  # test passwords: hex, no quoting needed
            await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{server.passwords[role]}'")
        await admin.execute(f"CREATE DATABASE {DATABASE} OWNER horae_owner")
    finally:
        await admin.close()


@pytest.fixture(scope="session")
def migrated_audit(tls_postgres: TlsPostgres) -> TlsPostgres:
    """`horae migrate` as the owner, then `horae audit grant` of relay and read access, over TLS."""
    owner = SimpleNamespace(
        redis_url=None,
        database_url=tls_postgres.url("horae_owner"),
        namespace="x",
        audit=AuditSettings(),
    )
    cli = host(owner)
    runner = CliRunner()
    for args, expected in (
        (["migrate"], "applied migrations"),
        (["audit", "grant", "horae_relay"], "granted relay access"),
        (["audit", "grant", "horae_reader", "--read-only"], "granted read access"),
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 0 and expected in result.output, (
            args,
            result.output,
            result.exception,
        )
    return tls_postgres
