"""The analytics pipeline's errors (all derive from the project's SchedulerError)."""

from __future__ import annotations

from scheduler.core.errors import SchedulerError


class AnalyticsError(SchedulerError):
    """The analytics pipeline failed."""


class JavaMissing(AnalyticsError):
    """PySpark needs Java 17 or newer."""


class DatasetMissing(AnalyticsError):
    """Days of the window are missing from the exported dataset."""
