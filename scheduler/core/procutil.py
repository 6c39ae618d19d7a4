"""Process and file helpers of the embedded servers: locks across processes, pid
checks, atomic state files, and URLs shown with their password masked."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

STOP_TIMEOUT = 10.0


@contextmanager
def locked(data_dir: Path, name: str) -> Iterator[None]:
    """Serialise start/stop across processes with flock on <data_dir>/<name>.lock."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / f"{name}.lock", "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def pid_exists(pid: int) -> bool:
    """True when pid is there in any state, a zombie or a process whose threads still exit
    included."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_alive(pid: int) -> bool:
    """True when pid runs and is not a zombie (containers often never reap detached servers)."""
    if not pid_exists(pid):
        return False
    if not Path("/proc/self/stat").exists():
        return True  # no procfs (macOS): kill(0) is all we can know
    stat = read_text(Path(f"/proc/{pid}/stat"))
    return bool(stat) and stat.rpartition(")")[2].split()[:1] != ["Z"]


def terminate(pid: int) -> None:
    """SIGTERM, then SIGKILL if it has not exited within the start timeout."""
    try:
        os.kill(pid, signal.SIGTERM)
        if not wait_for(lambda: not pid_alive(pid), STOP_TIMEOUT):
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_for(check: Callable[[], Any], timeout: float) -> Any:
    """Poll check() until it returns something truthy; return that, or the last falsy value."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() >= deadline:
            return result
        time.sleep(0.02)


def read_pid(pidfile: Path) -> int | None:
    text = read_text(pidfile).strip()
    return int(text) if text.isdigit() else None


def read_state(redis_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_text(redis_dir / "state.json") or "{}")
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically, so a reader in another process never sees half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def tail(logfile: Path, lines: int = 20) -> str:
    text = read_text(logfile)
    body = "\n".join(text.splitlines()[-lines:]) if text else "(empty or missing)"
    return f"last lines of {logfile}:\n{body}"


def display_path(path: Path) -> str:
    """Relative to the working directory when inside it, for short log lines."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def hide_password(url: str) -> str:
    """The URL with any password replaced by ***."""
    parts = urlsplit(url)
    query = re.sub(r"(?i)\b(password=)[^&]*", r"\1***", parts.query)
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hostport}"
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def scrub(text: str, *urls: str | None) -> str:
    """`text` (an error message) with the password of each URL replaced by ***, wherever it
    appears (a driver may echo the URL or the password itself)."""
    for url in urls:
        if not url:
            continue
        password = urlsplit(url).password
        text = text.replace(url, hide_password(url))
        if password:
            text = text.replace(password, "***")
    return text
