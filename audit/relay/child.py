"""The audit relay in a child process of the worker's (`[audit] relay_process = true`, the
default since issue 34).

On a thread (audit/relay/thread.py) the relay's Python work still shares the worker's GIL: a
worker whose core is busy falls behind while the relay decodes and folds (bench
`e2e_split` on one saturated core: latency p99 34 ms with the relay on a thread, 4.6 ms
with it in a process of its own). A child process has its own interpreter and needs no
deployment of its own, where `horae audit relay` is one more service to deploy.

The worker's first start spawns it (`python -m audit.relay.child`, the settings on its
stdin, never in argv or the environment), restarts it with backoff if it exits, and on
close stops it with SIGTERM: it drains like `horae audit relay` does. It dies with the
worker (PR_SET_PDEATHSIG on Linux, else a look at its parent every second); entries it
had read and not acknowledged are taken over at once by the next relay on this host
(AuditRelay.read_batch: claim_from_dead).
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import json
import logging
import os
import signal
import sys
from contextlib import suppress
from typing import Any, cast

from pydantic import BaseModel

from audit.options import RelayOptions
from audit.relay.consumer import AuditRelay, serve
from audit.settings import AuditedSettings
from scheduler.core.errors import StorageError

__all__ = ["ChildRelay"]

log = logging.getLogger("horae.audit")

START_TIMEOUT_S = 60.0  # imports, first connect and the consumer group must fit in this
RESTART_MAX_S = 30.0  # backoff between restarts of a child that keeps exiting: 1 s, 2 s, ... this
_READY = b"ready"


class ChildRelay:
    """start()/stop()/lag() of the relay run by a child process, as ThreadedRelay has them.

    Args:
        settings: the worker's settings, its server URLs resolved (embedded ones included).
        observer: a relay of the same namespace this process never starts: lag() reads
            the outbox through it.
    """

    def __init__(self, settings: BaseModel, observer: AuditRelay) -> None:
        self._settings = settings.model_dump(mode="json")
        # The child rebuilds the same model (the root's Settings) without importing the root.
        self._model = f"{type(settings).__module__}:{type(settings).__qualname__}"
        self._observer = observer
        self._proc: asyncio.subprocess.Process | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopping = False
        self.restarts = 0  # children that exited on their own and were replaced

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    @property
    def pid(self) -> int | None:
        """The child's pid while it runs."""
        return self._proc.pid if self.running and self._proc is not None else None

    async def start(self) -> None:
        """Spawn the child (idempotent); returns once it consumes the outbox.

        Raises:
            StorageError: the child exited or did not start within START_TIMEOUT_S
                (its stderr, the worker's, says why).
        """
        if self._watch is not None and not self._watch.done():
            return
        self._stopping = False
        await self._spawn()
        self._watch = asyncio.create_task(self._supervise(), name="audit-relay-child")

    async def lag(self) -> tuple[int, float | None]:
        return await self._observer.lag()

    async def stop(self) -> None:
        """SIGTERM the child and wait while it drains (AuditRelay.stop), SIGKILL after that."""
        self._stopping = True
        proc, watch = self._proc, self._watch
        if proc is not None and proc.returncode is None:
            with suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            options = self._observer.options
            try:
                await asyncio.wait_for(
                    proc.wait(), options.drain_timeout_s + options.block_ms / 1000 + 5
                )
            except TimeoutError:
                log.warning(
                    "audit relay process %d did not stop in time; killed (another relay takes over "
                    "what it held)",
                    proc.pid,
                    extra={"event": "audit.relay_child_killed"},
                )
                _kill(proc)
                await proc.wait()
        if watch is not None:
            watch.cancel()
            with suppress(asyncio.CancelledError):
                await watch
        self._proc = self._watch = None
        await self._observer.stop()

    async def _spawn(self) -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "audit.relay.child",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )  # stderr: the worker's own (the child logs there)
        assert proc.stdin is not None and proc.stdout is not None
        # The parent is this process as it spawns (a Scheduler made before a fork spawns from the
        # child).
        proc.stdin.write(
            json.dumps(
                {"parent": os.getpid(), "settings": self._settings, "model": self._model}
            ).encode()
        )
        proc.stdin.close()
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
        except TimeoutError:
            line = b""
        except asyncio.CancelledError:  # stop() while a replacement starts: it must not outlive us
            _kill(proc)
            raise
        if line.strip() != _READY:
            _kill(proc)
            code = await proc.wait()
            raise StorageError(
                f"the audit relay process did not start (exit {code}); its error is above, "
                "on this process's stderr"
            )
        self._proc = proc

    async def _supervise(self) -> None:
        """Replace a child that exits while the worker runs (1 s, 2 s, ... RESTART_MAX_S apart)."""
        delay = 1.0
        while True:
            assert self._proc is not None
            code = await self._proc.wait()
            if self._stopping:
                return
            log.warning(
                "audit relay process %d exited with %s; starting another in %.0fs",
                self._proc.pid,
                code,
                delay,
                extra={"event": "audit.relay_child_exited"},
            )
            await asyncio.sleep(delay)
            try:
                await self._spawn()
                self.restarts += 1
                delay = 1.0
            except (StorageError, OSError) as exc:
                log.warning(
                    "audit relay process: %s", exc, extra={"event": "audit.relay_child_failed"}
                )
                delay = min(RESTART_MAX_S, delay * 2)


def _kill(proc: asyncio.subprocess.Process) -> None:
    with suppress(ProcessLookupError):  # (it may have exited already)
        proc.kill()


# ----------------------------------------------------------------- the child's side
def _die_with_parent(parent: int) -> None:
    """SIGTERM when the worker dies (Linux); elsewhere _run looks at the parent every second."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the line above
        raise SystemExit(0)


async def _run(spec: dict[str, Any]) -> None:
    from scheduler.store.clients import redis_client

    module, _, name = spec["model"].partition(":")
    model: type[BaseModel] = getattr(importlib.import_module(module), name)
    settings = cast(AuditedSettings, model.model_validate(spec["settings"]))
    if (
        settings.telemetry.exporter == "otlp"
    ):  # its own push exporter; a Prometheus port is the worker's
        from scheduler.observe.telemetry import setup_telemetry

        setup_telemetry(settings.telemetry, metrics_port=0)
    redis = redis_client(settings.redis_url or "", settings)
    relay = AuditRelay(
        redis,
        settings.namespace,
        settings.database_url or "",
        RelayOptions.from_settings(settings.audit, partitions=settings.cluster.partitions),
    )

    def ready() -> None:
        sys.stdout.buffer.write(_READY + b"\n")
        sys.stdout.flush()
        os.dup2(2, 1)  # nothing reads the pipe after this line: anything printed goes to stderr

    try:
        await serve(relay, ready, lambda: os.getppid() == spec["parent"], signals=(signal.SIGTERM,))
    finally:
        await redis.aclose()


def main() -> None:
    """`python -m audit.relay.child`: what ChildRelay spawns (the spec on stdin)."""
    from scheduler.observe.logs import configure_logging

    spec = json.loads(sys.stdin.read())
    _die_with_parent(int(spec["parent"]))
    # Ctrl-C reaches the whole process group: the worker stops us (SIGTERM, after its own
    # drain), so an interrupt here would only end the relay early and look like a crash.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging(logging.INFO, bool(spec["settings"].get("telemetry", {}).get("json_logs")))
    asyncio.run(_run(spec))


if __name__ == "__main__":
    main()
