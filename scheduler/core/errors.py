"""The exception tree of horae. Every error we raise derives from SchedulerError.

    SchedulerError
    ├── ScheduleError              bad input at the API; nothing was written
    │   ├── RetryPolicyInvalid     code SCHEDULE_RETRY_POLICY_INVALID
    │   ├── InvalidTimezone
    │   ├── InvalidPayload
    │   ├── InvalidTopic
    │   ├── InvalidJobId
    │   ├── InvalidDelay
    │   ├── InvalidCron
    │   ├── InvalidFlowOption      a topic option, RateLimit, Dedupe or priority out of bounds
    │   ├── TopicPolicyLocked      configure_topic changing a topic's policy
    │   ├── TopicInUse             delete_topic while the topic has jobs
    │   ├── DeadLetterNotFound
    │   ├── JobNotFound            Scheduler.wait on an unknown job (or one deleted meanwhile)
    │   ├── InvalidDependency      `after=` / `on_parent_failure=` malformed, or parents that
    │   │                          cannot share the child's partition
    │   ├── UnknownParent          `after=` names a job that does not exist (`.parent_id`)
    │   ├── FlowRefused            a node of a flow exists or its topic's policy keeps it out
    │   └── InvalidProgress        event.progress()/event.log() given a value out of bounds
    ├── WaitTimeout                Scheduler.wait's timeout passed (also a TimeoutError)
    ├── LeaseLost                  event.progress()/event.log() of an attempt that lost its lease
    ├── ResultRefused              a listener's return value cannot be kept (the attempt fails)
    │   ├── ResultTooLarge         code result_too_large: over [limits] result_bytes as JSON
    │   └── ResultNotSerializable  code result_not_serializable: not JSON
    ├── ConfigError                a setting in a file or env var is wrong
    ├── MigrationRefused           `horae partitions migrate`: a precondition does not hold
    └── StorageError               Redis or PostgreSQL failed underneath us
        └── AuditUnavailable       the audit trail's PostgreSQL is unreachable (Redis may be fine)
            └── (audit.reader.FlushUnavailable, also a TimeoutError: a flush that cannot commit)

Listeners may raise Retry(delay=...) to pick their own delay or DoNotRetry to
fail the job at once; neither is an error of ours, they are decisions.
"""

from __future__ import annotations

from listeners.shown import shown

__all__ = ["shown"]  # how every input check shows a caller's value (listeners/shown.py)


class SchedulerError(Exception):
    """A horae error."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ScheduleError(SchedulerError):
    """The scheduling request is invalid; nothing was stored."""

    code = "SCHEDULE_INVALID"

    def __init__(self, message: str | None = None, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class RetryPolicyInvalid(ScheduleError):
    """The retry policy is outside the allowed bounds."""

    code = "SCHEDULE_RETRY_POLICY_INVALID"


class InvalidTimezone(ScheduleError):
    """The time zone is not a known IANA zone."""

    code = "SCHEDULE_TIMEZONE_INVALID"


class InvalidPayload(ScheduleError):
    """The payload or metadata cannot be stored as JSON."""

    code = "SCHEDULE_PAYLOAD_INVALID"


class InvalidTopic(ScheduleError):
    """The topic is empty, too long or reserved."""

    code = "SCHEDULE_TOPIC_INVALID"


class InvalidJobId(ScheduleError):
    """The job id is not a non-empty string of at most 200 characters."""

    code = "SCHEDULE_JOB_ID_INVALID"


class InvalidDelay(ScheduleError):
    """The run time, delay or timeout is not usable."""

    code = "SCHEDULE_DELAY_INVALID"


class InvalidCron(ScheduleError):
    """The cron expression cannot be parsed."""

    code = "SCHEDULE_CRON_INVALID"


class InvalidFlowOption(ScheduleError):
    """A flow-control value (a TopicOptions field, RateLimit, Dedupe, a priority) is not allowed."""

    code = "SCHEDULE_FLOW_OPTION_INVALID"


class TopicPolicyLocked(ScheduleError):
    """A topic's policy cannot change once stored (delete the topic to pick another); nothing was
    stored."""

    code = "TOPIC_POLICY_LOCKED"

    def __init__(self, message: str | None = None, *, old: str, new: str) -> None:
        super().__init__(message, field="policy")
        self.old = old
        self.new = new


class TopicInUse(ScheduleError):
    """The topic still has jobs; delete them first or pass force=True."""

    code = "TOPIC_IN_USE"


class DeadLetterNotFound(ScheduleError):
    """No such dead letter."""

    code = "DEAD_LETTER_NOT_FOUND"


class KeyRequired(ScheduleError):
    """The topic's policy (key_strict_fifo) orders jobs per key: a job needs `key=`."""

    code = "SCHEDULE_KEY_REQUIRED"


class JobNotFound(ScheduleError, LookupError):
    """No such job (never scheduled, deleted, or dropped by retention)."""

    code = "JOB_NOT_FOUND"


class InvalidDependency(ScheduleError):
    """`after=` or `on_parent_failure=` is not allowed (docs/how-to/dependencies.md)."""

    code = "SCHEDULE_DEPENDENCY_INVALID"


class UnknownParent(ScheduleError, LookupError):
    """A job named in `after=` does not exist (never scheduled, deleted, or dropped by
    retention); nothing was stored."""

    code = "SCHEDULE_UNKNOWN_PARENT"

    def __init__(self, parent_id: str) -> None:
        super().__init__(
            f"after: no job {parent_id!r} (never scheduled, deleted, or forgotten by retention)",
            field="after",
        )
        self.parent_id = parent_id


class FlowRefused(ScheduleError):
    """A node of a flow could not be created (its id exists, or its topic's policy keeps it
    out), so no node was (Scheduler.flow is all or nothing); the field names the node."""

    code = "SCHEDULE_FLOW_REFUSED"


class InvalidProgress(ScheduleError):
    """A progress report or log line is not allowed (percent 0..100, text of at most 1 KiB)."""

    code = "PROGRESS_INVALID"


class WaitTimeout(SchedulerError, TimeoutError):
    """The job did not reach a terminal state within the wait's timeout (it goes on; nothing
    changed)."""


class LeaseLost(SchedulerError):
    """This attempt no longer holds its job's lease (another worker recovered it, or it was
    settled): its progress and log lines are not recorded."""


class ResultRefused(SchedulerError):
    """A listener returned a value that cannot be kept as the job's result: the attempt fails
    (error type `code`, naming the listener) and is retried under the job's rules."""

    code = "result_refused"

    def __init__(self, listener: str, message: str) -> None:
        super().__init__(message)
        self.listener = listener


class ResultTooLarge(ResultRefused):
    """A listener's result is larger than [limits] result_bytes as JSON."""

    code = "result_too_large"


class ResultNotSerializable(ResultRefused):
    """A listener's result is not JSON-serialisable (or holds NUL or an unpaired surrogate)."""

    code = "result_not_serializable"


class ListenerProcessLost(SchedulerError):
    """The child process running a listener (executor="process") died before it answered: killed,
    crashed or exited. Its attempt is settled as worker_lost, under the job's retry rules."""


class MigrationRefused(SchedulerError):
    """The partition migration cannot run now; nothing was moved."""


class ConfigError(SchedulerError):
    """A configuration value is invalid."""


class StorageError(SchedulerError):
    """The storage backend (Redis or PostgreSQL) failed."""


class ServerUnavailable(StorageError):
    """Redis could not be reached, lost the connection or timed out, or was up but not ready
    (loading its data, a replica without its master): the same call may succeed later.
    `horae worker` waits for it at start ([worker] startup_wait_s)."""


class AuditUnavailable(StorageError):
    """The audit trail's PostgreSQL cannot be reached (or the connection died): audit reads
    fail; scheduling and workers go on (the relay catches up when it answers)."""


class Retry(Exception):  # noqa: N818 - a decision, raised by listeners
    """Raised by a listener to retry with its own delay (still bounded by attempts).

    `delay` is in seconds, used without jitter. It is clamped into 1 s .. the job's
    backoff max_delay_ms (default 1 h): an attempt asking for 0 or 10^7 s is retried
    after 1 s or the cap, and the worker logs a WARN (event retry_delay_clamped)
    naming the job, the requested and the applied delay. None: the job's backoff.
    """

    def __init__(self, delay: float | None = None, message: str = "retry requested") -> None:
        super().__init__(message)
        self.delay = delay


class DoNotRetry(Exception):  # noqa: N818 - a decision, raised by listeners
    """Raised by a listener to fail the job now, whatever attempts remain."""
