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
from scheduler.core.retry import DEFAULT_DELAY_MS, DEFAULT_MAX_DELAY_MS
from scheduler.core.validation import MAX_JSON_BYTES


class Section(BaseModel):
    """A settings section (or the top level): frozen, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class RetrySettings(Section):
    """Default retry policy of jobs that do not bring their own."""

    attempts: int = Field(5, ge=1, le=20)
    backoff: Literal["exponential", "fixed"] = "exponential"
    delay_ms: int = Field(DEFAULT_DELAY_MS, ge=1_000, le=3_600_000)
    max_delay_ms: int = Field(DEFAULT_MAX_DELAY_MS, ge=1_000, le=86_400_000)
    jitter: Literal["none", "full", "equal"] = "none"

    @model_validator(mode="after")
    def _cap_not_below_delay(self) -> RetrySettings:
        if self.max_delay_ms < self.delay_ms:
            raise ValueError(
                f"max_delay_ms ({self.max_delay_ms}) must be >= delay_ms ({self.delay_ms})"
            )
        return self


class RetentionSettings(Section):
    """How long finished jobs stay in Redis (the audit trail keeps them for good)."""

    completed_age_s: int = Field(604_800, ge=0)
    completed_count: int = Field(1_000, ge=0)
    failed_age_s: int = Field(2_592_000, ge=0)
    cancelled_age_s: int = Field(604_800, ge=0)
    prune_interval_s: float = Field(60.0, gt=0)
    dead_letter_age_s: int = Field(2_592_000, ge=0)  # dead letters older than this are dropped
    dead_letter_max: int = Field(
        10_000, ge=0
    )  # per dead-letter topic; the oldest beyond it are dropped


class WorkerSettings(Section):
    """Worker behaviour."""

    concurrency: int = Field(10, ge=1, le=10_000)
    claim_batch: int = Field(100, ge=1, le=1_000)
    lease_ms: int = Field(30_000, ge=100)
    timeout_ms: int = Field(900_000, ge=1)
    grace_s: float = Field(30.0, ge=0)
    recover_interval_s: float = Field(1.0, gt=0)
    local_handoff: bool = True
    registry_ttl_ms: int = Field(30_000, ge=100)
    partitions: str = (
        ""  # which partitions of the namespace it serves: "" all, else e.g. "0,2" or "0-3"
    )
    # /healthz and /readyz of `horae worker` (scheduler/observe/health.py; 0 = not served) and their
    # address ("" = loopback, or every interface in a container: health.bind_host).
    health_port: int = Field(0, ge=0, le=65_535)
    health_host: str = ""
    # Child processes for listeners of executor="process" (scheduler/worker/process_pool.py): at
    # most this many (0 = the machine's core count), each replaced after this many jobs or above
    # this RSS after a job (0 = never).
    processes: int = Field(0, ge=0, le=1_024)
    max_jobs_per_child: int = Field(0, ge=0)
    max_memory_mb_per_child: int = Field(0, ge=0)
    # How long a topic some worker served stays known after its last worker stopped: its jobs
    # wait for a worker meanwhile instead of completing as no_listener (a duration: "7d", "12h").
    topic_memory: str = "7d"

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

    misfire: Literal["coalesce", "skip", "all"] = "coalesce"
    misfire_cap: int = Field(100, ge=1, le=100_000)
    misfire_grace_s: float = Field(60.0, ge=0)
    fire_batch: int = Field(200, ge=1, le=5_000)


class LimitsSettings(Section):
    """Input limits checked at scheduling (nothing is written when one is exceeded)."""

    # a payload's or metadata's JSON, each
    json_bytes: int = Field(MAX_JSON_BYTES, ge=1_024, le=67_108_864)


class TelemetrySettings(Section):
    """OpenTelemetry export. "none" installs nothing (the embedding app may install its own SDK)."""

    exporter: Literal["none", "otlp", "prometheus", "console"] = "none"
    otlp_endpoint: str = ""
    otlp_protocol: Literal["grpc", "http"] = "grpc"
    metrics_port: int = Field(0, ge=0, le=65_535)
    metrics_host: str = ""  # "" = loopback, or every interface in a container (health.bind_host)
    service_name: str = "horae"
    json_logs: bool = False
    # Which traces are recorded (the SDK's samplers); "" = OTEL_TRACES_SAMPLER / _ARG, else
    # parentbased_always_on. An unsampled job still carries its traceparent (flags 00).
    sampler: Literal[
        "",
        "always_on",
        "always_off",
        "traceidratio",
        "parentbased_always_on",
        "parentbased_always_off",
        "parentbased_traceidratio",
    ] = ""
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0)


class ClusterSettings(Section):
    """Running past one Redis (README: Scaling out).

    enabled: `redis_url` names seed nodes of a Redis Cluster (also implied by a
    redis+cluster:// URL). durability "replicated": every transition waits (WAIT) until
    `wait_replicas` replicas have it, or fails, so an acknowledged write survives a failover.
    """

    enabled: bool = False
    partitions: int = Field(1, ge=1, le=1024)  # fixed for a namespace once it holds data (meta key)
    durability: Literal["async", "replicated"] = "async"
    wait_replicas: int = Field(1, ge=1, le=16)
    wait_timeout_ms: int = Field(1_000, ge=1, le=60_000)


class ConnectionSettings(Section):
    """The top-level keys: where Redis and PostgreSQL live, the namespace, the data directory.
    The root Settings (horae/settings.py) adds every section to these."""

    redis_url: str | None = None
    database_url: str | None = None
    namespace: str = Field("horae", min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")
    data_dir: str = (
        ""  # "" = .horae/ next to the config file, else the working tree's own dir (datadir.py)
    )
    redis_max_connections: int = Field(64, ge=2, le=10_000)
    # The embedded Redis's AOF fsync (servers.ensure_redis): "always" loses nothing acknowledged
    # to a crash, "everysec" (faster) up to the last second, "no" whatever the OS had not written.
    redis_appendfsync: Literal["always", "everysec", "no"] = "everysec"

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
