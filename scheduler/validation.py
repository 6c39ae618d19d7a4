"""Input checks of the scheduling API: a request becomes a NewJob, or is refused
with a ScheduleError naming the field, before anything is written. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from listeners import PayloadRejected, Validator, parse_payload
from scheduler.cron import MISFIRE_MODES
from scheduler.errors import InvalidCron, InvalidDelay, InvalidJobId, InvalidPayload, InvalidTopic, ScheduleError
from scheduler.flow import Dedupe, parse_priority
from scheduler.job import NewJob, new_job_id
from scheduler.outbox import SCHEDULE_FAILED_TOPIC
from scheduler.retry import RetryPolicy, parse_retry
from scheduler.timeutil import parse_duration, zone

MAX_TOPIC_LEN = 200
MAX_ID_LEN = 200


def check_topic(topic: object) -> str:
    """The topic, when it is a usable, unreserved name.

    Raises:
        InvalidTopic: empty, too long, not a string, or the terminal-failure topic.
    """
    if not isinstance(topic, str) or not topic.strip():
        raise InvalidTopic(f"topic must be a non-empty string; got {topic!r}", field="topic")
    if len(topic) > MAX_TOPIC_LEN:
        raise InvalidTopic(f"topic must be at most {MAX_TOPIC_LEN} characters; got {len(topic)}", field="topic")
    if topic == SCHEDULE_FAILED_TOPIC:
        raise InvalidTopic(f"topic {topic!r} is reserved for terminal-failure events", field="topic")
    return topic


def check_dead_letter(topic: str, dead_letter: object) -> str:
    """A dead-letter topic for jobs of `topic`: a usable topic name other than `topic`.

    Raises:
        InvalidTopic: not a usable topic name, or `topic` itself.
    """
    try:
        name = check_topic(dead_letter)
    except InvalidTopic as exc:
        raise InvalidTopic(f"dead_letter: {exc}", field="dead_letter") from exc
    if name == topic:
        raise InvalidTopic(f"topic {topic!r} cannot be its own dead-letter topic", field="dead_letter")
    return name


def check_job_id(job_id: object) -> str | None:
    """A caller's job id (an idempotency key), or None to generate one.

    Raises:
        InvalidJobId: not a non-empty string of at most MAX_ID_LEN characters.
    """
    if job_id is not None and (not isinstance(job_id, str) or not job_id or len(job_id) > MAX_ID_LEN):
        raise InvalidJobId(f"job_id must be a non-empty string of at most {MAX_ID_LEN} characters; "
                           f"got {job_id!r}", field="job_id")
    return job_id


def check_metadata(metadata: object) -> Mapping[str, Any] | None:
    """Metadata as a mapping with string keys, or None.

    Raises:
        InvalidPayload: not a mapping, or a key that is not a string.
    """
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise InvalidPayload(f"metadata must be a mapping (JSON object); got {metadata!r}", field="metadata")
    if not all(isinstance(k, str) for k in metadata):
        raise InvalidPayload("metadata keys must be strings", field="metadata")
    return metadata


def check_cron_name(name: object) -> str:
    """A schedule name (tick job ids are cron:{name}:{tick ms}).

    Raises:
        InvalidCron: not a non-empty string of at most MAX_ID_LEN characters.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_ID_LEN:
        raise InvalidCron(f"name must be a non-empty string of at most {MAX_ID_LEN} characters; got {name!r}",
                          field="name")
    return name


def check_misfire(mode: str) -> str:
    """A misfire mode (coalesce, skip or all).

    Raises:
        InvalidCron: any other value.
    """
    if mode not in MISFIRE_MODES:
        raise InvalidCron(f"misfire must be one of {', '.join(MISFIRE_MODES)}; got {mode!r}", field="misfire")
    return mode


def to_json(value: Any, field: str) -> str:
    """Compact JSON text of value.

    Raises:
        InvalidPayload: naming `field`, when value is not JSON-serializable (NaN included).
    """
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"{field} must be JSON-serializable: {exc}", field=field) from exc


def check_payload(payload_json: str, validate: Validator | None) -> None:
    """Check a payload against its topic's schema as a worker will see it (the JSON
    text decoded again), so both sides judge the same value.

    Raises:
        InvalidPayload: field "payload", naming the field path, the value and the rule.
    """
    if validate is None:
        return
    try:
        parse_payload(validate, json.loads(payload_json))
    except PayloadRejected as exc:
        raise InvalidPayload(f"payload refused by the topic's schema: {exc}", field="payload") from exc


MAX_KEY_LEN = 512


def check_key(key: object) -> str:
    """A job's key ("" for None): the unit of its topic's policy, per-key rate limit and FIFO.

    Raises:
        ScheduleError: not a non-empty string of at most MAX_KEY_LEN characters without NUL.
    """
    if key is None:
        return ""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LEN or "\x00" in key:
        shown = repr(key) if not isinstance(key, str) or len(key) <= 60 else f"{key[:60]!r}... ({len(key):,} chars)"
        raise ScheduleError(f"key must be a non-empty string of at most {MAX_KEY_LEN} characters without NUL; "
                            f"got {shown}", field="key")
    return key


def flow_fields(key: object, dedupe: object, priority: object) -> dict[str, str]:
    """NewJob's flow-control fields of schedule_at's key=, dedupe= and priority=.

    Raises:
        ScheduleError: a subclass naming the field (key, dedupe, priority).
    """
    fields = {"key": check_key(key)}
    if priority is not None:
        fields["priority"] = str(parse_priority(priority))
    if dedupe is not None:
        if not isinstance(dedupe, Dedupe):
            raise ScheduleError(f"dedupe must be a Dedupe(key, window=, mode=); got {dedupe!r}", field="dedupe")
        window = dedupe.window_ms()
        fields.update(dedupe_key=dedupe.key, dedupe_window_ms="" if window is None else str(window),
                      dedupe_mode=dedupe.mode)
    return fields


def build_job(
    topic: object, run_at_ms: int, tz: str, payload: Any, retry: Any, metadata: object, timeout: Any,
    job_id: object, cron: str, *, default_retry: RetryPolicy, default_timeout_ms: int, now_ms: int = 0,
    validate: Validator | None = None, key: object = None, dedupe: object = None, priority: object = None,
) -> NewJob:
    """Validate every part of a request and build the job to store.

    Args:
        topic, tz, payload, retry, metadata, timeout, job_id: as given to Scheduler.schedule_at.
        run_at_ms: the requested time; a past one is due at `now_ms`.
        cron: the schedule's name for a cron template ("" for none).
        default_retry, default_timeout_ms: what an omitted retry or timeout means (unless the
            topic's configuration has its own: enqueue.lua applies it).
        validate: the topic's payload schema when this process knows one (None: unchecked).
        key, dedupe, priority: flow control (flow_fields).

    Raises:
        ScheduleError: a subclass naming the first invalid field.
    """
    topic = check_topic(topic)
    zone(tz)
    policy = parse_retry(retry, default_retry)
    meta = check_metadata(metadata)
    timeout_s = default_timeout_ms / 1000 if timeout is None else parse_duration(timeout, "timeout")
    if timeout_s <= 0:
        raise InvalidDelay(f"timeout must be > 0; got {timeout!r}", field="timeout")
    given_id = check_job_id(job_id)
    flow = flow_fields(key, dedupe, priority)
    payload_json = to_json(payload, "payload")
    check_payload(payload_json, validate)
    return NewJob(
        id=given_id or new_job_id(),
        topic=topic,
        due_ms=max(run_at_ms, now_ms),  # a past time runs at once
        run_at_ms=run_at_ms,
        tz=tz,
        payload_json=payload_json,
        metadata_json=to_json(dict(meta), "metadata") if meta else "{}",
        max_attempts=policy.attempts,
        backoff_type=policy.backoff.type,
        backoff_delay_ms=policy.backoff.delay_ms,
        backoff_max_delay_ms=policy.backoff.max_delay_ms,
        backoff_jitter=policy.backoff.jitter,
        timeout_ms=max(1, int(timeout_s * 1000)),
        cron=cron,
        retry_given=retry is not None,
        timeout_given=timeout is not None,
        **flow,
    )
