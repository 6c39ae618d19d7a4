"""Who may look and who may act: roles from tokens, the loopback rule, CSRF, Origin.

A console without tokens answers loopback clients only (each is an operator named
"local"), and only requests naming a loopback Host (console/gate.py: a DNS-rebound page
names its own): `horae console` refuses to bind elsewhere without a token, and a mounted
app refuses any other client. With tokens, every request must carry one, as the password
of HTTP basic auth (the user name is recorded as the actor) or as an API bearer token.
Pages act through forms whose CSRF token is an HMAC (a per-process secret) of the
session nonce in the browser's cookie and the caller's identity and credential, so a
token set or guessed by someone else never matches; a form's POST also needs an Origin
(or Referer) that is this console's own. The API acts only on JSON bodies, which no
cross-site form can send without a CORS preflight this app never grants, and refuses
another Origin.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import re
import secrets
from dataclasses import dataclass, field
from enum import Enum

from fastapi import HTTPException, Request

from console.gate import same_origin
from console.settings import ConsoleSettings
from scheduler.core.errors import ConfigError

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
    # What the CSRF token is bound to besides the name and role: a digest of the credential.
    credential: str = field(default="", repr=False, compare=False)

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
            f"console host {host!r} is not loopback: set "
            f"console.operator_token and/or console.viewer_token "
            "(HORAE_CONSOLE__OPERATOR_TOKEN, HORAE_CONSOLE__VIEWER_TOKEN) or bind 127.0.0.1"
        )
    check_proxies(settings)


def check_proxies(settings: ConsoleSettings) -> None:
    """Refuse trusted proxies without a token: behind a proxy no caller is the loopback
    client a console without tokens takes for its operator.

    Raises:
        ConfigError: naming the setting and its value.
    """
    if settings.trusted_proxies and not (settings.viewer_token or settings.operator_token):
        raise ConfigError(
            f"console.trusted_proxies is {list(settings.trusted_proxies)!r} "
            f"but no token is set: a console "
            "without tokens answers direct loopback clients only; set console.operator_token "
            "and/or console.viewer_token, or leave console.trusted_proxies empty"
        )


class Auth:
    """The roles of requests under one ConsoleSettings, and the secret of its CSRF tokens."""

    def __init__(self, settings: ConsoleSettings) -> None:
        """Raises ConfigError: trusted proxies without a token (check_proxies)."""
        check_proxies(settings)
        self._tokens = [
            (t, r)
            for t, r in (
                (settings.operator_token, Role.OPERATOR),
                (settings.viewer_token, Role.VIEWER),
            )
            if t
        ]
        self._secret = secrets.token_bytes(32)  # CSRF tokens die with the process

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
                raise HTTPException(
                    403, "this console has no tokens configured and answers loopback clients only"
                )
            return Principal("local", Role.OPERATOR, "loopback")
        name, token = _credentials(request.headers.get("authorization", ""))
        for expected, role in self._tokens:
            if token and hmac.compare_digest(token.encode(), expected.encode()):
                return Principal(
                    name or role.value, role, hashlib.sha256(token.encode()).hexdigest()
                )
        raise HTTPException(
            401,
            "a valid token is required (basic auth password or bearer token)",
            headers={"WWW-Authenticate": 'Basic realm="horae", charset="UTF-8"'},
        )

    def sign(self, text: str) -> str:
        """HMAC-SHA256 of `text` under this process's secret, URL-safe base64."""
        mac = hmac.new(self._secret, text.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def _credentials(header: str) -> tuple[str, str]:
    """(user name, token) of an Authorization header; ("", "") when absent or malformed."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return "", value.strip()
    if scheme.lower() == "basic":
        try:
            user, _, password = (
                base64.b64decode(value.strip(), validate=True).decode().partition(":")
            )
        except (binascii.Error, UnicodeDecodeError):
            return "", ""
        return _actor_name(user), password
    return "", ""


def _actor_name(user: str) -> str:
    """A basic-auth user name as an actor name: printable, at most 64 characters."""
    kept = "".join(c for c in user if c.isprintable())[:64]
    return kept


CSRF_NONCE = re.compile(r"^[A-Za-z0-9_-]{32}$")  # secrets.token_urlsafe(24)


def session_nonce(request: Request) -> tuple[str, bool]:
    """This browser's session nonce (its cookie), and whether it is new (the response must
    set the cookie)."""
    nonce = request.cookies.get(CSRF_COOKIE, "")
    return (nonce, False) if CSRF_NONCE.match(nonce) else (secrets.token_urlsafe(24), True)


def csrf_token(auth: Auth, nonce: str, who: Principal) -> str:
    """The CSRF token of one session nonce and one caller (the pages' forms carry it)."""
    return auth.sign(f"{nonce}\x00{who.role.value}\x00{who.name}\x00{who.credential}")


def check_csrf(auth: Auth, request: Request, who: Principal, submitted: str | None) -> None:
    """A page's form must carry the token of this browser's session and this caller.

    Raises:
        HTTPException: 403 when the cookie or the token is missing or does not match.
    """
    nonce = request.cookies.get(CSRF_COOKIE, "")
    expected = csrf_token(auth, nonce, who) if CSRF_NONCE.match(nonce) else ""
    if (
        not expected
        or not submitted
        or not hmac.compare_digest(expected.encode(), submitted.encode())
    ):
        raise HTTPException(403, "CSRF check failed: reload the page and submit its form again")


def check_origin(request: Request, required: bool) -> None:
    """Refuse an action from another origin than this console's own (scheme and Host of
    the request, which console/gate.py checked against loopback and allowed_hosts).

    Args:
        required: a page's form (sent by a browser with its ambient credentials): without
            Origin, its Referer must be this console's; without either it is refused. An API
            call without Origin is no browser's (the API takes JSON bodies only).

    Raises:
        HTTPException: 403 naming what was refused.
    """
    scheme, host = request.url.scheme, request.headers.get("host")
    origin = request.headers.get("origin")
    if origin is not None:
        if origin == "null":
            raise HTTPException(
                403, "cross-origin request from an opaque origin (Origin: null) refused"
            )
        if not same_origin(origin, scheme, host):
            raise HTTPException(
                403,
                f"cross-origin request from {origin[:200]!r} refused: this console is "
                f"{scheme}://{host}",
            )
        return
    if not required:
        return
    referer = request.headers.get("referer")
    if referer is None:
        raise HTTPException(
            403,
            "a form post without Origin or Referer refused: it cannot be told from a "
            "cross-site one",
        )
    if not same_origin(referer, scheme, host):
        raise HTTPException(403, f"cross-origin request from a page of {referer[:200]!r} refused")
