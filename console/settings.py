"""The `[console]` section: where `horae console` listens, who may see and act, where trace ids
link to; beside the package that reads it, composed with the others by the root
(horae/settings.py). Defaults: config/horae.toml (tests/unit/test_config.py keeps them equal)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from scheduler.core.config import Section


class ConsoleSettings(Section):
    """`horae console`: where it listens, who may see and act, where trace ids link to.

    Bound to loopback it may run without credentials; any other address needs at least
    one token (console/auth.py). A token is the password of HTTP basic auth (any user
    name, recorded as the actor) or a bearer token of the JSON API.
    """

    host: str = Field(
        "127.0.0.1", description="Where it listens; any other address requires a token."
    )
    port: int = Field(8080, ge=0, le=65_535, description="Its port.")
    viewer_token: str = Field(
        "",
        repr=False,
        description="HTTP basic auth password (any user name) or API bearer token of viewers: "
        "they may look at everything, act on nothing.",
    )
    operator_token: str = Field(
        "",
        repr=False,
        description="The same for operators, who may also act (cancel, retry, replay, pause ...).",
    )
    trace_url: str = Field(
        "",
        description='A trace id\'s link, e.g. "http://localhost:16686/trace/{trace_id}" '
        '("" = none).',
    )
    page_size: int = Field(50, ge=1, le=1_000, description="Rows per page.")
    refresh_ms: int = Field(
        5_000,
        ge=1_000,
        le=600_000,
        description="How often (ms) the overview and a topic page refresh their live part "
        "(counts and charts) while the tab is shown.",
    )
    allowed_hosts: tuple[str, ...] = Field(
        (),
        description="Host names (optionally with a port) it answers besides loopback ones, e.g. "
        '["horae.example.com"]; checked for every request without tokens, and with tokens once '
        "set. Env: comma-separated.",
    )
    trusted_proxies: tuple[str, ...] = Field(
        (),
        description="Proxies (addresses or CIDRs) whose X-Forwarded-For/-Proto/-Host it "
        'believes, e.g. ["10.0.0.5", "10.1.0.0/16"]; ignored from anyone else. Needs tokens: a '
        "proxied client is no loopback caller. Env: comma-separated.",
    )
    max_body_bytes: int = Field(
        1_048_576,
        ge=1_024,
        le=1_073_741_824,
        description="A longer request body is refused (413) before it is read.",
    )

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _hosts(cls, value: Any) -> Any:
        return tuple(_host_entry(h) for h in _items(value))

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _proxies(cls, value: Any) -> Any:
        return tuple(_network_entry(p) for p in _items(value))


def _items(value: Any) -> list[Any]:
    """A list setting given as a list, or as comma-separated text (an env var)."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ValueError(f"a list is required; got {value!r}")


def _host_entry(value: Any) -> str:
    """A Host header value as `[console] allowed_hosts` takes it: a name or address, an
    optional port, lower-cased; never a URL."""
    from urllib.parse import urlsplit

    text = str(value).strip().lower() if isinstance(value, str) else ""
    parts = urlsplit("//" + text) if text and not any(c in text for c in "/?#@ \\") else None
    try:
        port_ok = parts is not None and (parts.port is None or 0 < parts.port)
    except ValueError:
        port_ok = False
    if parts is None or not parts.hostname or not port_ok:
        raise ValueError(
            f"allowed_hosts entry {value!r} is not a host name or address with an optional port "
            "(like console.example.com, console.example.com:8443, 10.0.0.5, [fd00::5]:8080)"
        )
    return text


def _network_entry(value: Any) -> str:
    """An address or CIDR of `[console] trusted_proxies`."""
    import ipaddress

    try:
        return str(ipaddress.ip_network(str(value).strip(), strict=False))
    except ValueError:
        raise ValueError(
            f"trusted_proxies entry {value!r} is not an IP address or CIDR "
            "(like 10.0.0.5, 10.0.0.0/8, fd00::/8)"
        ) from None
