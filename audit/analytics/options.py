"""The analytics settings, read from the application's Settings object when it
has an `analytics` section (see README: the wanted config keys), with defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

SourceKind = Literal["parquet", "jdbc"]


@dataclass(frozen=True)
class AnalyticsConfig:
    """Defaults of `horae report` and of the nightly run."""

    report_dir: str = "reports"
    dataset_uri: str = ""  # "" = <data_dir>/analytics
    master: str = "local[*]"
    zone: str = "UTC"
    baseline_days: int = 7
    alert_margin: float = 0.10
    alert_min_jobs: int = 20
    top_errors: int = 20
    signatures_per_day: int = 50
    source: SourceKind = "parquet"
    jdbc_partitions: int = 4
    spark_jars: str = ""
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    data_dir: str = ".horae"

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


def config_from(settings: object) -> AnalyticsConfig:
    """AnalyticsConfig from the CLI's ctx.obj (the project's Settings) or None.

    Reads `settings.analytics.<field>` where present (the section is optional) and
    `settings.data_dir`.
    """
    values: dict[str, object] = {}
    section = getattr(settings, "analytics", None)
    for name in AnalyticsConfig.__dataclass_fields__:
        if section is not None and hasattr(section, name):
            values[name] = getattr(section, name)
    data_dir = getattr(settings, "data_dir", None)
    if isinstance(data_dir, str):
        values["data_dir"] = data_dir
    if "spark_conf" in values:
        values["spark_conf"] = dict(cast(Mapping[str, str], values["spark_conf"]))
    return AnalyticsConfig(**values)  # type: ignore[arg-type]
