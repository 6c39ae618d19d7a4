"""The names of horae's pytest plugin, for type annotations in tests (docs/how-to/testing.md).
Re-exports only: the plugin itself is `scheduler.testing.plugin`, loaded by pytest
through the package's `pytest11` entry point.

    from horae.testing import SchedulerUnderTest, TimeMachine

    async def test_nightly(horae: SchedulerUnderTest, horae_clock: TimeMachine) -> None: ...
"""

from __future__ import annotations

from scheduler.testing.clocks import FakeClock
from scheduler.testing.plugin import for_tests
from scheduler.testing.time_machine import ListenerError, TimeMachine
from scheduler.testing.under_test import JobRun, SchedulerUnderTest

__all__ = ["FakeClock", "JobRun", "ListenerError", "SchedulerUnderTest", "TimeMachine", "for_tests"]
