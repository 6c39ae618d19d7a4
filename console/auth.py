"""Who may look and who may act: roles from tokens, the loopback rule, CSRF.

A console without tokens answers loopback clients only (each is an operator named
"local"): `horae console` refuses to bind elsewhere without a token, and a mounted app
refuses any other client. With tokens, every request must carry one, as the password of
HTTP basic auth (the user name is recorded as the actor) or as an API bearer token.
Pages act through forms that carry a per-browser CSRF token (double submit, SameSite
cookie) and an Origin check; the API acts only on JSON bodies, which no cross-site form
can send without a CORS preflight this app never grants.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from enum import Enum

from fastapi import HTTPException, Request

from scheduler.config import ConsoleSettings
from scheduler.errors import ConfigError

CSRF_COOKIE = "horae_csrf"
CSRF_FIELD = "csrf"


class Role(str, Enum):
    """viewer: reads everything; operator: also acts on jobs, schedules and topics."""

    VIEWER = "viewer"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Principal:
    """The caller of one request: the actor name recorded with its actions, and its role."""

    name: str
    role: Role

    @property
    def can_act(self) -> bool:
        return self.role is Role.OPERATOR

    @property
    def actor(self) -> str:
        """How the audit names this caller's actions."""
        return f"console:{self.name}"


def is_loopback(host: str | None) -> bool:
    """Whether an address (or "localhost") is the machine's own."""
    if host in ("localhost", "testclient"):
        return True
    try:
        return ipaddress.ip_address((host or "").strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, settings: ConsoleSettings) -> None:
    """Refuse to listen beyond loopback without a token.

    Raises:
        ConfigError: naming the host and the settings that would allow it.
    """
    if not is_loopback(host) and not (settings.viewer_token or settings.operator_token):
        raise ConfigError(
            f"console host {host!r} is not loopback: set console.operator_token and/or console.viewer_token "
            "(HORAE_CONSOLE__OPERATOR_TOKEN, HORAE_CONSOLE__VIEWER_TOKEN) or bind 127.0.0.1")


class Auth:
    """The roles of requests under one ConsoleSettings."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self._tokens = [(t, r) for t, r in ((settings.operator_token, Role.OPERATOR),
                                            (settings.viewer_token, Role.VIEWER)) if t]

    @property
    def open(self) -> bool:
        """No token configured: loopback clients only, each an operator."""
        return not self._tokens

    def principal(self, request: Request) -> Principal:
        """The request's caller.

        Raises:
            HTTPException: 401 (with a basic-auth challenge) without a valid token; 403 for
                a non-loopback client of a console without tokens.
        """
        if self.open:
            client = request.client.host if request.client else None
            if not is_loopback(client):
                raise HTTPException(403, "this console has no tokens configured and answers loopback clients only")
            return Principal("local", Role.OPERATOR)
        name, token = _credentials(request.headers.get("authorization", ""))
        for expected, role in self._tokens:
            if token and hmac.compare_digest(token.encode(), expected.encode()):
                return Principal(name or role.value, role)
        raise HTTPException(401, "a valid token is required (basic auth password or bearer token)",
                            headers={"WWW-Authenticate": 'Basic realm="horae", charset="UTF-8"'})


def _credentials(header: str) -> tuple[str, str]:
    """(user name, token) of an Authorization header; ("", "") when absent or malformed."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return "", value.strip()
    if scheme.lower() == "basic":
        try:
            user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return "", ""
        return _actor_name(user), password
    return "", ""


def _actor_name(user: str) -> str:
    """A basic-auth user name as an actor name: printable, at most 64 characters."""
    kept = "".join(c for c in user if c.isprintable())[:64]
    return kept


def csrf_token(request: Request) -> str:
    """This browser's CSRF token (from its cookie, or a new one the response must set)."""
    return request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(24)


def check_form_post(request: Request, submitted: str | None) -> None:
    """A page's POST must come from this console's own form.

    Raises:
        HTTPException: 403 when the CSRF token is missing or wrong, or the Origin is another site.
    """
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not cookie or not submitted or not hmac.compare_digest(cookie.encode(), submitted.encode()):
        raise HTTPException(403, "CSRF check failed: reload the page and submit its form again")
    check_origin(request)


def check_origin(request: Request) -> None:
    """Refuse a request whose Origin header names another host than the one it was sent to.

    Raises:
        HTTPException: 403.
    """
    origin = request.headers.get("origin")
    if origin and origin != "null":
        host = origin.split("://", 1)[-1]
        if host != request.headers.get("host"):
            raise HTTPException(403, f"cross-origin request from {origin!r} refused")
    elif origin == "null":
        raise HTTPException(403, "cross-origin request from an opaque origin refused")
