"""Fixtures of the security tests: certificates made for the run, and a TLS-only
redis-server of the run's own with ACL users for two namespaces (redis_tls.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.security.certs import Certs, make_certs
from tests.security.redis_tls import TlsRedis, start_tls_redis

NS_A, NS_B = "tenant-a", "tenant-b"
USER_A, USER_B = "horae-a", "horae-b"


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[TlsRedis]:
    """The run's TLS redis-server: users horae-a (namespace tenant-a), horae-b (tenant-b), admin."""
    server = start_tls_redis(tmp_path_factory.mktemp("redis-tls"), certs, {USER_A: NS_A, USER_B: NS_B})
    yield server
    server.stop()
