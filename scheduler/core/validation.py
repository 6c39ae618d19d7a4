"""Input checks of the scheduling API: a request becomes a NewJob, or is refused
with a ScheduleError naming the field, before anything is written. Pure."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from listeners import PayloadRejected, Validator, parse_payload
from listeners.triggers import MAX_NAME_LEN, MISFIRE_MODES
from scheduler.core.dependencies import check_after, check_on_parent_failure
from scheduler.core.errors import (
    InvalidCron,
    InvalidDelay,
    InvalidJobId,
    InvalidPayload,
    InvalidTopic,
    ScheduleError,
    shown,
)
from scheduler.core.flow import MAX_KEY_LEN as MAX_KEY_LEN  # (re-exported: a job key's limit)
from scheduler.core.flow import Dedupe, parse_priority
from scheduler.core.job import NewJob, new_job_id
from scheduler.core.outbox import SCHEDULE_FAILED_TOPIC
from scheduler.core.request import JobRequest
from scheduler.core.retry import RetryPolicy, parse_retry
from scheduler.core.timeutil import parse_duration, zone

MAX_TOPIC_LEN = 200
MAX_ID_LEN = MAX_NAME_LEN  # a job's id and a schedule's name (tick ids are cron:{name}:{ms})
MAX_JSON_BYTES = (
    512 * 1024
)  # a payload's or metadata's JSON text, each (docs/concepts/scheduling.md)
# Arrays and objects nested in a payload or metadata, each: what every reader can walk back
# (pydantic, behind the console's API, stops serializing at 255 levels from its response's root).
MAX_JSON_DEPTH = 100
MAX_RUN_AT_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last instant a datetime holds
MAX_TIMEOUT_MS = 30 * 86_400_000  # an attempt's timeout: 30 days at most
# What PostgreSQL (the audit) cannot store in text or jsonb: NUL, and UTF-16 surrogates
# that are not a pair (Python strings may hold them; UTF-8 cannot encode them).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_JSON_ESCAPE = re.compile(
    r"(?<!\\)(?:\\\\)*\\u([0-9a-f]{4})"
)  # a \uXXXX escape, not an escaped backslash
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def check_text(value: str, field: str, error: type[ScheduleError] = ScheduleError) -> str:
    """`value` when PostgreSQL can store it (no NUL, no lone surrogate).

    Raises:
        `error`: naming `field` and the offending character's position.
    """
    bad = _UNSTORABLE.search(value)
    if bad is not None:
        raise error(
            f"{field} must not contain NUL or an unpaired surrogate (U+{ord(bad.group()):04X} at "
            f"position {bad.start()}); got {shown(value)}",
            field=field,
        )
    return value


def check_topic(topic: object, field: str = "topic") -> str:
    """The topic, when it is a usable, unreserved name (`field`: the argument holding it).

    Raises:
        InvalidTopic: empty, too long, not a string, or the terminal-failure topic.
    """
    if not isinstance(topic, str) or not topic.strip():
        raise InvalidTopic(f"{field} must be a non-empty string; got {shown(topic)}", field=field)
    if len(topic) > MAX_TOPIC_LEN:
        raise InvalidTopic(
            f"{field} must be at most {MAX_TOPIC_LEN} characters; got {len(topic)}", field=field
        )
    if topic == SCHEDULE_FAILED_TOPIC:
        raise InvalidTopic(
            f"{field} {shown(topic)} is reserved for terminal-failure events", field=field
        )
    return check_text(topic, field, InvalidTopic)


def check_job_ref(job_id: object, field: str = "job_id") -> str:
    """The id of a job to look up or act on: a non-empty string (no length rule: a cron
    tick's id, cron:<name>:<ms>, is longer than a caller's own ids may be).

    Raises:
        InvalidJobId: naming `field`, for anything else (None, a number, a list...).
    """
    if not isinstance(job_id, str) or not job_id:
        raise InvalidJobId(f"{field} must be a non-empty string; got {shown(job_id)}", field=field)
    return job_id


def check_job_refs(ids: object, field: str) -> list[str]:
    """Job ids to act on, all checked before any is used: an iterable of ids, not one string.

    Raises:
        InvalidJobId: naming `field` (not an iterable, or a string) or the item (`field[3]`).
    """
    if isinstance(ids, (str, bytes, Mapping)) or not isinstance(ids, Iterable):
        raise InvalidJobId(
            f"{field} must be a list (or another iterable) of job ids, not one string; "
            f"got {shown(ids)}",
            field=field,
        )
    return [check_job_ref(job_id, f"{field}[{i}]") for i, job_id in enumerate(ids)]


def check_actor(actor: object) -> str | None:
    """Who asked for an operation (None: the default actor); recorded in the audit.

    Raises:
        ScheduleError: field "actor", when not None nor a string PostgreSQL can store.
    """
    if actor is None:
        return None
    if not isinstance(actor, str):
        raise ScheduleError(f"actor must be a string or None; got {shown(actor)}", field="actor")
    return check_text(actor, "actor")


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
        raise InvalidTopic(
            f"topic {shown(topic)} cannot be its own dead-letter topic", field="dead_letter"
        )
    return name


def check_job_id(job_id: object) -> str | None:
    """A caller's job id (an idempotency key), or None to generate one.

    Raises:
        InvalidJobId: not a non-empty string of at most MAX_ID_LEN characters.
    """
    if job_id is not None and (
        not isinstance(job_id, str) or not job_id or len(job_id) > MAX_ID_LEN
    ):
        raise InvalidJobId(
            f"job_id must be a non-empty string of at most {MAX_ID_LEN} characters; "
            f"got {shown(job_id)}",
            field="job_id",
        )
    return None if job_id is None else check_text(job_id, "job_id", InvalidJobId)


def check_metadata(metadata: object) -> Mapping[str, Any] | None:
    """Metadata as a mapping with string keys (nested objects' keys: to_json), or None.

    Raises:
        InvalidPayload: not a mapping, or a key that is not a string.
    """
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise InvalidPayload(
            f"metadata must be a mapping (JSON object); got {shown(metadata)}", field="metadata"
        )
    for key in metadata:  # (nested objects: to_json, after the size check)
        if not isinstance(key, str):
            raise InvalidPayload(
                f"metadata: key {shown(key)} is not a string (JSON object keys are strings)",
                field="metadata",
            )
    return metadata


def check_keys(value: object, field: str) -> None:
    """JSON objects have string keys: a payload's or metadata's dict keys must be strings at
    every level (json.dumps would turn 1 into "1" silently, so a listener would get another value).

    Raises:
        InvalidPayload: naming `field`, the path of the object (`payload.items[0]`) and the key.
    """
    todo: list[tuple[object, str]] = [(value, field)]
    while todo:
        item, path = todo.pop()
        if isinstance(item, Mapping):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise InvalidPayload(
                        f"{path}: key {shown(key)} is not a string (JSON object keys are strings)",
                        field=field,
                    )
                if isinstance(inner, (Mapping, list, tuple)):
                    todo.append((inner, f"{path}.{key}"))
        elif isinstance(item, (list, tuple)):
            todo += [
                (inner, f"{path}[{i}]")
                for i, inner in enumerate(item)
                if isinstance(inner, (Mapping, list, tuple))
            ]


def check_cron_name(name: object) -> str:
    """A schedule name (tick job ids are cron:{name}:{tick ms}).

    Raises:
        InvalidCron: not a non-empty string of at most MAX_ID_LEN characters.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_ID_LEN:
        raise InvalidCron(
            f"name must be a non-empty string of at most "
            f"{MAX_ID_LEN} characters; got {shown(name)}",
            field="name",
        )
    return check_text(name, "name", InvalidCron)


def check_misfire(mode: str) -> str:
    """A misfire mode (coalesce, skip or all).

    Raises:
        InvalidCron: any other value.
    """
    if mode not in MISFIRE_MODES:
        raise InvalidCron(
            f"misfire must be one of {', '.join(MISFIRE_MODES)}; got {shown(mode)}", field="misfire"
        )
    return mode


def to_json(value: Any, field: str, max_bytes: int = MAX_JSON_BYTES) -> str:
    """Compact JSON text of value (ASCII: other characters escaped).

    Raises:
        InvalidPayload: naming `field`, when value is not JSON-serializable (NaN included),
            nested too deeply (MAX_JSON_DEPTH), holds text PostgreSQL cannot store (NUL, a
            lone surrogate), is over `max_bytes` as JSON, or has an object key that is not a
            string (check_keys).
    """
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"{field} must be JSON-serializable: {exc}", field=field) from exc
    except RecursionError:
        raise InvalidPayload(
            f"{field} is nested too deeply to serialize as JSON", field=field
        ) from None
    if len(text) > max_bytes:
        raise InvalidPayload(
            f"{field} is {len(text):,} bytes as JSON; at most {max_bytes:,} are allowed "
            f"([limits] json_bytes)",
            field=field,
        )
    # walked only when it has more brackets than levels allowed: the common case costs two counts
    if (
        text.count("[") + text.count("{") > MAX_JSON_DEPTH
        and (depth := json_depth(text)) > MAX_JSON_DEPTH
    ):
        raise InvalidPayload(
            f"{field} nests arrays and objects {depth} deep; at most {MAX_JSON_DEPTH} levels "
            "are allowed",
            field=field,
        )
    if "{" in text:  # some object (or a brace in a string): its keys must have been strings
        check_keys(value, field)
    if "\\u" in text and (bad := _unstorable_escape(text)) is not None:
        raise InvalidPayload(
            f"{field} must not contain NUL or an unpaired surrogate in its strings "
            f"(found \\u{bad} in the JSON)",
            field=field,
        )
    return text


def json_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON `text` (0 for a scalar)."""
    depth = deepest = 0
    for ch in re.sub(r"[^\[\]{}]", "", _JSON_STRING.sub("", text)):
        depth += 1 if ch in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _unstorable_escape(text: str) -> str | None:
    """The first \\uXXXX escape of JSON `text` that PostgreSQL's jsonb refuses (NUL, or a
    surrogate not in a high-low pair), or None."""
    pending_high = False
    last_end = last_code = -1
    for m in _JSON_ESCAPE.finditer(text):
        code = int(m.group(1), 16)
        adjacent = m.start(1) - 2 == last_end
        if pending_high and not (adjacent and 0xDC00 <= code <= 0xDFFF):
            return f"{last_code:04x}"
        if code == 0 or (0xDC00 <= code <= 0xDFFF and not pending_high):
            return m.group(1)
        pending_high = 0xD800 <= code <= 0xDBFF
        last_end, last_code = m.end(), code
    return f"{last_code:04x}" if pending_high else None


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
        raise InvalidPayload(
            f"payload refused by the topic's schema: {exc}", field="payload"
        ) from exc


def check_run_at_ms(ms: int, field: str) -> int:
    """An instant (epoch ms) no later than 9999-12-31T23:59:59.999Z, the last a datetime holds.

    Raises:
        InvalidDelay: naming `field` (a delay that large is not a delay).
    """
    if ms > MAX_RUN_AT_MS:
        raise InvalidDelay(
            f"{field} must be no later than 9999-12-31T23:59:59.999Z; got {ms:,} ms since 1970",
            field=field,
        )
    return ms


def check_key(key: object) -> str:
    """A job's key ("" for None): the unit of its topic's policy, per-key rate limit and FIFO.

    Raises:
        ScheduleError: not a non-empty string of at most MAX_KEY_LEN characters without NUL.
    """
    if key is None:
        return ""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LEN:
        text = (
            shown(key)
            if not isinstance(key, str) or len(key) <= 60
            else f"{key[:60]!r}... ({len(key):,} chars)"
        )
        raise ScheduleError(
            f"key must be a non-empty string of at most {MAX_KEY_LEN} characters; got {text}",
            field="key",
        )
    return check_text(key, "key")


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
            raise ScheduleError(
                f"dedupe must be a Dedupe(key, window=, mode=); got {shown(dedupe)}", field="dedupe"
            )
        check_text(dedupe.key, "dedupe.key")
        window = dedupe.window_ms()
        fields.update(
            dedupe_key=dedupe.key,
            dedupe_window_ms="" if window is None else str(window),
            dedupe_mode=dedupe.mode,
        )
    return fields


def build_job(
    request: JobRequest,
    *,
    default_retry: RetryPolicy,
    default_timeout_ms: int,
    now_ms: int = 0,
    validate: Validator | None = None,
    max_json_bytes: int = MAX_JSON_BYTES,
    due_by_ms: int | None = None,
) -> NewJob:
    """Validate every part of a request and build the job to store.

    Args:
        request: as the caller gave it; `run_at_ms` at or before `due_by_ms` is due at
            `now_ms`; its key, dedupe and priority are checked by flow_fields.
        default_retry, default_timeout_ms: what an omitted retry or timeout means (unless the
            topic's configuration has its own: enqueue.lua applies it).
        validate: the topic's payload schema when this process knows one (None: unchecked).
        max_json_bytes: the largest payload and metadata, each, as JSON ([limits] json_bytes).
        due_by_ms: the latest instant that is "now" for the caller (Clock.caller_now_ms: the
            process's own clock may lead the Redis-calibrated one, so `schedule_at(topic,
            datetime.now(tz))` is due now and takes schedule_in(0)'s path); default `now_ms`.

    Raises:
        ScheduleError: a subclass naming the first invalid field.
    """
    r = request
    topic = check_topic(r.topic)
    zone(r.tz)
    policy = parse_retry(r.retry, default_retry)
    meta = check_metadata(r.metadata)
    timeout = r.timeout
    timeout_s = default_timeout_ms / 1000 if timeout is None else parse_duration(timeout, "timeout")
    if timeout_s <= 0 or timeout_s * 1000 > MAX_TIMEOUT_MS:
        raise InvalidDelay(
            f"timeout must be > 0 and at most {MAX_TIMEOUT_MS // 86_400_000} days; "
            f"got {shown(timeout)}",
            field="timeout",
        )
    run_at_ms = check_run_at_ms(r.run_at_ms, "run_at")
    given_id = check_job_id(r.job_id)
    flow = flow_fields(r.key, r.dedupe, r.priority)
    payload_json = to_json(r.payload, "payload", max_json_bytes)
    check_payload(payload_json, validate)
    metadata_json = to_json(dict(meta), "metadata", max_json_bytes) if meta else "{}"
    dead_letter = "" if r.dead_letter is None else check_dead_letter(topic, r.dead_letter)
    after = check_after(r.after)
    on_parent_failure = check_on_parent_failure(r.on_parent_failure)
    return NewJob(
        id=given_id or new_job_id(),
        topic=topic,
        # a past time runs at once
        due_ms=now_ms if run_at_ms <= max(now_ms, due_by_ms or 0) else run_at_ms,
        run_at_ms=run_at_ms,
        tz=r.tz,
        payload_json=payload_json,
        metadata_json=metadata_json,
        max_attempts=policy.attempts,
        backoff_type=policy.backoff.type,
        backoff_delay_ms=policy.backoff.delay_ms,
        backoff_max_delay_ms=policy.backoff.max_delay_ms,
        backoff_jitter=policy.backoff.jitter,
        timeout_ms=max(1, int(timeout_s * 1000)),
        cron=r.cron,
        retry_given=r.retry is not None,
        timeout_given=timeout is not None,
        dead_letter=dead_letter,
        after=after,
        on_parent_failure=on_parent_failure,
        **flow,
    )
