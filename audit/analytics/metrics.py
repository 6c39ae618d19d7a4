"""The metrics as Spark DataFrame transformations, each on an input that has
the exported columns (schema.py) plus `local_day`. No I/O: analyze.py reads,
filters and collects; unit tests call these on small hand-built DataFrames.

Definitions (per group of `keys`, e.g. ["topic", "local_day"] or ["topic"]):
- jobs: jobs that reached a terminal state; completed / failed / cancelled by status;
  failure_rate = failed / (completed + failed).
- with_failure: those with at least one failed attempt; recovered: of which completed;
  retry_recovery_rate = recovered / with_failure.
- attempts: attempts that finished; failed_attempts: outcome failed, timed_out or
  worker_lost; attempt_failure_rate = failed_attempts / attempts.
- p50/p95/p99 of duration_ms and of lateness_ms (start minus due): exact, linear
  interpolation between closest ranks (the same as PostgreSQL's percentile_cont).
A rate is NULL when its denominator is 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from audit.analytics.signatures import (
    MAX_SIGNATURE_CHARS,
    MIN_OWN_ID_CHARS,
    OWN_ID,
    RULES,
    UNKNOWN_TYPE,
)
from scheduler.core import outbox
from scheduler.core.outbox import FAILED_OUTCOMES

PERCENTILES: Final = (0.5, 0.95, 0.99)
JOB_COUNTS: Final = ("jobs", "completed", "failed", "cancelled", "with_failure", "recovered")
ATTEMPT_COUNTS: Final = ("attempts", "failed_attempts", "timed_out", "worker_lost", "no_listener")


def local_day(ts: Column | str, zone: str) -> Column:
    """The date of an instant in `zone` (the session time zone must be UTC)."""
    column = F.col(ts) if isinstance(ts, str) else ts
    return F.to_date(F.from_utc_timestamp(column, zone))


def local_hour(ts: Column | str, zone: str) -> Column:
    """The hour (0..23) of an instant's wall time in `zone` (the session time zone must be UTC)."""
    column = F.col(ts) if isinstance(ts, str) else ts
    return F.hour(F.from_utc_timestamp(column, zone))


def ratio(numerator: Column, denominator: Column) -> Column:
    """numerator / denominator as a double; NULL when the denominator is 0."""
    return F.when(denominator > 0, numerator.cast("double") / denominator.cast("double"))


def _count_if(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def job_counts(jobs: DataFrame, keys: Sequence[str]) -> DataFrame:
    """keys + jobs, completed, failed, cancelled, with_failure, recovered, failure_rate,
    retry_recovery_rate."""
    status, had_failure = F.col("status"), F.col("failed_attempts") > 0
    columns = [
        F.count(F.lit(1)).cast("long").alias("jobs"),
        _count_if(status == outbox.STATUS_COMPLETED).alias("completed"),
        _count_if(status == outbox.STATUS_FAILED).alias("failed"),
        _count_if(status == outbox.STATUS_CANCELLED).alias("cancelled"),
        _count_if(had_failure).alias("with_failure"),
        _count_if(had_failure & (status == outbox.STATUS_COMPLETED)).alias("recovered"),
    ]
    counts = jobs.groupBy(*keys).agg(*columns)
    return counts.select(
        "*",
        ratio(F.col("failed"), F.col("completed") + F.col("failed")).alias("failure_rate"),
        ratio(F.col("recovered"), F.col("with_failure")).alias("retry_recovery_rate"),
    )


def attempt_counts(attempts: DataFrame, keys: Sequence[str], percentiles: bool = True) -> DataFrame:
    """keys + attempts, failed_attempts, timed_out, worker_lost, no_listener, attempt_failure_rate,
    and (when `percentiles`) p50/p95/p99 of duration and lateness."""
    outcome = F.col("outcome")
    aggregates = [
        F.count(F.lit(1)).cast("long").alias("attempts"),
        _count_if(outcome.isin(*FAILED_OUTCOMES)).alias("failed_attempts"),
        _count_if(outcome == outbox.TIMED_OUT).alias("timed_out"),
        _count_if(outcome == outbox.WORKER_LOST).alias("worker_lost"),
        _count_if(outcome == outbox.NO_LISTENER).alias("no_listener"),
    ]
    if percentiles:
        aggregates += [
            F.percentile(F.col("duration_ms"), list(PERCENTILES)).alias("_duration"),
            F.percentile(F.col("lateness_ms"), list(PERCENTILES)).alias("_lateness"),
        ]
    counts = attempts.groupBy(*keys).agg(*aggregates)
    extra = [ratio(F.col("failed_attempts"), F.col("attempts")).alias("attempt_failure_rate")]
    if percentiles:
        extra += [
            F.col(f"_{metric}").getItem(i).alias(f"p{int(p * 100)}_{metric}_ms")
            for metric in ("duration", "lateness")
            for i, p in enumerate(PERCENTILES)
        ]
    return counts.select(*keys, *ATTEMPT_COUNTS, *extra)


def stats(
    jobs: DataFrame, attempts: DataFrame, keys: Sequence[str], percentiles: bool = True
) -> DataFrame:
    """Job and attempt metrics side by side (full outer join on keys, missing counts = 0)."""
    joined = job_counts(jobs, keys).join(
        attempt_counts(attempts, keys, percentiles), list(keys), "full_outer"
    )
    return joined.fillna(0, subset=[*JOB_COUNTS, *ATTEMPT_COUNTS])


def attempts_histogram(jobs: DataFrame, keys: Sequence[str]) -> DataFrame:
    """keys + attempts (per finished job) + jobs: how many jobs needed how many attempts."""
    return jobs.groupBy(*keys, "attempts").agg(F.count(F.lit(1)).cast("long").alias("jobs"))


def signature_column(error_type: Column, message: Column, job_id: Column | None = None) -> Column:
    """Spark twin of signatures.signature(): the same regex rules via regexp_replace."""
    text = F.coalesce(message, F.lit(""))
    if job_id is not None:
        text = F.when(
            F.length(job_id) >= MIN_OWN_ID_CHARS, F.replace(text, job_id, F.lit(OWN_ID))
        ).otherwise(text)
    for pattern, replacement in RULES:
        text = F.regexp_replace(text, pattern, replacement)
    text = F.substring(F.regexp_replace(text, "^ +| +$", ""), 1, MAX_SIGNATURE_CHARS)
    kind = F.coalesce(F.when(error_type != "", error_type), F.lit(UNKNOWN_TYPE))
    return F.when(text == "", kind).otherwise(F.concat(kind, F.lit(": "), text))


def error_signatures(attempts: DataFrame, keys: Sequence[str]) -> DataFrame:
    """keys + signature, count, example_job_id, last_seen over failed attempts.

    The example is the job of the latest such attempt (ties: the greatest job id).
    """
    failed = attempts.where(F.col("outcome").isin(*FAILED_OUTCOMES)).select(
        *keys,
        "job_id",
        "finished_at",
        signature_column(F.col("error_type"), F.col("error_message"), F.col("job_id")).alias(
            "signature"
        ),
    )
    return failed.groupBy(*keys, "signature").agg(
        F.count(F.lit(1)).cast("long").alias("count"),
        F.max_by(F.col("job_id"), F.struct("finished_at", "job_id")).alias("example_job_id"),
        F.max("finished_at").alias("last_seen"),
    )


def top_signatures(signatures: DataFrame, keys: Sequence[str], limit: int) -> DataFrame:
    """At most `limit` signatures per group of keys, most frequent first (ties: by signature)."""
    rank = F.row_number().over(
        Window.partitionBy(*keys).orderBy(F.col("count").desc(), F.col("signature"))
    )
    return signatures.withColumn("_rank", rank).where(F.col("_rank") <= limit).drop("_rank")


def top_errors(signatures: DataFrame, limit: int) -> DataFrame:
    """Signatures over all topics: signature, count, topics (sorted), example_job_id (latest)."""
    return (
        signatures.groupBy("signature")
        .agg(
            F.sum("count").cast("long").alias("count"),
            F.array_sort(F.collect_set("topic")).alias("topics"),
            F.max_by(F.col("example_job_id"), F.struct("last_seen", "example_job_id")).alias(
                "example_job_id"
            ),
        )
        .orderBy(F.col("count").desc(), F.col("signature"))
        .limit(limit)
    )
