"""The pytest plugin's time machine: move a FakeClock forward from due time to due time,
letting a real worker (real Redis, real Lua) settle everything due at each instant, and
collect the exceptions listeners raise so a test sees them."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from listeners import Listener, ListenerRegistry, call_listener, qualified_name
from scheduler.core.errors import DoNotRetry, Retry
from scheduler.core.timeutil import ms_to_utc, parse_duration, utc_to_ms
from scheduler.testing.clocks import SteppingClock
from scheduler.worker.partitioned import AnyWorker

# Kicks of the worker within one settle before giving up: a listener that schedules a job
# due at once, forever, would otherwise never let time move.
MAX_ROUNDS = 10_000
POLL_S = 0.001


@dataclass(frozen=True)
class ListenerError:
    """One exception a listener raised: which job, topic and attempt, at which instant."""

    exception: Exception
    listener: str
    job_id: str
    topic: str
    attempt: int
    at: datetime


class RecordingRegistry(ListenerRegistry):
    """A view of another registry (the default one) whose listeners are wrapped to count
    the calls in flight and keep the exceptions they raise (re-raised to the engine, so
    retries and failures happen exactly as without it).

    Every other attribute is the wrapped registry's own, looked up on each use: listeners
    registered later, and anything a registry learns besides listeners, are seen as they are.
    """

    _OWN = frozenset(
        {
            "inner",
            "clock",
            "errors",
            "calls",
            "in_flight",
            "_wrappers",
            "listeners",
            "_wrap",
            "_make",
            "_record",
            "__class__",
            "__dict__",
        }
    )

    def __init__(self, inner: ListenerRegistry, clock: SteppingClock) -> None:
        # No super().__init__(): this object holds no listeners of its own.
        self.inner = inner
        self.clock = clock
        self.errors: list[ListenerError] = []
        self.calls = 0  # listener calls started
        self.in_flight = 0
        self._wrappers: dict[Listener, Listener] = {}

    def __getattribute__(self, name: str) -> Any:
        if name in RecordingRegistry._OWN:
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "inner"), name)

    def listeners(self, topic: str) -> tuple[Listener, ...]:
        """The wrapped registry's listeners of `topic`, each wrapped (the same wrapper every
        time)."""
        return tuple(self._wrap(fn) for fn in self.inner.listeners(topic))

    def _wrap(self, fn: Listener) -> Listener:
        try:
            return self._wrappers[fn]
        except KeyError:
            pass
        except TypeError:  # an unhashable callable object: wrapped on each use
            return self._make(fn)
        wrapper = self._wrappers[fn] = self._make(fn)
        return wrapper

    def _make(self, fn: Listener) -> Listener:
        @functools.wraps(fn)
        async def recorded(event: Any) -> Any:
            self.calls += 1
            self.in_flight += 1
            try:
                return await call_listener(fn, event)
            except (Retry, DoNotRetry):
                raise  # decisions, not errors
            except Exception as exc:
                self._record(fn, event, exc)
                raise
            finally:
                self.in_flight -= 1

        return recorded

    def _record(self, fn: Listener, event: Any, exc: Exception) -> None:
        at = ms_to_utc(self.clock.now_ms())
        job_id = getattr(event, "scheduled_job_id", "?")
        topic = getattr(event, "topic", "?")
        attempt = getattr(event, "attempt", 0)
        exc.add_note(
            f"horae: raised by listener {qualified_name(fn)} for job {job_id} "
            f"(topic {topic!r}, attempt {attempt}) at {at.isoformat()}"
        )
        self.errors.append(
            ListenerError(
                exception=exc,
                listener=qualified_name(fn),
                job_id=job_id,
                topic=topic,
                attempt=attempt,
                at=at,
            )
        )


class TimeMachine:
    """The `horae_clock` fixture: the test's clock, moved only by `advance`, `advance_to`
    and `run_until_idle`, each of which returns once everything due by then has run.

    Args:
        clock: the clock the scheduler and its worker use.
        worker: the worker that runs the jobs.
        registry: the recording view of the listeners the worker runs.
        raise_errors: re-raise listener exceptions from advance/run_until_idle.
        settle_timeout: real seconds one settling round may take (listeners included).
    """

    def __init__(
        self,
        clock: SteppingClock,
        worker: AnyWorker,
        registry: RecordingRegistry,
        *,
        raise_errors: bool = True,
        settle_timeout: float = 60.0,
    ) -> None:
        self.clock, self.worker, self.registry = clock, worker, registry
        self.raise_errors = raise_errors
        self.settle_timeout = settle_timeout
        self._reported = 0  # errors re-raised so far
        clock.busy_now = lambda: worker.active

    # ------------------------------------------------------------------ reading
    def now(self) -> datetime:
        """The current instant (aware UTC)."""
        return ms_to_utc(self.clock.now_ms())

    def now_ms(self) -> int:
        """The current instant in epoch milliseconds."""
        return self.clock.now_ms()

    @property
    def errors(self) -> list[ListenerError]:
        """Every exception a listener raised so far (Retry and DoNotRetry are decisions, not
        errors)."""
        return list(self.registry.errors)

    # ------------------------------------------------------------------ moving
    async def advance(self, delta: timedelta | float | str) -> None:
        """Move time forward by `delta` (a timedelta, seconds, or "25h", "90s", "1h30m"),
        running in order everything that becomes due on the way: each due time in turn
        (delayed jobs, retries after their backoff, cron ticks in their zones) is settled
        fully (claimed, listeners run, settled) before time moves on.

        Raises:
            InvalidDelay: `delta` is not a duration >= 0 (the message names `delta`).
            Exception: a listener's exception (several: an ExceptionGroup), after settling,
                unless raise_errors is off (`@pytest.mark.horae(raise_errors=False)`).
        """
        seconds = parse_duration(delta, "delta")
        await self._travel(self.clock.now_ms() + round(seconds * 1000))

    async def advance_to(self, when: datetime) -> None:
        """Like `advance`, up to the instant `when` (an aware datetime, not in the past).

        Raises:
            ValueError: `when` is naive or before now.
        """
        if not isinstance(when, datetime) or when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(
                f"when must be an aware datetime (e.g. with tzinfo=timezone.utc); got {when!r}"
            )
        target = utc_to_ms(when)
        if target < self.clock.now_ms():
            raise ValueError(
                f"when {when.isoformat()} is before now ({self.now().isoformat()}): "
                "the clock only moves forward"
            )
        await self._travel(target)

    async def run_until_idle(self) -> None:
        """Settle everything due now, and what that makes due now, without moving time.

        Raises:
            Exception: as `advance`.
        """
        await self._settle()
        self._raise_new_errors()

    async def _travel(self, target_ms: int) -> None:
        await self._settle()
        while True:
            now = self.clock.now_ms()
            due = self.worker.next_due_ms
            if due is None or due > target_ms or due <= now:
                break  # due <= now after a settle: left to the worker, as in production
            self.clock.set_ms(due)
            await self._settle()
        if target_ms > self.clock.now_ms():
            self.clock.set_ms(target_ms)
            await self._settle()
        self._raise_new_errors()

    async def _settle(self) -> None:
        """Kick the worker until a claim made at the current time takes nothing and
        nothing runs: everything due now has run and been settled."""
        for _ in range(MAX_ROUNDS):
            if await self._round():
                return
        raise RuntimeError(
            f"jobs kept becoming due at {self.now().isoformat()} after {MAX_ROUNDS} rounds "
            "(a listener scheduling a job due at once, every time it runs?)"
        )

    async def _round(self) -> bool:
        """One kick and its aftermath; True when no claim it caused took anything, no
        listener ran, and the worker was waiting when kicked (so its claim saw all that
        was written before)."""
        was_waiting, calls = self.clock.waiting, self.registry.calls
        self.clock.kick()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settle_timeout
        while not (
            self.clock.waited
            and self.clock.waiting
            and self.worker.active == 0
            and self.registry.in_flight == 0
        ):
            if loop.time() > deadline:
                raise TimeoutError(
                    f"the worker did not settle within {self.settle_timeout:g} s "
                    f"at {self.now().isoformat()}: {self.worker.active} attempts "
                    f"and {self.registry.in_flight} listener calls still running"
                )
            await asyncio.sleep(POLL_S)
        return was_waiting and self.clock.busy == 0 and self.registry.calls == calls

    def _raise_new_errors(self) -> None:
        """Re-raise the listener exceptions not reported yet: one as itself, several as a group."""
        new = self.registry.errors[self._reported :]
        self._reported = len(self.registry.errors)
        if not self.raise_errors or not new:
            return
        if len(new) == 1:
            raise new[0].exception
        raise ExceptionGroup(
            f"{len(new)} listener errors (@pytest.mark.horae(raise_errors=False) lets "
            "listeners fail)",
            [e.exception for e in new],
        )

    def unreported(self) -> list[ListenerError]:
        """Listener errors raised since the last advance/run_until_idle reported them."""
        return self.registry.errors[self._reported :]
