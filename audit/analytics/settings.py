"""The `[analytics]` section: the settings of `horae report` and of the nightly run, beside the
package that reads them; composed with the others by the root (horae/settings.py). Defaults:
config/horae.toml (tests/unit/test_config.py keeps the two equal)."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import Field

from scheduler.core.config import Section


class AnalyticsSettings(Section):
    """The nightly PySpark failure report (`horae report`, extra `horae[analytics]`)."""

    report_dir: str = "reports"
    dataset_uri: str = (
        ""  # "" = <data_dir>/analytics; any URI pyarrow and Spark read (s3a://, hdfs://)
    )
    master: str = "local[*]"
    zone: str = "UTC"
    baseline_days: int = Field(7, ge=1, le=366)
    alert_margin: float = Field(0.10, ge=0, le=1)
    alert_min_jobs: int = Field(20, ge=1)
    top_errors: int = Field(20, ge=1)
    signatures_per_day: int = Field(50, ge=1)
    source: Literal["parquet", "jdbc"] = "parquet"
    jdbc_partitions: int = Field(4, ge=1)
    spark_jars: str = ""
    spark_conf: dict[str, str] = Field(default_factory=dict)
    nightly: bool = (
        False  # `horae worker` schedules horae.audit.nightly and runs it (or `--nightly`)
    )
    nightly_cron: str = "30 2 * * *"
    nightly_tz: str = "UTC"
    nightly_timeout_s: float = Field(7200.0, gt=0)


class ReportSettings(Protocol):
    """What `horae report` and the nightly run read of the root Settings (horae/settings.py)."""

    @property
    def data_dir(self) -> str: ...
    @property
    def database_url(self) -> str | None: ...
    @property
    def analytics(self) -> AnalyticsSettings: ...
