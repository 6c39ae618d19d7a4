"""The console trusts no page (issue 33): each request a probe got served is replayed and
refused. DNS rebinding (a Host that is not this console's), requests a proxy forwarded to a
console without tokens, CSRF tokens bound to the session and the caller, form posts without
Origin or Referer, bodies read only after the caller and role are known and never past
`[console] max_body_bytes`, JSON nested past the limit named as such."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from urllib.parse import quote

import httpx
import pytest

from console.app import create_app
from console.deps import MAX_BODY_DEPTH
from console.settings import ConsoleSettings
from scheduler.api import Scheduler
from scheduler.core.errors import ConfigError
from tests.console.conftest import Env, registry, settings_for

REBOUND = {"Host": "attacker.example:8099", "Origin": "http://attacker.example:8099"}
OWN = {"Origin": "http://127.0.0.1:8080"}
MiB = 1 << 20


def _error(r: httpx.Response, status: int) -> dict[str, object]:
    assert r.status_code == status, (r.status_code, r.text)
    error = r.json()["error"]
    assert set(error) == {"code", "message", "field"} and error["message"], error
    return error  # type: ignore[no-any-return]


async def _form_token(client: httpx.AsyncClient, path: str, **kw: object) -> str:
    page = await client.get(path, **kw)  # type: ignore[arg-type]
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None, "the page has no action form"
    return found.group(1)


# --------------------------------------------------------------------------- 1: DNS rebinding
async def test_a_rebound_host_is_refused_and_nothing_is_written_or_read(env: Env) -> None:
    s = env.scheduler
    victim = await s.schedule_in("pay.report", timedelta(hours=1), payload={"secret": "card-4242"})
    made = await env.client.post(
        "/api/v1/jobs",
        headers={**REBOUND, "Content-Type": "application/json"},
        content=b'{"topic":"fp.never","delay_s":3600,"job_id":"rebind-proof"}',
    )
    error = _error(made, 421)
    assert error["code"] == "MISDIRECTED_REQUEST" and "attacker.example:8099" in str(
        error["message"]
    )
    assert await s.get_job("rebind-proof") is None
    cancel = await env.client.post(f"/api/v1/jobs/{victim}/cancel", json={}, headers=REBOUND)
    _error(cancel, 421)
    assert (await s.get_job(victim)).state.value == "scheduled"  # type: ignore[union-attr]
    listing = await env.client.get("/api/v1/jobs", headers={"Host": "attacker.example:8099"})
    _error(listing, 421)
    assert "card-4242" not in listing.text
    page = await env.client.get(f"/jobs/{victim}", headers={"Host": "attacker.example"})
    assert page.status_code == 421 and "card-4242" not in page.text
    for host in (
        "127.0.0.1:8080",
        "127.0.0.1",
        "localhost:8099",
        "LOCALHOST",
        "[::1]:8080",
        "[::1]",
    ):
        r = await env.client.get("/api/v1/stats", headers={"Host": host})
        assert r.status_code == 200, (host, r.text)
    for host in (
        "127.0.0.1.attacker.example",
        "localhost.attacker.example:8080",
        "0.0.0.0:8080",
        "",
    ):
        _error(await env.client.get("/api/v1/stats", headers={"Host": host}), 421)


async def test_probes_reach_the_health_routes_whatever_the_host(env: Env) -> None:
    """A Kubernetes probe sends Host: <pod-ip>:<port>: /healthz and /readyz pass the Host
    check (they reveal nothing); any other path with that Host does not."""
    for path in ("/healthz", "/readyz"):
        r = await env.client.get(path, headers={"Host": "10.1.2.3:8080"})
        assert r.status_code != 421, (path, r.status_code)
    _error(await env.client.get("/api/v1/stats", headers={"Host": "10.1.2.3:8080"}), 421)


async def test_a_console_without_tokens_refuses_what_a_proxy_forwarded(env: Env) -> None:
    """Behind a reverse proxy on the same host every client is "loopback": a request that
    says it was forwarded is no loopback caller's."""
    victim = await env.scheduler.schedule_in("pay.report", timedelta(hours=1))
    for header in (
        {"X-Forwarded-For": "203.0.113.9"},
        {"Forwarded": "for=203.0.113.9"},
        {"X-Real-IP": "203.0.113.9"},
    ):
        r = await env.client.post(f"/api/v1/jobs/{victim}/cancel", json={}, headers=header)
        assert "proxy" in str(_error(r, 403)["message"])
    assert (await env.scheduler.get_job(victim)).state.value == "scheduled"  # type: ignore[union-attr]


@pytest.fixture
async def scheduler(namespace: str, redis_url: str, database_url: str) -> AsyncIterator[Scheduler]:
    s = Scheduler(settings=settings_for(namespace, redis_url, database_url), listeners=registry())
    await s.connect()
    await s.start_relay()
    yield s
    await s.close()


def _client(
    s: Scheduler, peer: str = "127.0.0.1", base: str = "http://127.0.0.1:8080", **console: object
) -> httpx.AsyncClient:
    checked = ConsoleSettings.model_validate({**s.settings.console.model_dump(), **console})
    settings = s.settings.model_copy(update={"console": checked})
    transport = httpx.ASGITransport(app=create_app(settings, scheduler=s), client=(peer, 41000))
    return httpx.AsyncClient(transport=transport, base_url=base)


def _basic(user: str, token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


TOKENS = {"viewer_token": "v-secret", "operator_token": "o-secret"}
OPERATOR = {"Authorization": "Bearer o-secret"}


async def test_allowed_hosts_are_answered_and_apply_with_tokens_too(scheduler: Scheduler) -> None:
    async with _client(
        scheduler, base="http://horae.internal:8080", allowed_hosts=("horae.internal",)
    ) as c:
        assert (await c.get("/api/v1/stats")).status_code == 200
        _error(await c.get("/api/v1/stats", headers={"Host": "attacker.example"}), 421)
    async with _client(
        scheduler,
        peer="10.0.0.7",
        base="http://horae.example.com",
        allowed_hosts=("horae.example.com:443", "horae.example.com:80"),
        **TOKENS,
    ) as c:
        assert (await c.get("/api/v1/stats", headers=OPERATOR)).status_code == 200
        _error(await c.get("/api/v1/stats", headers={**OPERATOR, "Host": "attacker.example"}), 421)
        _error(
            await c.get("/api/v1/stats", headers={**OPERATOR, "Host": "horae.example.com:8443"}),
            421,
        )
    async with _client(scheduler, peer="10.0.0.7", base="http://anything.example", **TOKENS) as c:
        # with tokens and no allowed_hosts the Host is not checked (a rebound page has no token)
        assert (await c.get("/api/v1/stats", headers=OPERATOR)).status_code == 200


async def test_trusted_proxies_need_tokens_and_are_the_only_ones_believed(
    scheduler: Scheduler,
) -> None:
    with pytest.raises(
        ConfigError, match=r"console\.trusted_proxies is \['10\.0\.0\.5/32'\] but no token"
    ):
        _client(scheduler, trusted_proxies=("10.0.0.5",))
    victim = await scheduler.schedule_in("pay.report", timedelta(hours=1))
    forwarded = {
        "X-Forwarded-Host": "horae.example.com",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-For": "198.51.100.4",
    }
    settings = {
        **TOKENS,
        "allowed_hosts": ("horae.example.com",),
        "trusted_proxies": ("10.0.0.0/24",),
    }
    async with _client(
        scheduler, peer="10.0.0.5", base="http://console-pod:8080", **settings
    ) as proxy:
        page = await proxy.get(f"/jobs/{victim}", headers={**forwarded, **OPERATOR})
        assert "secure" in page.headers["set-cookie"].lower()  # the client's scheme is https
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found is not None
        token = found.group(1)
        proxy.cookies.set(
            "horae_csrf", page.cookies["horae_csrf"]
        )  # (httpx keeps no Secure cookie over http)
        done = await proxy.post(
            f"/jobs/{victim}/cancel",
            data={"csrf": token},
            headers={**forwarded, **OPERATOR, "Origin": "https://horae.example.com"},
        )
        assert done.status_code == 303, done.text
    assert (await scheduler.get_job(victim)).state.value == "cancelled"  # type: ignore[union-attr]
    async with _client(
        scheduler, peer="10.9.9.9", base="http://console-pod:8080", **settings
    ) as stranger:
        # the same headers from anyone else are ignored: its Host is then console-pod, not allowed
        _error(await stranger.get("/api/v1/stats", headers={**forwarded, **OPERATOR}), 421)


# ------------------------------------------------------------------------------------ 2: CSRF
async def test_a_csrf_token_of_the_attackers_choosing_is_refused(env: Env) -> None:
    victim = await env.scheduler.schedule_in("pay.report", timedelta(hours=1))
    env.client.cookies.set("horae_csrf", "attacker")
    r = await env.client.post(f"/jobs/{victim}/cancel", data={"csrf": "attacker"}, headers=OWN)
    assert r.status_code == 403 and "CSRF check failed" in r.text
    nonce = "A" * 32  # a well-formed nonce the attacker set: its token is the console's secret HMAC
    env.client.cookies.set("horae_csrf", nonce)
    r = await env.client.post(f"/jobs/{victim}/cancel", data={"csrf": nonce}, headers=OWN)
    assert r.status_code == 403 and "CSRF check failed" in r.text
    assert (await env.scheduler.get_job(victim)).state.value == "scheduled"  # type: ignore[union-attr]


async def test_a_form_post_needs_this_consoles_origin_or_referer(env: Env) -> None:
    victim = await env.scheduler.schedule_in("pay.report", timedelta(hours=1))
    token = await _form_token(env.client, f"/jobs/{victim}")
    path = f"/jobs/{victim}/cancel"
    bare = await env.client.post(path, data={"csrf": token})
    assert bare.status_code == 403 and "without Origin or Referer" in bare.text
    for headers in (
        {"Origin": "http://attacker.example:8080"},
        {"Origin": "null"},
        {"Origin": "https://127.0.0.1:8080"},
        {"Origin": "http://127.0.0.1:9999"},
        {"Referer": "http://attacker.example/page"},
    ):
        r = await env.client.post(path, data={"csrf": token}, headers=headers)
        assert r.status_code == 403 and "refused" in r.text, headers
    assert (await env.scheduler.get_job(victim)).state.value == "scheduled"  # type: ignore[union-attr]
    ok = await env.client.post(
        path, data={"csrf": token}, headers={"Referer": f"http://127.0.0.1:8080/jobs/{victim}"}
    )
    assert ok.status_code == 303, ok.text
    assert (await env.scheduler.get_job(victim)).state.value == "cancelled"  # type: ignore[union-attr]


async def test_a_csrf_token_is_bound_to_its_session_and_its_caller(scheduler: Scheduler) -> None:
    victim = await scheduler.schedule_in("pay.report", timedelta(hours=1))
    async with _client(scheduler, peer="10.0.0.7", **TOKENS) as olga:
        token = await _form_token(olga, f"/jobs/{victim}", headers=_basic("olga", "o-secret"))
        cookie = olga.cookies["horae_csrf"]
        path = f"/jobs/{victim}/cancel"
        olga.cookies.set("horae_csrf", "B" * 32)  # another session of the same caller
        other_session = await olga.post(
            path, data={"csrf": token}, headers={**_basic("olga", "o-secret"), **OWN}
        )
        assert other_session.status_code == 403 and "CSRF" in other_session.text
        olga.cookies.set("horae_csrf", cookie)
        other_caller = await olga.post(
            path, data={"csrf": token}, headers={**_basic("mallory", "o-secret"), **OWN}
        )
        assert other_caller.status_code == 403 and "CSRF" in other_caller.text
        assert (await scheduler.get_job(victim)).state.value == "scheduled"  # type: ignore[union-attr]
        mine = await olga.post(
            path, data={"csrf": token}, headers={**_basic("olga", "o-secret"), **OWN}
        )
        assert mine.status_code == 303, mine.text
    assert (await scheduler.get_job(victim)).state.value == "cancelled"  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------- 3: bodies
class Body:
    """A request body streamed in `chunks` pieces of `size` bytes, counting what the app pulled."""

    def __init__(self, chunks: int, size: int = MiB, fill: bytes = b" ") -> None:
        self.chunks, self.piece, self.pulled = chunks, fill * size, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.chunks):
            self.pulled += 1
            yield self.piece


async def test_a_viewers_body_is_never_read(scheduler: Scheduler) -> None:
    async with _client(scheduler, peer="10.0.0.7", **TOKENS) as c:
        body = Body(100)  # 100 MiB, chunked
        r = await c.post(
            "/api/v1/jobs",
            content=body,
            headers={**_basic("ann", "v-secret"), "Content-Type": "application/json"},
        )
        assert _error(r, 403)["code"] == "FORBIDDEN"
        assert body.pulled == 0
        stranger = Body(100)
        r = await c.post(
            "/api/v1/jobs", content=stranger, headers={"Content-Type": "application/json"}
        )
        _error(r, 401)
        assert stranger.pulled == 0
        form = Body(100)
        r = await c.post(
            "/jobs/x/cancel",
            content=form,
            headers={
                **_basic("ann", "v-secret"),
                **OWN,
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        assert r.status_code == 403 and form.pulled == 0
    await scheduler.audit.flush()
    refused = [(a.actor, a.action, a.outcome) for a in await scheduler.audit.actions("x")]
    assert refused == [("ann", "cancel", "refused")]


async def test_a_body_past_max_body_bytes_is_refused_without_being_buffered(
    scheduler: Scheduler,
) -> None:
    async with _client(scheduler, peer="10.0.0.7", max_body_bytes=64 * 1024, **TOKENS) as c:
        declared = Body(100)
        r = await c.post(
            "/api/v1/jobs",
            content=declared,
            headers={
                **OPERATOR,
                "Content-Type": "application/json",
                "Content-Length": str(100 * MiB),
            },
        )
        error = _error(r, 413)
        assert error == {
            "code": "PAYLOAD_TOO_LARGE",
            "field": "body",
            "message": "body: longer than [console] max_body_bytes (65,536 bytes)",
        }
        assert declared.pulled == 0
        chunked = Body(100, size=16 * 1024)
        r = await c.post(
            "/api/v1/jobs",
            content=chunked,
            headers={**OPERATOR, "Content-Type": "application/json"},
        )
        assert _error(r, 413)["field"] == "body"
        assert chunked.pulled == 5  # counted while streaming: the fifth 16 KiB piece passed 64 KiB
        page = Body(100, size=16 * 1024)
        r = await c.post(
            "/jobs/x/cancel",
            content=page,
            headers={**OPERATOR, **OWN, "Content-Type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code == 413 and page.pulled == 5
        ok = await c.post(
            "/api/v1/jobs",
            json={"topic": "pay.report", "delay_s": 3600, "payload": "x" * 60_000},
            headers=OPERATOR,
        )
        assert ok.status_code == 201, ok.text
    assert (await scheduler.stats())["scheduled"] == 1  # the one within the limit


async def test_the_default_limit_is_one_mebibyte(env: Env) -> None:
    r = await env.client.post(
        "/api/v1/jobs", content=b" " * (MiB + 1), headers={"Content-Type": "application/json"}
    )
    assert "1,048,576 bytes" in str(_error(r, 413)["message"])


async def test_a_body_nested_too_deep_says_so(env: Env) -> None:
    for depth in (100_000, MAX_BODY_DEPTH + 1):
        r = await env.client.post(
            "/api/v1/jobs",
            content=b"[" * depth + b"]" * depth,
            headers={"Content-Type": "application/json"},
        )
        error = _error(r, 400)
        assert error["field"] == "body" and error["message"] == (
            f"body: nested deeper than {MAX_BODY_DEPTH} levels of arrays and objects"
        ), error
    brackets_in_text = '{"topic": "pay.report", "delay_s": 3600, "payload": "' + "[" * 5000 + '"}'
    r = await env.client.post(
        "/api/v1/jobs",
        content=brackets_in_text.encode(),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 201, r.text


# -------------------------------------------------------------------------- 4: ids with "/"
ODD_IDS = [
    "orders/123",
    "100%",
    "50%2F",
    "with space",
    "what?now",
    "hash#tag",
    "ünï/cødé",
    "a/cancel",
    "a/cancel/cancel",
    "/leading",
    "trailing/",
    "x/../y",
]


def _seg(value: str) -> str:
    return quote(value, safe="")


@pytest.mark.parametrize("job_id", ODD_IDS)
async def test_any_job_id_round_trips_through_the_api_and_the_pages(env: Env, job_id: str) -> None:
    made = await env.client.post(
        "/api/v1/jobs", json={"topic": "pay.report", "delay_s": 3600, "job_id": job_id}
    )
    assert made.status_code == 201 and made.json()["job_id"] == job_id, made.text
    got = await env.client.get(f"/api/v1/jobs/{_seg(job_id)}")
    assert got.status_code == 200 and got.json()["id"] == job_id, got.text
    listed = await env.client.get("/jobs")
    assert f'href="/jobs/{_seg(job_id)}"' in listed.text
    page = await env.client.get(f"/jobs/{_seg(job_id)}")
    assert page.status_code == 200 and f"{html.escape(job_id)}</span>" in page.text
    assert f'action="/jobs/{_seg(job_id)}/cancel"' in page.text
    found = await env.client.get("/jobs", params={"id": job_id})  # the header's search box
    assert found.status_code == 303 and found.headers["location"] == f"/jobs/{_seg(job_id)}"
    token = await _form_token(env.client, f"/jobs/{_seg(job_id)}")
    rescheduled = await env.client.post(
        f"/jobs/{_seg(job_id)}/reschedule",
        headers=OWN,
        data={"csrf": token, "run_at": "2031-01-02T09:00", "tz": "UTC"},
    )
    assert rescheduled.status_code == 303, rescheduled.text
    assert rescheduled.headers["location"].startswith(
        f"/jobs/{_seg(job_id)}?msg=reschedule%3A+done"
    )
    cancelled = await env.client.post(f"/api/v1/jobs/{_seg(job_id)}/cancel", json={})
    assert cancelled.json()["outcome"] == "done", cancelled.text
    job = await env.scheduler.get_job(job_id)
    assert job is not None and job.state.value == "cancelled"
    retried = await env.client.post(
        f"/jobs/{_seg(job_id)}/retry", data={"csrf": token}, headers=OWN
    )
    assert retried.status_code == 303 and "retry%3A+done" in retried.headers["location"], (
        retried.text
    )


async def test_schedule_and_topic_names_with_a_slash_are_reachable(env: Env) -> None:
    s = env.scheduler
    for name in ("team/nightly", "50% off?", "a/pause"):
        await s.schedule_cron(name, "0 3 * * *", topic="pay.report")
        got = await env.client.get(f"/api/v1/crons/{_seg(name)}")
        assert got.status_code == 200 and got.json()["name"] == name, got.text
        paused = await env.client.post(f"/api/v1/crons/{_seg(name)}/pause", json={})
        assert paused.json()["outcome"] == "done", paused.text
        assert (await s.get_cron(name)).paused  # type: ignore[union-attr]
        crons = await env.client.get("/crons")
        assert f'action="/crons/{_seg(name)}/resume"' in crons.text
        token = re.search(r'name="csrf" value="([^"]+)"', crons.text).group(1)  # type: ignore[union-attr]
        resumed = await env.client.post(
            f"/crons/{_seg(name)}/resume", data={"csrf": token}, headers=OWN
        )
        assert resumed.status_code == 303 and "resume%3A+done" in resumed.headers["location"], (
            resumed.text
        )
        assert not (await s.get_cron(name)).paused  # type: ignore[union-attr]
    topic = "team/pay.dead"
    letters = await env.client.get("/dead-letters", params={"topic": topic})
    token = re.search(r'name="csrf" value="([^"]+)"', letters.text)
    token_value = token.group(1) if token else await _form_token(env.client, "/crons")
    purged = await env.client.post(
        f"/topics/{_seg(topic)}/dead-letters/purge", data={"csrf": token_value}, headers=OWN
    )
    assert purged.status_code == 303 and "removed+0+dead+letters" in purged.headers["location"], (
        purged.text
    )
    assert [(a.action, a.target) for a in await s.audit.actions(topic)] == [
        ("dead_letter.purge", topic)
    ]


def test_the_settings_name_a_bad_entry_and_what_is_allowed() -> None:
    from horae.settings import load_settings

    good = load_settings(
        env={
            "HORAE_CONSOLE__ALLOWED_HOSTS": "Horae.Example.com, [fd00::5]:8443",
            "HORAE_CONSOLE__TRUSTED_PROXIES": "10.0.0.5,10.1.0.0/16",
        }
    ).console
    assert good.allowed_hosts == ("horae.example.com", "[fd00::5]:8443")
    assert good.trusted_proxies == ("10.0.0.5/32", "10.1.0.0/16")
    for name, value, allowed in (
        ("allowed_hosts", "https://horae.example.com", "not a host name or address"),
        ("allowed_hosts", "horae.example.com:http", "not a host name or address"),
        ("trusted_proxies", "proxy.internal", "not an IP address or CIDR"),
    ):
        with pytest.raises(ConfigError) as info:
            load_settings(env={f"HORAE_CONSOLE__{name.upper()}": value})
        assert f"console.{name}={value!r}" in str(info.value) and allowed in str(info.value), (
            info.value
        )
    with pytest.raises(ConfigError, match=r"console\.max_body_bytes='10'"):
        load_settings(env={"HORAE_CONSOLE__MAX_BODY_BYTES": "10"})
