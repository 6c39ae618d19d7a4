"""The engine's settings: its sections, the top-level keys, and the loading every package's
settings share. Precedence: explicit argument > env var > config file > defaults.

Env vars: HORAE_REDIS_URL, HORAE_DATABASE_URL, HORAE_NAMESPACE, HORAE_DATA_DIR,
HORAE_REDIS_APPENDFSYNC, HORAE_CONFIG (path of a TOML file), and HORAE_<SECTION>__<KEY> for any
other value (e.g. HORAE_WORKER__CONCURRENCY=20). `config/horae.toml` lists every default; a test
keeps it equal to the models. Where the config file and the data directory are found:
scheduler/core/datadir.py.

The audit's, the analytics' and the console's sections live beside their packages
(audit/settings.py, audit/analytics/settings.py, console/settings.py); the root
(horae/settings.py) composes them with these into the one Settings model and loads it. The
engine sees that object through the `Settings` protocol below: only its own sections.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from listeners.durations import duration_seconds
from scheduler.core.datadir import absolute, config_file, default_data_dir
from scheduler.core.errors import ConfigError
from scheduler.core.procutil import hide_password
from scheduler.core.results import MAX_RESULT_BYTES
from scheduler.core.retry import DEFAULT_DELAY_MS, DEFAULT_MAX_DELAY_MS
from scheduler.core.validation import MAX_JSON_BYTES


class Section(BaseModel):
    """A settings section (or the top level): frozen, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class RetrySettings(Section):
    """Default retry policy of jobs that do not bring their own."""

    attempts: int = Field(5, ge=1, le=20, description="Attempts in all, the first one included.")
    backoff: Literal["exponential", "fixed"] = Field(
        "exponential",
        description="How the delay between attempts grows: doubling from delay_ms, or fixed.",
    )
    delay_ms: int = Field(
        DEFAULT_DELAY_MS,
        ge=1_000,
        le=3_600_000,
        description="The first retry's delay (exponential: 30 s, 1 min, 2 min, 4 min ...).",
    )
    max_delay_ms: int = Field(
        DEFAULT_MAX_DELAY_MS,
        ge=1_000,
        le=86_400_000,
        description="No gap between attempts is longer than this; at least delay_ms.",
    )
    jitter: Literal["none", "full", "equal"] = Field(
        "none",
        description='Randomness added to a delay d: "full" (uniform 0..d, at least 1 s) or '
        '"equal" (d/2 + uniform 0..d/2).',
    )

    @model_validator(mode="after")
    def _cap_not_below_delay(self) -> RetrySettings:
        if self.max_delay_ms < self.delay_ms:
            raise ValueError(
                f"max_delay_ms ({self.max_delay_ms}) must be >= delay_ms ({self.delay_ms})"
            )
        return self


class RetentionSettings(Section):
    """How long finished jobs stay in Redis (the audit trail keeps them for good)."""

    completed_age_s: int = Field(
        604_800, ge=0, description="Completed jobs are kept this long (7 days) ..."
    )
    completed_count: int = Field(
        1_000, ge=0, description="... or only the newest this many, whichever is fewer."
    )
    failed_age_s: int = Field(2_592_000, ge=0, description="Failed jobs are kept 30 days.")
    cancelled_age_s: int = Field(604_800, ge=0, description="Cancelled jobs are kept 7 days.")
    prune_interval_s: float = Field(
        60.0, gt=0, description="How often a worker drops the finished jobs past retention."
    )
    dead_letter_age_s: int = Field(
        2_592_000, ge=0, description="Dead letters older than this (30 days) are dropped."
    )
    dead_letter_max: int = Field(
        10_000,
        ge=0,
        description="Dead letters kept per dead-letter topic: the oldest beyond it are dropped.",
    )


class WorkerSettings(Section):
    """Worker behaviour."""

    concurrency: int = Field(
        10, ge=1, le=10_000, description="Attempts running at once in one worker."
    )
    claim_batch: int = Field(
        100, ge=1, le=1_000, description="Most jobs claimed by one script call."
    )
    lease_ms: int = Field(
        30_000,
        ge=100,
        description="A running attempt's lease; its heartbeat renews it every lease_ms/3.",
    )
    batch_window_ms: float = Field(
        1.0,
        ge=0,
        le=100,
        description="A worker's claims, and its settlements, go to Redis at most once per this "
        "many ms: under load each script call carries what arrived meanwhile; a call after a "
        "quiet spell goes at once. 0 = every one at once.",
    )
    timeout_ms: int = Field(900_000, ge=1, description="Default timeout of one attempt (15 min).")
    grace_s: float = Field(
        30.0, ge=0, description="Graceful stop: how long attempts in flight may still finish."
    )
    recover_interval_s: float = Field(
        1.0, gt=0, description="How often expired leases (lost workers) are looked for."
    )
    local_handoff: bool = Field(
        True,
        description="A job this process schedules for now goes straight to its own running "
        "worker (leased in the scheduling call) when that worker has a free slot and no other "
        "job is due; false: it always waits in the due set.",
    )
    registry_ttl_ms: int = Field(
        30_000,
        ge=100,
        description="A worker advertises its topics with every heartbeat (every ttl/3 at most); "
        "one silent this long is dead, and its topics no longer served by it.",
    )
    startup_wait_s: float = Field(
        60.0,
        ge=0,
        description="How long `horae worker` keeps trying to reach Redis at start (refused or "
        "lost connections, a server still loading its data) before it exits with the error "
        "(also --startup-wait); 0 = exit at once.",
    )
    # scheduler/store/partitions.py parses it against [cluster] partitions.
    partitions: str = Field(
        "",
        description="The namespace's partitions this worker serves ([cluster] partitions): "
        '"" all, else e.g. "0,2" or "0-3".',
    )
    # scheduler/observe/health.py (health.bind_host picks the address of "").
    health_port: int = Field(
        0,
        ge=0,
        le=65_535,
        description="Port of the /healthz and /readyz of `horae worker` (also --health-port); "
        "0 = not served.",
    )
    health_host: str = Field(
        "",
        description='Address of the health endpoints: "" = 127.0.0.1, or 0.0.0.0 in a '
        "container (Docker, Podman, Kubernetes).",
    )
    # The process pool of scheduler/worker/process_pool.py.
    processes: int = Field(
        0,
        ge=0,
        le=1_024,
        description='Child processes for listeners of @on_event(..., executor="process"); '
        "0 = the machine's core count.",
    )
    max_jobs_per_child: int = Field(
        0, ge=0, description="A child is replaced after this many jobs; 0 = never."
    )
    max_memory_mb_per_child: int = Field(
        0,
        ge=0,
        description="A child is replaced when its RSS after a job is above this many MB; "
        "0 = never.",
    )
    topic_memory: str = Field(
        "7d",
        description="A duration: how long a topic some worker served stays known after its last "
        "worker stopped; its jobs wait for a worker meanwhile instead of completing as "
        'no_listener ("0s": only while served).',
    )

    @field_validator("topic_memory")
    @classmethod
    def _duration(cls, value: str) -> str:
        duration_seconds(value, "worker.topic_memory")  # raises naming the field and the value
        return value

    @property
    def topic_memory_ms(self) -> int:
        """topic_memory in ms (0: a topic is known only while a live worker serves it)."""
        return int(duration_seconds(self.topic_memory, "worker.topic_memory") * 1000)


class CronSettings(Section):
    """Cron schedules."""

    misfire: Literal["coalesce", "skip", "all"] = Field(
        "coalesce",
        description="Ticks missed during downtime: coalesce (one run), skip (none), all (each, "
        "up to misfire_cap).",
    )
    misfire_cap: int = Field(
        100, ge=1, le=100_000, description='Most missed ticks run by misfire = "all".'
    )
    misfire_grace_s: float = Field(
        60.0, ge=0, description="A tick later than this counts as missed."
    )
    fire_batch: int = Field(
        200, ge=1, le=5_000, description="Most schedules fired by one script call."
    )


class LimitsSettings(Section):
    """Input limits checked at scheduling (nothing is written when one is exceeded), and the
    largest result a job keeps."""

    json_bytes: int = Field(
        MAX_JSON_BYTES,
        ge=1_024,
        le=67_108_864,
        description="Largest JSON of a payload or of metadata, each: larger ones are refused "
        "(InvalidPayload).",
    )
    result_bytes: int = Field(
        MAX_RESULT_BYTES,
        ge=16,
        le=67_108_864,
        description="Largest result a job keeps, as JSON (what its listeners returned, all "
        "together): a larger one fails the attempt with error result_too_large, naming the "
        "listener, and is retried like any failure.",
    )


class TelemetrySettings(Section):
    """OpenTelemetry export. "none" installs nothing (the embedding app may install its own SDK)."""

    exporter: Literal["none", "otlp", "prometheus", "console"] = Field(
        "none", description="Where metrics and traces go; none installs no SDK."
    )
    otlp_endpoint: str = Field(
        "",
        description="The OTLP collector, e.g. http://127.0.0.1:4317 (grpc) or "
        "http://127.0.0.1:4318 (http); empty = the exporter's default.",
    )
    otlp_protocol: Literal["grpc", "http"] = Field("grpc", description="The OTLP transport.")
    metrics_port: int = Field(
        0,
        ge=0,
        le=65_535,
        description="Prometheus scrape port of this process: a worker's (also `horae worker "
        "--metrics-port`) or a producer's (its Scheduler serves it on connect); one port per "
        "process; 0 = not served.",
    )
    metrics_host: str = Field(
        "",
        description='Address of the scrape port: "" = 127.0.0.1, or 0.0.0.0 in a container '
        "(also `horae worker --metrics-host`).",
    )
    service_name: str = Field("horae", description="The OpenTelemetry service.name.")
    json_logs: bool = Field(
        False, description="One JSON object per log line, with trace_id and span_id."
    )
    # The SDK's samplers. An unsampled job still carries its traceparent (flags 00).
    sampler: Literal[
        "",
        "always_on",
        "always_off",
        "traceidratio",
        "parentbased_always_on",
        "parentbased_always_off",
        "parentbased_traceidratio",
    ] = Field(
        "",
        description='Which traces are recorded: "" = OTEL_TRACES_SAMPLER (and _ARG), else '
        "parentbased_always_on.",
    )
    sample_ratio: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="For the *traceidratio samplers: 0.01 traces 1% of jobs.",
    )


class ClusterSettings(Section):
    """Running past one Redis (docs/how-to/scaling-out.md).

    enabled: `redis_url` names seed nodes of a Redis Cluster (also implied by a
    redis+cluster:// URL). durability "replicated": every transition waits (WAIT) until
    `wait_replicas` replicas have it, or fails, so an acknowledged write survives a failover.
    """

    enabled: bool = Field(
        False,
        description="The Redis URL names seed nodes of a Redis Cluster (implied by "
        "redis+cluster://h:p,h:p).",
    )
    partitions: int = Field(
        1,
        ge=1,
        le=1024,
        description="The namespace split into this many hash tags ({ns|p}); fixed once the "
        "namespace holds data.",
    )
    durability: Literal["async", "replicated"] = Field(
        "async",
        description='"replicated": each transition waits (WAIT) for wait_replicas replicas, or '
        "fails, so an acknowledged write survives a failover.",
    )
    wait_replicas: int = Field(
        1, ge=1, le=16, description='Replicas a "replicated" write waits for.'
    )
    wait_timeout_ms: int = Field(
        1_000, ge=1, le=60_000, description="How long such a write waits for them."
    )


class ConnectionSettings(Section):
    """The top-level keys: where Redis and PostgreSQL live, the namespace, the data directory.
    The root Settings (horae/settings.py) adds every section to these."""

    redis_url: str | None = Field(
        None, description="The Redis URL; unset or empty = an embedded server under data_dir."
    )
    database_url: str | None = Field(
        None,
        description="The audit's PostgreSQL URL; unset or empty = an embedded server under "
        "data_dir.",
    )
    namespace: str = Field(
        "horae",
        min_length=1,
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="Every Redis key of horae is under this name: applications sharing one "
        "Redis keep apart by it.",
    )
    # scheduler/core/datadir.py
    data_dir: str = Field(
        "",
        description="Data of the embedded servers and the analytics: empty = .horae/ next to "
        "the config file in use, else one directory per working tree (git top-level, else the "
        "current directory) under $XDG_DATA_HOME/horae/projects (~/.local/share/horae/projects).",
    )
    redis_max_connections: int = Field(
        64,
        ge=2,
        le=10_000,
        description="Redis connections per process; callers wait for a free one past this.",
    )
    # servers.ensure_redis
    redis_appendfsync: Literal["always", "everysec", "no"] = Field(
        "everysec",
        description='The embedded Redis\'s AOF fsync: "always" (a crash loses nothing '
        'acknowledged), "everysec" (up to the last second), "no" (whatever the OS had not '
        "written).",
    )

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        """The fields as repr() shows them: URL passwords as *** (a logged or printed
        Settings must not carry a secret)."""
        for name, value in super().__repr_args__():
            masked = name in ("redis_url", "database_url") and isinstance(value, str)
            yield name, hide_password(value) if masked else value


class OutboxSwitch(Protocol):
    """The engine's part of `[audit]` (audit/settings.py holds the section): whether every
    state change writes an outbox event."""

    @property
    def enabled(self) -> bool: ...


class Settings(Protocol):
    """The settings as the engine reads them: the top-level keys and the engine's sections.
    The root model (horae/settings.py) satisfies it; the engine never names the sections
    of the packages above it."""

    @property
    def redis_url(self) -> str | None: ...
    @property
    def database_url(self) -> str | None: ...
    @property
    def namespace(self) -> str: ...
    @property
    def data_dir(self) -> str: ...
    @property
    def redis_max_connections(self) -> int: ...
    @property
    def redis_appendfsync(self) -> Literal["always", "everysec", "no"]: ...
    @property
    def retry(self) -> RetrySettings: ...
    @property
    def retention(self) -> RetentionSettings: ...
    @property
    def worker(self) -> WorkerSettings: ...
    @property
    def cron(self) -> CronSettings: ...
    @property
    def limits(self) -> LimitsSettings: ...
    @property
    def telemetry(self) -> TelemetrySettings: ...
    @property
    def cluster(self) -> ClusterSettings: ...
    @property
    def audit(self) -> OutboxSwitch: ...


M = TypeVar("M", bound=ConnectionSettings)

_TOP_ENV = {
    "HORAE_REDIS_URL": "redis_url",
    "HORAE_DATABASE_URL": "database_url",
    "HORAE_NAMESPACE": "namespace",
    "HORAE_DATA_DIR": "data_dir",
    "HORAE_REDIS_APPENDFSYNC": "redis_appendfsync",
}


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, value in env.items():
        if name in _TOP_ENV and value:
            values[_TOP_ENV[name]] = value
        elif name.startswith("HORAE_") and "__" in name:
            section, _, key = name[len("HORAE_") :].lower().partition("__")
            values.setdefault(section, {})[key] = value
    return values


def _flatten_toml(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Map the file's [redis]/[database] tables onto the flat top-level fields."""
    data = dict(raw)
    redis = data.pop("redis", {}) or {}
    database = data.pop("database", {}) or {}
    if redis.get("url"):
        data["redis_url"] = redis["url"]
    if "namespace" in redis:
        data["namespace"] = redis["namespace"]
    if "appendfsync" in redis:
        data["redis_appendfsync"] = redis["appendfsync"]
    if database.get("url"):
        data["database_url"] = database["url"]
    return data


def load_model(
    model: type[M],
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> M:
    """Build `model` (the root Settings: horae.settings.load_settings) from a TOML file, the
    environment and explicit overrides.

    Args:
        path: a TOML file; default HORAE_CONFIG, else the nearest horae.toml upward from
            the current directory.
        env: the environment (default os.environ); injectable for tests.
        overrides: top-level fields (None values are ignored).

    Returns:
        Settings whose `data_dir` is an absolute path: relative values are taken from the
        config file's directory (in the file) or the current directory (env, arguments);
        unset, `.horae/` next to the config file, else the working tree's directory under
        the per-user data directory (datadir.default_data_dir).

    Raises:
        ConfigError: naming the file or variable, the value and what is allowed.
    """
    env = os.environ if env is None else env
    file = config_file(path, env)
    found = file is not None and file.is_file()
    data: dict[str, Any] = {}
    if file is not None and found:
        try:
            data = _flatten_toml(tomllib.loads(file.read_text()))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {file}: {exc}") from exc
        if isinstance(data.get("data_dir"), str) and data["data_dir"]:
            data["data_dir"] = absolute(data["data_dir"], file.resolve().parent)
    elif path:
        raise ConfigError(f"config file {file} does not exist")
    given = _merge(_from_env(env), {k: v for k, v in overrides.items() if v is not None})
    if isinstance(given.get("data_dir"), str) and given["data_dir"]:
        given["data_dir"] = absolute(given["data_dir"], Path.cwd())
    data = _merge(data, given)
    if not data.get("data_dir"):
        data["data_dir"] = str(default_data_dir(file if found else None, env))
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}={err.get('input')!r}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(
            f"invalid configuration ({file if found else 'defaults/env'}): {problems}"
        ) from exc


def model_sources(
    model: type[BaseModel],
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    given: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Where each setting of `model` that load_model(model, path, env, ...) would not take
    from the defaults comes from, by dotted name (`worker.concurrency`, `redis_url`): "file PATH",
    "environment VAR", or the label `given` has for it (e.g. "option --redis-url"), the
    same precedence as load_model. Values are not checked here (load_model does).
    """
    env = os.environ if env is None else env
    sources: dict[str, str] = {}
    file = config_file(path, env)
    if file is not None and file.is_file():
        try:
            raw = _flatten_toml(tomllib.loads(file.read_text()))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {file}: {exc}") from exc
        sources.update(dict.fromkeys(_leaf_names(model, raw), f"file {file}"))
    for name, value in env.items():
        if name in _TOP_ENV and value:
            sources[_TOP_ENV[name]] = f"environment {name}"
        elif name.startswith("HORAE_") and "__" in name:
            section, _, key = name[len("HORAE_") :].lower().partition("__")
            sources[f"{section}.{key}"] = f"environment {name}"
    sources.update(given or {})
    return sources


def _leaf_names(model: type[BaseModel], data: Mapping[str, Any]) -> Iterator[str]:
    """Dotted names of the settings a flattened config file sets (a section's dict-valued
    setting, such as analytics.spark_conf, counts as one)."""
    for key, value in data.items():
        field = model.model_fields.get(key)
        section = (
            field is not None
            and isinstance(field.annotation, type)
            and issubclass(field.annotation, Section)
        )
        if section and isinstance(value, Mapping):
            yield from (f"{key}.{inner}" for inner in value)
        else:
            yield key
