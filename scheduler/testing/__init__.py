"""Testing scheduled code: the pytest plugin (`plugin.py`), the scheduler under test, the time
machine and the controllable clocks. `from scheduler.testing import FakeClock` keeps working."""

from scheduler.testing.clocks import FakeClock, SteppingClock

__all__ = ["FakeClock", "SteppingClock"]
