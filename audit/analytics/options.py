"""The options of `horae report` and of the nightly run, built from the
application's Settings (`[analytics]` and `data_dir`): Settings hold the defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from scheduler.core.datadir import data_dir_of

if TYPE_CHECKING:
    from audit.analytics.settings import ReportSettings

SourceKind = Literal["parquet", "jdbc"]


@dataclass(frozen=True, kw_only=True)
class AnalyticsConfig:
    """What `horae report` and the nightly run fall back to (see AnalyticsSettings)."""

    report_dir: str
    dataset_uri: str  # "" = <data_dir>/analytics
    master: str
    zone: str
    baseline_days: int
    alert_margin: float
    alert_min_jobs: int
    top_errors: int
    signatures_per_day: int
    source: SourceKind
    jdbc_partitions: int
    spark_jars: str
    spark_conf: Mapping[str, str]
    data_dir: str

    @classmethod
    def from_settings(cls, settings: ReportSettings) -> AnalyticsConfig:
        """The `[analytics]` section of `settings`, with its `data_dir`."""
        a = settings.analytics
        return cls(
            report_dir=a.report_dir,
            dataset_uri=a.dataset_uri,
            master=a.master,
            zone=a.zone,
            baseline_days=a.baseline_days,
            alert_margin=a.alert_margin,
            alert_min_jobs=a.alert_min_jobs,
            top_errors=a.top_errors,
            signatures_per_day=a.signatures_per_day,
            source=a.source,
            jdbc_partitions=a.jdbc_partitions,
            spark_jars=a.spark_jars,
            spark_conf=dict(a.spark_conf),
            data_dir=str(data_dir_of(settings)),
        )

    @property
    def dataset(self) -> str:
        """The dataset URI, defaulting to <data_dir>/analytics."""
        return self.dataset_uri or str(Path(self.data_dir) / "analytics")

    def spark_settings(self) -> dict[str, str]:
        """spark_conf plus spark.jars when configured."""
        conf = dict(self.spark_conf)
        if self.spark_jars:
            conf["spark.jars"] = self.spark_jars
        return conf
