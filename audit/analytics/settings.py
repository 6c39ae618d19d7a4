"""The `[analytics]` section: the settings of `horae report` and of the nightly run, beside the
package that reads them; composed with the others by the root (horae/settings.py). Defaults:
config/horae.toml (tests/unit/test_config.py keeps the two equal)."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import Field

from scheduler.core.config import Section

# The nightly run's default schedule (tests/unit/test_defaults_once.py finds it here).
NIGHTLY_CRON = "30 2 * * *"


class AnalyticsSettings(Section):
    """The nightly PySpark failure report (`horae report`, extra `horae[analytics]`)."""

    report_dir: str = Field(
        "reports", description="Where `horae report` and the nightly run write the reports."
    )
    dataset_uri: str = Field(
        "",
        description="The Parquet dataset: empty = <data_dir>/analytics; any URI pyarrow and "
        "Spark read (s3a://..., hdfs://... on a cluster).",
    )
    master: str = Field("local[*]", description="The Spark master.")
    zone: str = Field("UTC", description="Report days are days in this time zone.")
    baseline_days: int = Field(
        7, ge=1, le=366, description="Days of the trailing baseline alerts compare with."
    )
    alert_margin: float = Field(
        0.10,
        ge=0,
        le=1,
        description="Alert when a day's failure_rate is above the baseline mean + this ...",
    )
    alert_min_jobs: int = Field(20, ge=1, description="... with at least this many finished jobs.")
    top_errors: int = Field(20, ge=1, description="Error types listed per report.")
    signatures_per_day: int = Field(50, ge=1, description="Error signatures kept per day.")
    source: Literal["parquet", "jdbc"] = Field(
        "parquet",
        description='Where Spark reads the audit: the Parquet dataset, or "jdbc" straight from '
        "PostgreSQL (needs spark_jars with the PostgreSQL JDBC driver).",
    )
    jdbc_partitions: int = Field(4, ge=1, description='Parallel reads of source = "jdbc".')
    spark_jars: str = Field(
        "",
        description="Extra jars of Spark, e.g. /usr/share/java/postgresql.jar (Debian "
        "libpostgresql-jdbc-java).",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description='Extra Spark settings, e.g. "spark.driver.memory" = "4g".',
    )
    nightly: bool = Field(
        False,
        description="`horae worker` schedules horae.audit.nightly and runs it in a subprocess "
        "(or `horae worker --nightly`).",
    )
    nightly_cron: str = Field(NIGHTLY_CRON, description="When the nightly run fires.")
    nightly_tz: str = Field("UTC", description="The time zone of nightly_cron.")
    nightly_timeout_s: float = Field(
        7200.0, gt=0, description="The nightly run is stopped after this long."
    )


class ReportSettings(Protocol):
    """What `horae report` and the nightly run read of the root Settings (horae/settings.py)."""

    @property
    def data_dir(self) -> str: ...
    @property
    def database_url(self) -> str | None: ...
    @property
    def analytics(self) -> AnalyticsSettings: ...
