"""The optional second input: Spark reads PostgreSQL directly over JDBC, with
the export queries (sql/queries.sql) filtered to the window and split into
partitions by a hash of the job id. Needs the PostgreSQL JDBC driver on
`spark.jars` (Debian: libpostgresql-jdbc-java -> /usr/share/java/postgresql.jar)
and a TCP address (JDBC cannot use a unix socket)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final
from urllib.parse import parse_qs, unquote, urlsplit

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from audit.analytics.errors import AnalyticsError
from audit.analytics.export import EXPORT_QUERIES
from audit.analytics.schema import TABLES, TS
from audit.analytics.sql import query
from audit.analytics.window import ReportWindow

DRIVER: Final = "org.postgresql.Driver"


@dataclass(frozen=True)
class JdbcTarget:
    """A JDBC URL and its connection properties (user, password kept out of the URL)."""

    url: str
    properties: dict[str, str]


def jdbc_target(database_url: str) -> JdbcTarget:
    """postgresql://user:pw@host:port/db?sslmode=require -> jdbc:postgresql://host:port/db?sslmode=require.

    Raises:
        AnalyticsError: for a URL without a TCP host (unix socket) or not postgres.
    """
    parts = urlsplit(database_url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise AnalyticsError(f"not a PostgreSQL URL: scheme {parts.scheme!r}")
    params = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    host = parts.hostname or params.pop("host", "")
    if not host or host.startswith("/"):
        raise AnalyticsError(
            "JDBC needs a TCP host:port; this database URL uses a unix socket "
            "(use --source parquet, or a host/port URL)"
        )
    port = parts.port or int(params.pop("port", "5432"))
    params.pop("host", None)
    params.pop("port", None)
    properties = {"driver": DRIVER}
    if parts.username:
        properties["user"] = unquote(parts.username)
    if parts.password:
        properties["password"] = unquote(parts.password)
    database = parts.path.lstrip("/") or properties.get("user", "postgres")
    suffix = "&".join(f"{k}={v}" for k, v in sorted(params.items()))
    return JdbcTarget(
        f"jdbc:postgresql://{host}:{port}/{database}" + (f"?{suffix}" if suffix else ""), properties
    )


def _literal(moment: datetime) -> str:
    # Formatted from a datetime we computed (never user text): JDBC subqueries take no parameters.
    return f"TIMESTAMPTZ '{moment.isoformat()}'"


def bounded_query(name: str, start: datetime, end: datetime) -> str:
    """A named export query with its $1/$2 bounds inlined, as a JDBC subquery."""
    sql = query(name).replace("$1", _literal(start)).replace("$2", _literal(end))
    return f"({sql}) AS horae_export"


def id_predicates(partitions: int, column: str = "job_id") -> list[str]:
    """One WHERE clause per Spark partition: a stable hash of the job id modulo `partitions`."""
    return [
        f"mod(hashtext({column})::bigint + 2147483648, {partitions}) = {k}"
        for k in range(partitions)
    ]


class JdbcSource:
    """Reads jobs and attempts of the window straight from PostgreSQL."""

    def __init__(self, database_url: str, partitions: int = 4, fetch_size: int = 10_000) -> None:
        self.target = jdbc_target(database_url)
        self.partitions = max(1, partitions)
        self.fetch_size = fetch_size

    def read(self, spark: SparkSession, table: str, window: ReportWindow) -> DataFrame:
        start, end = window.instants(window.baseline_start, window.until)
        props = {**self.target.properties, "fetchsize": str(self.fetch_size)}
        frame = spark.read.jdbc(
            self.target.url,
            bounded_query(EXPORT_QUERIES[table], start, end),
            predicates=id_predicates(self.partitions),
            properties=props,
        )
        return from_export_columns(frame, table)


def from_export_columns(frame: DataFrame, table: str) -> DataFrame:
    """An export query's rows as the dataset has them: epoch µs -> timestamps, day number ->
    date."""
    columns = [
        F.timestamp_micros(F.col(f.name)).alias(f.name) if f.type == TS else F.col(f.name)
        for f in TABLES[table]
    ]
    return frame.select(*columns, F.date_from_unix_date(F.col("day")).alias("day"))
