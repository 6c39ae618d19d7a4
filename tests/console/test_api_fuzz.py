"""The HTTP API fuzzed from its own OpenAPI document (schemathesis), on a real Redis and
PostgreSQL holding a failed (with its attempt in the audit), a completed and a scheduled job,
a schedule, a topic with a dead-letter topic and a dead letter.

Properties, for every operation and every generated request (valid and invalid):
no 5xx; status, content type and body as the document says; every 4xx is the API's one
error shape {"error": {"code", "message", "field"}} with a message, and a 400/422 names
the field to blame (a path, query or body member of the request) when one is.
As an operator of an open console (actions run), as a viewer of a console with tokens
(reads served, actions a 403), and without credentials (everything a 401 that says so).

The app runs on schemathesis's own event loop thread (its lifespan connects the app's
Scheduler there), so the module's seed data goes in through a Scheduler of its own on the
test loop; both share the module's namespace and database.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import hypothesis
import pytest
import schemathesis
from schemathesis.generation.case import Case
from schemathesis.python import asgi

from console.app import create_app
from scheduler.api import Scheduler
from scheduler.core.topic_options import TopicOptions
from tests.conftest import delete_namespace_keys, own_database
from tests.console.conftest import failing_job, registry, settings_for, settle
from tests.hypothesis_profiles import PROFILE, budget

# Examples per operation and generation phase; with ~14 operations this keeps the module
# under a minute on a loaded two-core machine.
EXAMPLES = budget(25)


@dataclass(frozen=True)
class Servers:
    namespace: str
    redis_url: str
    database_url: str


@pytest.fixture(scope="module")
async def fuzz_servers(redis_url: str, server_dsn: str) -> AsyncIterator[Servers]:
    """A namespace and a database of this module's own (the fuzzed app lives across the
    module's tests), seeded with jobs of every kind; both removed afterwards."""
    namespace = f"t-fuzz-{uuid.uuid4().hex[:10]}"
    async with own_database(server_dsn) as database_url:
        servers = Servers(namespace, redis_url, database_url)
        try:
            await _seed(servers)
            yield servers
        finally:
            asgi.shutdown_lifespans()  # close the apps' Schedulers before their database goes
            delete_namespace_keys(redis_url, namespace)


async def _seed(servers: Servers) -> None:
    """A failed job (with attempts in the audit), a completed one, a scheduled one with a key,
    a cron schedule, a configured topic and a dead letter: the reads then return real rows."""
    s = Scheduler(
        settings=settings_for(servers.namespace, servers.redis_url, servers.database_url),
        listeners=registry(),
    )
    await s.connect()
    try:
        await s.configure_topic("pay.charge", TopicOptions(dead_letter="pay.charge.dead"))
        async with s.worker(concurrency=2):
            await failing_job(s)
            done = await s.schedule_in("pay.report", timedelta(0), payload={"n": 1}, key="acct-1")
            await settle(s, done)
        await s.schedule_at(
            "pay.report",
            datetime.now(UTC) + timedelta(days=30),
            key="acct-2",
            metadata={"who": "seed"},
            priority=5,
        )
        await s.schedule_cron("nightly", "0 3 * * *", topic="pay.report", tz="Europe/Paris")
    finally:
        await s.close()


def _document(**console: object) -> dict[str, Any]:
    """The app's OpenAPI document, built without serving (the tests are made at import)."""
    return create_app(
        settings=settings_for("doc", "redis://unused", "postgresql://unused", **console)
    ).openapi()


TOKENS = {"viewer_token": "v-fuzz", "operator_token": "o-fuzz"}


class LateApp:
    """An ASGI app whose target a module fixture sets: the tests are made at import (one per
    operation of the document), the app needs the run's servers. schemathesis calls it, and
    sends its own probes (ignored_auth) to it, on its event loop thread."""

    def __init__(self) -> None:
        self.app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert self.app is not None, "the module's fixture sets the app before the first call"
        await self.app(scope, receive, send)


def _schema(document: dict[str, Any]) -> Any:
    schema = schemathesis.openapi.from_dict(document)
    schema.config.generation.update(max_examples=EXAMPLES, deterministic=PROFILE != "long")
    schema.app = LateApp()
    return schema


operator_api = _schema(_document())
viewer_api = _schema(_document(**TOKENS))
locked_api = _schema(_document(**TOKENS))
VIEWER = {"Authorization": f"Bearer {TOKENS['viewer_token']}"}


def _serve(schema: Any, servers: Servers, **console: object) -> Iterator[None]:
    """The app on the module's namespace and database; its Scheduler connects on the first
    call (the app's lifespan, which lasts until fuzz_servers ends)."""
    # schemathesis's ASGI client names the host "testserver" (as Starlette's TestClient does)
    schema.app.app = create_app(
        settings=settings_for(
            servers.namespace,
            servers.redis_url,
            servers.database_url,
            allowed_hosts=("testserver",),
            **console,
        )
    )
    yield


@pytest.fixture(scope="module")
def as_operator(fuzz_servers: Servers) -> Iterator[None]:
    """An open console (loopback callers are operators): every action is reachable."""
    yield from _serve(operator_api, fuzz_servers)


@pytest.fixture(scope="module")
def as_viewer(fuzz_servers: Servers) -> Iterator[None]:
    """A console with tokens, called with the viewer's."""
    yield from _serve(viewer_api, fuzz_servers, **TOKENS)


@pytest.fixture(scope="module")
def as_nobody(fuzz_servers: Servers) -> Iterator[None]:
    """A console with tokens, called without any."""
    yield from _serve(locked_api, fuzz_servers, **TOKENS)


def check_error_shape(case: Case, response: Any) -> None:
    """A 4xx is {"error": {"code", "message", "field"}}; a 400/422 names a member of the
    request when it blames one."""
    if not 400 <= response.status_code < 500:
        return
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "field"}, error
    assert isinstance(error["code"], str) and error["code"], error
    assert isinstance(error["message"], str) and error["message"].strip(), error
    if response.status_code == 422:
        assert error["field"], f"a 422 must name the field: {error}"
    field = error["field"]
    if field is not None:  # a member, or a path into one (dotted; a member's name may hold a dot)
        members = _members(case)
        assert any(field == m or field.startswith(f"{m}.") for m in members), (
            error,
            sorted(members),
        )


def _members(case: Case) -> set[str]:
    """The names a field may start with: the operation's parameters and body members."""
    op = case.operation
    names = {p.name for p in op.iter_parameters()} | {"body"}
    if isinstance(case.body, dict):
        names |= set(case.body)
    for body in op.body:
        props = body.definition.get("schema") or {}
        names |= set(_properties(op.schema.raw_schema, props))
    return names


def _properties(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref:
        node: Any = doc
        for part in ref.lstrip("#/").split("/"):
            node = node[part]
        return _properties(doc, node)
    return schema.get("properties") or {}


# Checks of the document's own (status codes, content types, bodies, Allow headers, invalid
# requests refused); a valid request's answer is judged by check_accepted instead.
EXCLUDED = [schemathesis.checks.positive_data_acceptance]
# Valid by the document yet refused by a check it cannot express: the IANA zone database,
# a cursor this API did not hand out (it is opaque), a window whose since is after its until,
# an instant before the year 1 or after 9999 once in UTC, the engine's limits on a payload's
# and metadata's JSON (size, depth, NUL anywhere in its strings: stated in words only), a
# duration's text whose units are out of order or whose value is past the bounds, a parent
# (after=) that does not exist.
SEMANTIC_FIELDS = {
    "tz",
    "cursor",
    "since",
    "run_at",
    "payload",
    "metadata",
    "delay",
    "timeout",
    "after",
}


def _excluded_by_id_prefix(case: Case, field: str | None) -> bool:
    """The jobs listing's description: `since` and `until` do not apply to an `id_prefix`
    search; a 422 naming one of them there is that rule, not a valid request refused."""
    return field in ("since", "until") and (case.query or {}).get("id_prefix") is not None


def check_accepted(case: Case, response: Any, refusals: tuple[int, ...]) -> None:
    """A request the document calls valid is served, or refused only as the caller's role or
    a missing job or schedule, or a job's state (409), explains, or for a field the document
    cannot check."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code < 300:
        return
    if response.status_code in (400, 422):
        field = response.json()["error"]["field"]
        if response.status_code == 400 and field in SEMANTIC_FIELDS:
            return
        if response.status_code == 422 and _excluded_by_id_prefix(case, field):
            return
    assert response.status_code in refusals, (
        f"valid request refused: {response.status_code} {response.text}"
    )


@operator_api.parametrize()
@hypothesis.settings(max_examples=EXAMPLES)  # derandomized by the house profile (ci)
def test_operator_calls_never_fail_and_answer_as_documented(case: Case, as_operator: None) -> None:
    response = case.call_and_validate(excluded_checks=EXCLUDED)
    check_error_shape(case, response)
    check_accepted(case, response, (404, 409))


@locked_api.parametrize()
@hypothesis.settings(max_examples=EXAMPLES)  # derandomized by the house profile (ci)
def test_calls_without_a_token_are_refused_as_documented(case: Case, as_nobody: None) -> None:
    response = case.call_and_validate(excluded_checks=EXCLUDED)
    check_error_shape(case, response)
    check_accepted(case, response, (401,))
    # nothing but a refusal: 401, or a request refused before anyone is asked who they are
    assert response.status_code in (400, 401, 405, 415, 422), response.text
    assert response.status_code != 400 or response.json()["error"]["field"] == "body", response.text


@viewer_api.parametrize()
@hypothesis.settings(max_examples=EXAMPLES)  # derandomized by the house profile (ci)
def test_viewer_reads_and_is_refused_every_action_as_documented(
    case: Case, as_viewer: None
) -> None:
    """Also checks (schemathesis's ignored_auth) that a call a viewer's token got served is
    refused without a token and with a wrong one."""
    response = case.call_and_validate(headers=VIEWER, excluded_checks=EXCLUDED)
    check_error_shape(case, response)
    check_accepted(case, response, (403, 404))
    if case.method == "POST" and response.status_code < 300:
        raise AssertionError(
            f"a viewer acted: {case.method} {case.path} {response.status_code} {response.text}"
        )
