"""`/healthz` and `/readyz` of a long-running horae process (`horae worker`, `horae audit
relay`; the console serves its own on its port): a tiny HTTP/1.1 server on the process's
event loop, so an answer at all proves the loop responsive.

/healthz: 200 while the loop answers (liveness: a probe that fails restarts the process).
/readyz: 200 when every readiness check passes, else 503 with `{"status", "reason"}`
(readiness: a probe that fails takes the process out of service, never restarts it).
A stopping process turns unready first (`drain`), then drains: its liveness stays 200 so
the orchestrator lets the drain finish (docs/how-to/deploying.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path

from scheduler.core.errors import ConfigError
from scheduler.core.procutil import scrub

log = logging.getLogger("horae.health")

# A readiness check: None when fine, else why not (one short line).
Check = Callable[[], Awaitable[str | None]]

CHECK_TIMEOUT_S = 2.0  # a dependency slower than this to answer counts as unreachable
_REQUEST_TIMEOUT_S = 5.0
_MAX_REQUEST_BYTES = 8_192
_CONTAINER_MARKERS = ("/.dockerenv", "/run/.containerenv")


def in_container(
    env: Mapping[str, str] | None = None, markers: Sequence[str] = _CONTAINER_MARKERS
) -> bool:
    """Whether this process runs in a container (Docker, Podman, Kubernetes, systemd-nspawn)."""
    env = os.environ if env is None else env
    if env.get("KUBERNETES_SERVICE_HOST") or env.get("container"):
        return True
    return any(Path(marker).exists() for marker in markers)


def bind_host(
    configured: str,
    env: Mapping[str, str] | None = None,
    markers: Sequence[str] = _CONTAINER_MARKERS,
) -> str:
    """The address a health or metrics port listens on: the configured one, else loopback
    (nothing outside the machine sees it), or every interface in a container (where the
    kubelet and Prometheus reach it through the pod's address)."""
    if configured:
        return configured
    return "0.0.0.0" if in_container(env, markers) else "127.0.0.1"


async def first_failure(
    checks: Sequence[tuple[str, Check]],
    urls: Sequence[str | None] = (),
    timeout_s: float = CHECK_TIMEOUT_S,
) -> str | None:
    """Run the named checks in order; the first failure as `name: why` (an exception or a
    timeout counts as a failure; passwords of `urls` masked), None when all pass."""
    for name, check in checks:
        try:
            why = await asyncio.wait_for(check(), timeout_s)
        except TimeoutError:
            why = f"no answer within {timeout_s:g}s"
        except Exception as exc:  # noqa: BLE001 - any failure of a dependency means unready
            why = f"{type(exc).__name__}: {exc}"
        if why is not None:
            return scrub(f"{name}: {why}", *urls)[:500]
    return None


class HealthServer:
    """Serves /healthz and /readyz on host:port until close(). `ready` is set once the
    process can say (before: 503 "starting"); `drain()` turns readiness 503 for good."""

    def __init__(
        self, host: str, port: int, ready: Check | None = None, *, option: str = "--health-port"
    ) -> None:
        self.host, self.port, self.ready, self.option = host, port, ready, option
        self.draining: str | None = None
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Listen (port 0: any free port, then in self.port).

        Raises:
            ConfigError: the address cannot be bound (taken, or not this machine's).
        """
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self.port)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve health checks on {self.host}:{self.port} ({exc.strerror or exc}): "
                f"give {self.option} a free port and the host an address of this machine"
            ) from exc
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info(
            "health checks on http://%s:%d/healthz and /readyz",
            self.host,
            self.port,
            extra={"event": "health_serving"},
        )

    def drain(self, reason: str) -> None:
        """From now on /readyz answers 503 with `reason` (the process is stopping)."""
        if self.draining is None:
            self.draining = reason

    async def close(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
            with suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 2)

    async def readiness(self) -> tuple[int, dict[str, str]]:
        """(status code, body) of /readyz now."""
        reason = self.draining
        if reason is None and self.ready is None:
            reason = "starting"
        elif reason is None and self.ready is not None:
            reason = await first_failure([("readiness", self.ready)], timeout_s=3 * CHECK_TIMEOUT_S)
            reason = reason.removeprefix("readiness: ") if reason else None
        if reason is None:
            return 200, {"status": "ready", "reason": ""}
        return 503, {"status": "unready", "reason": reason}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = b""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _REQUEST_TIMEOUT_S)
            status, body = await self._answer(head[:_MAX_REQUEST_BYTES])
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ConnectionError,
        ):
            status, body = 400, {"status": "error", "reason": "not an HTTP request"}
        try:
            method = head.split(b" ", 1)[0]
            data = json.dumps(body).encode()
            writer.write(
                b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                b"Cache-Control: no-store\r\nConnection: close\r\n\r\n"
                % (status, _REASONS[status], len(data))
            )
            if method != b"HEAD":
                writer.write(data)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            with suppress(ConnectionError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _answer(self, head: bytes) -> tuple[int, dict[str, str]]:
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return 400, {"status": "error", "reason": "not an HTTP request"}
        method, path = parts[0], parts[1].split(b"?", 1)[0]
        if path not in (b"/healthz", b"/readyz"):
            return 404, {"status": "error", "reason": "only /healthz and /readyz are served here"}
        if method not in (b"GET", b"HEAD"):
            return 405, {"status": "error", "reason": "GET or HEAD only"}
        if path == b"/healthz":
            return 200, {"status": "ok", "reason": ""}
        return await self.readiness()


_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    503: b"Service Unavailable",
}


def worker_readiness(
    live_workers: Callable[[], Awaitable[Sequence[object]]],
    worker_id: str,
    urls: Sequence[str | None] = (),
) -> Check:
    """A worker's readiness: Redis answers (the registry read) and the registry lists this
    worker (its heartbeat advertised it, so other workers leave its topics to it)."""

    async def check() -> str | None:
        live: list[object] = []

        async def redis() -> None:
            live.extend(await live_workers())

        reason = await first_failure([("redis", redis)], urls)
        if reason is None and not any(getattr(w, "id", None) == worker_id for w in live):
            return (
                f"worker {worker_id} is not in the worker "
                f"registry (no live heartbeat advertises it)"
            )
        return reason

    return check
