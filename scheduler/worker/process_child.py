"""The child's side of the listener process pool (`python -m scheduler.worker.process_child`,
spawned by scheduler/worker/process_pool.py: a fresh interpreter, never a fork of the worker's
threaded asyncio process).

It runs one listener call at a time, as the worker's loop asks over its stdin/stdout
(length-prefixed pickle frames; anything the listener prints goes to stderr), and forwards
`event.progress`/`event.log` to the worker, which records them with the attempt's reporter
and answers (an InvalidProgress or LeaseLost is raised here, in the listener, as in the
worker). It dies with the worker: PR_SET_PDEATHSIG (Linux), its stdin closing, and a
thread watching its parent's pid; SIGINT and SIGTERM are the worker's to handle (it
stops or kills its children itself).
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import inspect
import os
import pickle
import signal
import struct
import sys
import threading
import time
import traceback
from contextlib import suppress
from typing import Any

from listeners.executors import listener_path, resolve

_HEADER = struct.Struct(">I")
TRACEBACK_CHARS = (
    4_000  # of the listener's traceback sent back (the error record keeps its last 2000)
)


# ------------------------------------------------------------------ framing (both sides)
def frame(message: Any) -> bytes:
    """One message as it goes over the pipe: 4-byte big-endian length, then the pickle."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


class _Channel:
    """The child's blocking end of the pipes (private fds: the listener's stdin/stdout are not
    ours)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._in, self._out = read_fd, write_fd
        self._lock = (
            threading.Lock()
        )  # a listener's threads may report at once: one request at a time

    def send(self, message: Any) -> None:
        view = memoryview(frame(message))
        while view:
            view = view[os.write(self._out, view) :]

    def receive(self) -> Any:
        """The next message; SystemExit when the worker closed the pipe (it stops, or died)."""
        (size,) = _HEADER.unpack(self._read(_HEADER.size))
        return pickle.loads(self._read(size))

    def request(self, message: Any) -> Any:
        with self._lock:
            self.send(message)
            return self.receive()

    def _read(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = os.read(self._in, left)
            if not chunk:
                raise SystemExit(0)
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


class ChildReporter:
    """event.progress/event.log in the child: sent to the worker, which records them with the
    attempt's reporter and answers; its refusal is raised here."""

    def __init__(self, channel: _Channel) -> None:
        self._channel = channel

    async def progress(self, percent: float, message: str | None = None) -> None:
        self._answer(self._channel.request(("progress", percent, message)))

    async def log(self, line: str) -> None:
        self._answer(self._channel.request(("log", line)))

    @staticmethod
    def _answer(reply: Any) -> None:
        _, error = reply
        if error is not None:
            raise error


# ------------------------------------------------------------------------- the child
def rss_bytes() -> int:
    """This process's resident set size now (Linux /proc), else its peak (getrusage)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)


def error_of(exc: BaseException) -> tuple[bytes | None, str, str, str, str]:
    """What the worker needs to rebuild a listener's exception: its class (module, qualname), args
    and attributes pickled (rebuilt without calling __init__, so a Retry keeps its delay and an
    exception whose __init__ takes other arguments than its message comes back as it was), else
    its type's name and module and its message; and the traceback as text."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-TRACEBACK_CHARS:]
    data: bytes | None
    try:
        data = pickle.dumps(
            (type(exc).__module__, type(exc).__qualname__, exc.args, dict(vars(exc))),
            protocol=pickle.HIGHEST_PROTOCOL,
        )
    except Exception:  # noqa: BLE001 - any failure: send its name and message instead
        data = None
    return data, type(exc).__name__, type(exc).__module__, str(exc), text


def _run_one(loop: asyncio.AbstractEventLoop, fn: Any, event: Any) -> Any:
    """One listener call: an async listener on this child's loop, a sync one right here (it may
    asyncio.run() its reports: no loop runs while it does). Returns what it returned."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)
    ):
        return loop.run_until_complete(fn(event))
    result = fn(event)
    if inspect.isawaitable(result):
        return loop.run_until_complete(result)
    return result


def _sendable(fn: Any, value: Any) -> Any:
    """`value` as it can go back to the worker (the job's result); TypeError naming the listener
    when it cannot be pickled (it could not be kept as JSON either)."""
    if value is None:
        return None
    try:
        pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - any pickling failure: the listener's result is bad
        raise TypeError(
            f"the result of listener {listener_path(fn)} is not JSON-serialisable "
            f"({type(value).__name__}: {exc})"
        ) from None
    return value


def _serve(channel: _Channel) -> None:
    loop = asyncio.new_event_loop()
    found: dict[tuple[str, str], Any] = {}
    reporter = ChildReporter(channel)
    while True:
        _, module, qualname, data = channel.receive()
        error, value = None, None
        try:
            fn = found.get((module, qualname))
            if fn is None:
                fn = found[(module, qualname)] = resolve(module, qualname)
            event = pickle.loads(data)
            if hasattr(event, "reporter"):  # a ScheduleArrivedEvent
                event = dataclasses.replace(event, reporter=reporter)
            value = _sendable(fn, _run_one(loop, fn, event))
        except Exception as exc:  # noqa: BLE001 - the listener's error is its attempt's outcome
            error = error_of(exc)
        channel.send(("done", rss_bytes(), error, value))


def _die_with_parent(parent: int) -> None:
    """SIGKILL when the worker dies (Linux), else a thread that sees its parent change."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the line above
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="horae-parent-watch", daemon=True).start()


def main() -> None:
    """`python -m scheduler.worker.process_child`: the spec frame first (the parent's pid, its
    sys.path), then one listener call per request until the worker closes the pipe."""
    read_fd, write_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # a listener's print() goes to the worker's stderr, never into the pipe
    signal.signal(
        signal.SIGINT, signal.SIG_IGN
    )  # Ctrl-C reaches the process group: the worker decides
    signal.signal(
        signal.SIGTERM, signal.SIG_IGN
    )  # a service manager's SIGTERM too (its grace, then a kill)
    channel = _Channel(read_fd, write_fd)
    spec = channel.receive()
    _die_with_parent(int(spec["parent"]))
    sys.path[:] = [p for p in spec["sys_path"] if isinstance(p, str)]
    _serve(channel)


if __name__ == "__main__":
    main()
