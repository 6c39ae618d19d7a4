"""The worker's pool of child processes for listeners registered with executor="process".

A CPU-bound listener on the worker's loop or in its thread pool holds the GIL, and with it
every other attempt, the heartbeat and the settlements. In a child
(scheduler/worker/process_child.py, a fresh interpreter: `python -m`, never a fork of this threaded
process) it holds only its own.
The worker's loop sends the event (pickled) and the listener's module + qualname, forwards the
child's progress and log lines to the attempt's reporter, and reads back success or the
exception (its type, message and traceback become the attempt's error record).

Same contract as a listener in the worker: the job's timeout (or a worker stop past its grace)
cancels the call, which kills the child; a child that dies mid-call fails only that attempt,
with ListenerProcessLost (settled as worker_lost, retried under the job's rules). Children start
when first needed (at most `[worker] processes` at once) and are replaced after
`max_jobs_per_child` calls or when their RSS after a call exceeds `max_memory_mb_per_child`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pickle
import signal
import sys
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

from listeners import Listener, ListenerRegistry, call_listener, qualified_name
from listeners.executors import UnimportableListener, check_resolves, resolve
from scheduler.core.config import WorkerSettings
from scheduler.core.errors import ConfigError, ListenerProcessLost
from scheduler.worker.process_child import frame

log = logging.getLogger("horae.worker")

STOP_TIMEOUT_S = 5.0  # an idle child asked to exit (its stdin closed) is killed after this


def rebuilt(error: tuple[bytes | None, str, str, str, str], pid: int) -> Exception:
    """The exception a listener raised in child `pid`, rebuilt from process_child.error_of, the
    child's traceback added as a note: the attempt's error record (outbox.error_of, the tail of the
    formatted exception) shows where the child raised it."""
    data, name, module, message, text = error
    exc: Any = None
    if data is not None:
        with suppress(Exception):  # its class does not import here, or its state does not unpickle
            cls_module, qualname, args, state = pickle.loads(data)
            cls = resolve(cls_module, qualname)
            if isinstance(cls, type) and issubclass(cls, Exception):
                exc = cls.__new__(cls, *args)
                exc.args = args
                exc.__dict__.update(state)
    if not isinstance(
        exc, Exception
    ):  # one of a class of the same name and module, with its message
        exc = type(name, (Exception,), {"__module__": module})(message)
    exc.add_note(f"raised in listener process {pid}:\n{text.rstrip()}")
    return exc  # type: ignore[no-any-return]


def sent(fn: Listener, event: Any) -> bytes:
    """The event as a child receives it: pickled, without the attempt's reporter (the child has its
    own).

    Raises:
        TypeError: the event does not pickle (a payload model whose class a child cannot import).
    """
    try:
        return pickle.dumps(
            dataclasses.replace(event, reporter=None) if hasattr(event, "reporter") else event
        )
    except Exception as exc:  # noqa: BLE001 - PicklingError, AttributeError, TypeError: one clear error
        raise TypeError(
            f"the event of listener {qualified_name(fn)} cannot be sent to a child process "
            f"(executor='process'): {type(exc).__name__}: {exc}"
        ) from exc


class _Child:
    """One child process and its pipes; runs one call at a time."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.jobs = 0
        self.rss = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def call(self, fn: Listener, event: Any, data: bytes) -> tuple[BaseException | None, Any]:
        """Run `fn(event)` in the child (`data`: the event pickled); the listener's exception (or
        None) and what it returned.

        Raises:
            ListenerProcessLost: the child died (or closed its pipe) before it answered.
        """
        assert self.proc.stdin is not None and self.proc.stdout is not None
        reporter = getattr(event, "reporter", None)
        try:
            await self._send(("run", fn.__module__, fn.__qualname__, data))
            while True:
                message = await self._receive()
                if message[0] == "done":
                    self.jobs += 1
                    self.rss = int(message[1])
                    if message[2] is not None:
                        return rebuilt(message[2], self.pid), None
                    return None, message[3]
                await self._send(("reply", await self._report(reporter, message)))
        except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError) as exc:
            code = await self.proc.wait()
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
            raise ListenerProcessLost(
                f"the process running listener {qualified_name(fn)} (pid {self.pid}) died "
                f"before it finished: {how}"
            ) from exc

    @staticmethod
    async def _report(reporter: Any, message: tuple[Any, ...]) -> BaseException | None:
        """Record a progress or log line from the child with the attempt's reporter; its refusal, or
        None."""
        if reporter is None:
            return None
        try:
            if message[0] == "progress":
                await reporter.progress(message[1], message[2])
            else:
                await reporter.log(message[1])
        except Exception as exc:  # noqa: BLE001 - InvalidProgress, LeaseLost: raised in the listener
            return exc
        return None

    async def _send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(frame(message))
        await self.proc.stdin.drain()

    async def _receive(self) -> Any:
        assert self.proc.stdout is not None
        size = int.from_bytes(await self.proc.stdout.readexactly(4), "big")
        return pickle.loads(await self.proc.stdout.readexactly(size))

    def kill(self) -> None:
        with suppress(ProcessLookupError):
            self.proc.kill()

    async def stop(self) -> None:
        """Close its stdin (it exits); kill it if it has not after STOP_TIMEOUT_S."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            self.kill()
            await self.proc.wait()


class ProcessPool:
    """Runs the listeners a registry marks executor="process" in child processes; any other listener
    goes to listeners.call_listener (the loop or the thread pool), so `call_listener` is the
    worker's one way to call a listener. Nothing starts until a process listener is called.

    Args:
        registry: says which listeners run in a process.
        settings: `processes` (0: os.cpu_count()), `max_jobs_per_child`, `max_memory_mb_per_child`
            (0: never).
    """

    def __init__(self, registry: ListenerRegistry, settings: WorkerSettings) -> None:
        self.registry = registry
        self.size = settings.processes or os.cpu_count() or 1
        self.max_jobs = settings.max_jobs_per_child
        self.max_rss = settings.max_memory_mb_per_child * 1024 * 1024
        self._idle: list[_Child] = []
        self._busy: dict[_Child, str] = {}  # child -> the job id it runs a listener of
        self._slots: asyncio.Semaphore | None = None
        self._checked: set[Listener] = set()
        self._ending: set[asyncio.Task[None]] = set()
        self.recycled = 0  # children replaced after max_jobs_per_child or max_memory_mb_per_child
        self._users = (
            1  # the workers sharing it (a PartitionedWorker's loops): the last close() closes it
        )

    def shared(self) -> ProcessPool:
        """This pool, for one more worker of the process (its close() only counts down)."""
        self._users += 1
        return self

    def check(self, topics: Iterable[str]) -> None:
        """Refuse, before a worker claims anything, a process listener of `topics` a child cannot
        import.

        Raises:
            ConfigError: naming the listener and why.
        """
        for fn in self.registry.process_listeners(topics):
            self._check(fn)

    def _check(self, fn: Listener) -> None:
        if fn not in self._checked:
            try:
                check_resolves(fn)
            except UnimportableListener as exc:
                raise ConfigError(str(exc)) from exc
            self._checked.add(fn)

    def pids(self) -> list[int]:
        """The pids of the children alive now, idle or busy."""
        return sorted(c.pid for c in (*self._idle, *self._busy))

    def pid_of(self, job_id: str) -> int | None:
        """The pid of the child running a listener of job `job_id` now, or None."""
        return next((c.pid for c, job in self._busy.items() if job == job_id), None)

    async def call_listener(self, fn: Listener, event: Any) -> Any:
        """Run one listener: in a child when it is registered with executor="process", else as
        listeners.call_listener does. Returns what it returned; raises what the listener raised
        (rebuilt), or ListenerProcessLost."""
        if not self.registry.in_process(fn):
            return await call_listener(fn, event)
        self._check(fn)
        data = sent(fn, event)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.size)
        async with self._slots:  # children alive <= size: one is spawned only when none is idle
            child = self._idle_child() or await self._spawn()
            self._busy[child] = str(getattr(event, "scheduled_job_id", ""))
            try:
                error, value = await child.call(fn, event, data)
            except BaseException:  # the timeout, a stop, or the child died: it is not used again
                child.kill()
                self._end(child)
                raise
            finally:
                self._busy.pop(child, None)
            self._release(child)
        if error is not None:
            raise error
        return value

    def _idle_child(self) -> _Child | None:
        """An idle child still alive (one killed while idle is reaped, not handed an attempt)."""
        while self._idle:
            child = self._idle.pop()
            if child.proc.returncode is None:
                return child
            self._end(child)
        return None

    async def _spawn(self) -> _Child:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "scheduler.worker.process_child",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )  # stderr: the worker's own (a listener's prints go there)
        child = _Child(proc)
        try:
            await child._send({"parent": os.getpid(), "sys_path": list(sys.path)})
        except BaseException:
            child.kill()
            self._end(child)
            raise
        log.info(
            "listener process %d started",
            proc.pid,
            extra={"event": "listener_process_started", "pid": proc.pid},
        )
        return child

    def _release(self, child: _Child) -> None:
        """Back to the idle children, or replaced: after max_jobs calls, or above max_rss."""
        reason = ""
        if self.max_jobs and child.jobs >= self.max_jobs:
            reason = f"after {child.jobs} jobs (max_jobs_per_child)"
        elif self.max_rss and child.rss > self.max_rss:
            reason = f"at {child.rss // (1024 * 1024)} MB RSS (max_memory_mb_per_child)"
        if reason:
            self.recycled += 1
            log.info(
                "listener process %d replaced %s",
                child.pid,
                reason,
                extra={"event": "listener_process_recycled", "pid": child.pid},
            )
            self._end(child, graceful=True)
        else:
            self._idle.append(child)

    def _end(self, child: _Child, graceful: bool = False) -> None:
        """Reap a killed child, or stop an idle one, in the background (close() waits for it)."""

        async def end() -> None:
            if graceful:
                await child.stop()
            else:
                await child.proc.wait()

        task = asyncio.ensure_future(end())
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def close(self) -> None:
        """Stop the idle children and kill the busy ones (a worker stop cancelled their attempts
        already); with the last worker sharing the pool."""
        self._users -= 1
        if self._users > 0:
            return
        idle, self._idle = self._idle, []
        for child in list(self._busy):
            child.kill()
        for child in idle:
            self._end(child, graceful=True)
        if self._ending:
            await asyncio.gather(*self._ending, return_exceptions=True)
