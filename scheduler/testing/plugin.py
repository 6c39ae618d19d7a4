"""The pytest plugin, installed with the package (entry point `pytest11`, name `horae`):
fixtures `horae` (a connected Scheduler on a fresh namespace, with a fake clock and a
worker running the `@on_event` listeners) and `horae_clock` (its time machine), and the
marker `@pytest.mark.horae(...)`. docs/how-to/testing.md.

Imports only pytest until a fixture is used: every pytest run of a project that has
horae installed loads this module."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from horae.settings import Settings
    from scheduler.testing.time_machine import TimeMachine
    from scheduler.testing.under_test import Options, SchedulerUnderTest

try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - the fixtures say what is missing when used
    pytest_asyncio = None  # type: ignore[assignment]

DEFAULT_START = datetime(2030, 1, 1, tzinfo=UTC)  # a Tuesday
MARKER = (
    "horae(raise_errors=True, start=None, audit=True): options of the "
    "horae and horae_clock fixtures: raise_errors re-raises listener "
    "exceptions from advance/run_until_idle; start is the clock's "
    "first instant (aware datetime or ISO 8601 text, default "
    "2030-01-01T00:00:00Z); audit=False runs without PostgreSQL"
)
# Retention long enough that housekeeping prunes no finished job during a test, and
# enough completed jobs kept for ran().
KEEP_S = 100 * 365 * 86_400
KEEP_COMPLETED = 100_000


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)


def marker_options(node: pytest.Item) -> Options:
    """The merged `@pytest.mark.horae(...)` options of a test (the closest marker wins).

    Raises:
        pytest.UsageError: an unknown option, or a value of the wrong kind (naming both).
    """
    from scheduler.testing.under_test import Options

    given: dict[str, Any] = {}
    for mark in reversed(list(node.iter_markers("horae"))):
        if mark.args:
            raise pytest.UsageError(
                f"@pytest.mark.horae takes keyword options only "
                f"(raise_errors=, start=, audit=); got {mark.args!r}"
            )
        given.update(mark.kwargs)
    return Options(**_checked(given))


def _checked(given: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in given.items():
        if name in ("raise_errors", "audit"):
            if not isinstance(value, bool):
                raise pytest.UsageError(
                    f"@pytest.mark.horae({name}=...) must be True or False; got {value!r}"
                )
            out[name] = value
        elif name == "start":
            out[name] = _start(value)
        else:
            raise pytest.UsageError(
                f"@pytest.mark.horae: unknown option {name!r}; allowed: raise_errors, start, audit"
            )
    return out


def _start(value: object) -> datetime:
    when = value
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            when = None
    if not isinstance(when, datetime) or when.tzinfo is None or when.utcoffset() is None:
        raise pytest.UsageError(
            f"@pytest.mark.horae(start=...) must be an aware datetime or ISO 8601 text "
            f"with an offset, e.g. '2026-10-31T12:00:00Z'; got {value!r}"
        )
    return when.astimezone(UTC)


def for_tests(settings: Settings) -> Settings:
    """`settings` as the fixture wants them: no finished job pruned during a test (its clock
    may move years), and an audit relay that stops at once (its idle read blocks 50 ms)."""
    keep = settings.retention.model_copy(
        update={
            "completed_age_s": KEEP_S,
            "failed_age_s": KEEP_S,
            "cancelled_age_s": KEEP_S,
            "dead_letter_age_s": KEEP_S,
            "completed_count": KEEP_COMPLETED,
        }
    )
    audit = settings.audit.model_copy(update={"block_ms": min(settings.audit.block_ms, 50)})
    return settings.model_copy(update={"retention": keep, "audit": audit})


@pytest.fixture
def horae_settings() -> Settings:
    """The settings the `horae` fixture starts from: the application's (HORAE_* variables,
    horae.toml), `for_tests`. Override this fixture to pick other servers or options; the
    fixture always sets its own namespace and audit schema."""
    from horae.settings import load_settings

    return for_tests(load_settings())


async def _horae(
    request: pytest.FixtureRequest, horae_settings: Settings
) -> AsyncIterator[SchedulerUnderTest]:
    """A connected Scheduler on a namespace of its own, with a worker running the listeners
    of the default registry and a clock moved only by `horae_clock`; namespace and audit
    schema are deleted afterwards. Listener errors no advance reported fail the teardown."""
    from listeners import default_registry
    from scheduler.testing.under_test import scheduler_under_test

    options = marker_options(request.node)
    async with scheduler_under_test(horae_settings, options, default_registry, DEFAULT_START) as s:
        yield s
        machine = s.time_machine
    left = machine.unreported() if options.raise_errors else []  # the worker has stopped
    if left:
        raise ExceptionGroup(
            f"{len(left)} listener error(s) after the last advance/run_until_idle",
            [e.exception for e in left],
        )


if pytest_asyncio is not None:
    horae = pytest_asyncio.fixture(_horae, name="horae")
else:  # pragma: no cover

    @pytest.fixture(name="horae")
    def _horae_needs_pytest_asyncio() -> None:
        pytest.fail(
            "the horae fixtures need pytest-asyncio: pip install 'horae[testing]'", pytrace=False
        )


@pytest.fixture
def horae_clock(horae: SchedulerUnderTest) -> TimeMachine:
    """The time machine of the `horae` fixture: `await horae_clock.advance("25h")` runs
    everything due on the way, in order; `await horae_clock.run_until_idle()`; `now()`."""
    return horae.time_machine
