"""What every request passes before the app sees it: the Host it names (a DNS-rebound page
names the attacker's), where it came from (X-Forwarded-* believed from `[console]
trusted_proxies` only), and how long its body may be (`[console] max_body_bytes`: 413 from
its Content-Length, else once the bytes read pass it; nothing longer is buffered)."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from fastapi import HTTPException
from starlette.datastructures import Headers

from console.settings import ConsoleSettings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Probes (a Kubernetes probe sends Host: <pod-ip>:<port>) reach these whatever the Host: they reveal
# nothing.
EXEMPT = frozenset({"/healthz", "/readyz"})
# What a proxy adds; a console without tokens refuses a request carrying any of them.
FORWARDING = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip")
DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str | None) -> tuple[str, int | None] | None:
    """(name or address, port) of a Host header or an allowed_hosts entry, lower-cased and
    without IPv6 brackets; None when it is no such thing."""
    if not value or any(c in value for c in "/?#@ \\\t"):
        return None
    try:
        parts = urlsplit("//" + value)
        port = parts.port
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname else None


def is_loopback_name(name: str | None) -> bool:
    """localhost, or an address of the loopback network (127.0.0.0/8, ::1)."""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name or "").is_loopback
    except ValueError:
        return False


def host_allowed(host: str | None, scheme: str, allowed: tuple[str, ...]) -> bool:
    """Whether a Host header names this console: a loopback name, or an entry of
    `allowed_hosts` (an entry without a port allows any; a Host without one has its
    scheme's)."""
    found = split_host(host)
    if found is None:
        return False
    name, port = found
    if is_loopback_name(name):
        return True
    port = port or DEFAULT_PORTS.get(scheme)
    for entry in allowed:
        want = split_host(entry)
        if want is not None and want[0] == name and want[1] in (None, port):
            return True
    return False


def same_origin(origin: str, scheme: str, host: str | None) -> bool:
    """Whether an Origin (or a Referer's origin) is scheme://Host of this request, default
    ports filled in."""
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return False
    own = split_host(host)
    if own is None or parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return False
    return (parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]) == (
        scheme,
        own[0],
        own[1] or DEFAULT_PORTS.get(scheme),
    )


class TooLarge(HTTPException):
    """A request body longer than `[console] max_body_bytes` (413, blaming the body)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"body: longer than [console] max_body_bytes ({limit:,} bytes)")
        self.field = "body"


class Gate:
    """ASGI middleware in front of the console (console/app.py installs it).

    Args:
        app: the console's app.
        settings: its `[console]` settings.
        tokenless: no token configured: the Host is always checked, and a request a proxy
            forwarded is refused (its caller is not the loopback client it seems to be).
    """

    def __init__(self, app: ASGIApp, settings: ConsoleSettings, tokenless: bool) -> None:
        self.app = app
        self.tokenless = tokenless
        self.allowed = settings.allowed_hosts
        self.check_host = tokenless or bool(settings.allowed_hosts)
        self.proxies = [ipaddress.ip_network(p) for p in settings.trusted_proxies]
        self.limit = settings.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if scope["path"] not in EXEMPT:
            if self.proxies and self._trusted((scope.get("client") or ("",))[0]):
                scope = self._forwarded(scope, headers)
                headers = Headers(scope=scope)
            elif self.tokenless and any(h in headers for h in FORWARDING):
                await refuse(
                    scope,
                    send,
                    403,
                    "FORBIDDEN",
                    "this console has no tokens and answers loopback "
                    "clients only; this request came through a proxy (it carries X-Forwarded-* or "
                    "Forwarded): give the console tokens, and the proxy's address in [console] "
                    "trusted_proxies",
                )
                return
            host = headers.get("host")
            if self.check_host and not host_allowed(
                host, scope.get("scheme", "http"), self.allowed
            ):
                also = f" and {', '.join(self.allowed)}" if self.allowed else ""
                await refuse(
                    scope,
                    send,
                    421,
                    "MISDIRECTED_REQUEST",
                    f"Host {(host or '')[:200]!r} is not this console's: it answers loopback names "
                    f"(127.0.0.1, localhost, [::1]){also}; add the name to [console] allowed_hosts",
                )
                return
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                await refuse(
                    scope,
                    send,
                    400,
                    "REQUEST_INVALID",
                    message=f"Content-Length {length[:40]!r} is no number",
                    field="body",
                )
                return
            if int(length) > self.limit:
                await refuse(
                    scope,
                    send,
                    413,
                    "PAYLOAD_TOO_LARGE",
                    message=TooLarge(self.limit).detail,
                    field="body",
                )
                return
        await self.app(scope, self._bounded(receive), send)

    def _trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in net for net in self.proxies)

    def _forwarded(self, scope: Scope, headers: Headers) -> Scope:
        """The request as its client sent it to a trusted proxy: the client's address (the
        right-most X-Forwarded-For hop that is no trusted proxy), its scheme and its Host."""
        scope = dict(scope)
        hops = [
            h.strip() for v in headers.getlist("x-forwarded-for") for h in v.split(",") if h.strip()
        ]
        while len(hops) > 1 and self._trusted(hops[-1]):
            hops.pop()
        if hops:
            scope["client"] = (hops[-1], 0)
        proto = headers.get("x-forwarded-proto", "").split(",")[-1].strip().lower()
        if proto in DEFAULT_PORTS:
            scope["scheme"] = proto
        host = headers.get("x-forwarded-host", "").split(",")[-1].strip()
        if host:
            scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"host"] + [
                (b"host", host.encode())
            ]
        return scope

    def _bounded(self, receive: Receive) -> Receive:
        """`receive` that counts the body's bytes and raises TooLarge past the limit (a body
        sent without Content-Length, chunked)."""
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise TooLarge(self.limit)
            return message

        return counted


async def refuse(
    scope: Scope, send: Send, status: int, code: str, message: str, field: str | None = None
) -> None:
    """Answer without the app: the API's error shape under /api/, plain text elsewhere."""
    if scope["path"].startswith("/api/"):
        body = json.dumps(
            {"error": {"code": code, "message": message, "field": field}}, separators=(",", ":")
        ).encode()
        kind = b"application/json"
    else:
        body, kind = f"Error {status}: {message}\n".encode(), b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode()),
                (b"x-content-type-options", b"nosniff"),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
