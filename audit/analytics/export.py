"""Export: the audit rows of some UTC days, from PostgreSQL (COPY, asyncpg)
to the date-partitioned Parquet dataset (pyarrow), with explicit types.

Per table, one COPY covers each run of consecutive days; the CSV is streamed
into one Parquet file per day in a staging directory, then each day's
partition is replaced as a whole (re-running a day replaces that day). A
`_EXPORTED.json` marker says when a day was exported, so a day exported
while it was still running is exported again later.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as dtime
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from audit.analytics import pg
from audit.analytics.location import MARKER, DatasetLocation, partition, read_marker
from audit.analytics.schema import TABLES, TS
from audit.analytics.window import ReportWindow

EXPORT_QUERIES: Final = {"jobs": "export_jobs", "attempts": "export_attempts"}
ROW_GROUP_ROWS: Final = 1 << 20
# A day exported less than this long after it ended may still have been missing late audit rows.
SETTLED_AFTER: Final = timedelta(minutes=15)
EPOCH: Final = date(1970, 1, 1)

Progress = Callable[[str, int], None]  # (table, rows just exported)


@dataclass(frozen=True)
class ExportResult:
    """One table's export of some days."""

    table: str
    days: tuple[date, ...]
    rows: int
    seconds: float


def day_start(day: date) -> datetime:
    """00:00 UTC of `day`."""
    return datetime.combine(day, dtime(0), tzinfo=UTC)


def runs(days: Iterable[date]) -> list[tuple[date, date]]:
    """Consecutive days grouped: [(first, last), ...]."""
    out: list[tuple[date, date]] = []
    for day in sorted(set(days)):
        if out and out[-1][1] + timedelta(days=1) == day:
            out[-1] = (out[-1][0], day)
        else:
            out.append((day, day))
    return out


def days_to_export(
    location: DatasetLocation, window: ReportWindow, now: datetime, refresh_all: bool = False
) -> list[date]:
    """The report's UTC days always; baseline days that were never exported, or only
    before they had settled (or all of them with refresh_all)."""
    if refresh_all:
        return window.all_utc_days
    fs, root = location.arrow()
    wanted = set(window.report_utc_days)
    for day in window.all_utc_days:
        settled = day_start(day) + timedelta(days=1) + SETTLED_AFTER
        for table in TABLES:
            marker = read_marker(fs, f"{root}/{table}/{partition(day)}")
            exported = marker.get("exported_at") if marker else None
            if not isinstance(exported, str) or datetime.fromisoformat(exported) < settled:
                wanted.add(day)
    return sorted(wanted)


def _csv_options(
    schema: pa.Schema,
) -> tuple[pacsv.ReadOptions, pacsv.ParseOptions, pacsv.ConvertOptions]:
    names = [*schema.names, "day"]
    types = {f.name: (pa.int64() if f.type == TS else f.type) for f in schema}
    types["day"] = pa.int32()
    return (
        pacsv.ReadOptions(column_names=names, block_size=16 << 20),
        pacsv.ParseOptions(newlines_in_values=True),
        # PostgreSQL's CSV: NULL is an empty unquoted field, '' is "" (stays an empty string).
        pacsv.ConvertOptions(
            column_types=types,
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )


def _typed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    columns = [
        batch.column(f.name).cast(f.type) if f.type == TS else batch.column(f.name) for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


class _DayWriters:
    """One Parquet file per day under a staging directory, buffered into large row groups."""

    def __init__(self, fs: pafs.FileSystem, staging: str, schema: pa.Schema) -> None:
        self.fs, self.staging, self.schema = fs, staging, schema
        self.buffers: dict[date, list[pa.Table]] = {}
        self.buffered: dict[date, int] = {}
        self.writers: dict[date, pq.ParquetWriter] = {}
        self.rows: dict[date, int] = {}

    def add(self, day: date, table: pa.Table) -> None:
        self.buffers.setdefault(day, []).append(table)
        self.buffered[day] = self.buffered.get(day, 0) + table.num_rows
        self.rows[day] = self.rows.get(day, 0) + table.num_rows
        if self.buffered[day] >= ROW_GROUP_ROWS:
            self._flush(day)

    def _writer(self, day: date) -> pq.ParquetWriter:
        writer = self.writers.get(day)
        if writer is None:
            directory = f"{self.staging}/{partition(day)}"
            self.fs.create_dir(directory, recursive=True)
            writer = pq.ParquetWriter(
                f"{directory}/part-00000.parquet",
                self.schema,
                filesystem=self.fs,
                compression="snappy",
            )
            self.writers[day] = writer
        return writer

    def _flush(self, day: date) -> None:
        parts = self.buffers.pop(day, [])
        self.buffered[day] = 0
        if parts:
            self._writer(day).write_table(pa.concat_tables(parts), row_group_size=ROW_GROUP_ROWS)

    def close(self, days: Sequence[date]) -> None:
        """Flush everything; days without rows get an empty file so the partition exists."""
        for day in days:
            self._flush(day)
            self._writer(day).close()


def csv_to_partitions(
    csv_path: Path,
    schema: pa.Schema,
    fs: pafs.FileSystem,
    staging: str,
    days: Sequence[date],
    progress: Progress | None = None,
    table: str = "",
) -> dict[date, int]:
    """Stream a COPY CSV (schema columns, then the UTC day as days since 1970) into per-day files.

    Returns:
        rows written per day (every day of `days`, 0 included).

    Raises:
        ValueError: when a row's day is outside `days` (the query and the days disagree).
    """
    writers = _DayWriters(fs, staging, schema)
    allowed = set(days)
    if csv_path.stat().st_size:
        read, parse, convert = _csv_options(schema)
        with pacsv.open_csv(
            csv_path, read_options=read, parse_options=parse, convert_options=convert
        ) as reader:
            for batch in reader:
                typed = _typed(batch, schema)
                day_numbers = batch.column("day")
                for number in pc.unique(day_numbers).to_pylist():
                    day = EPOCH + timedelta(days=int(number))
                    if day not in allowed:
                        raise ValueError(f"exported row of {day} outside the requested days")
                    writers.add(day, typed.filter(pc.equal(day_numbers, number)))
                if progress is not None:
                    progress(table, batch.num_rows)
    writers.close(days)
    return {day: writers.rows.get(day, 0) for day in days}


def _commit_day(
    fs: pafs.FileSystem,
    root: str,
    staging: str,
    table: str,
    day: date,
    rows: int,
    exported_at: datetime,
) -> None:
    """Mark a staged day exported and swap it in place of the day's partition."""
    staged, final = f"{staging}/{partition(day)}", f"{root}/{table}/{partition(day)}"
    with fs.open_output_stream(f"{staged}/{MARKER}") as handle:
        handle.write(
            json.dumps(
                {
                    "table": table,
                    "day": day.isoformat(),
                    "rows": rows,
                    "exported_at": exported_at.isoformat(),
                }
            ).encode()
        )
    if fs.get_file_info(final).type != pafs.FileType.NotFound:
        fs.delete_dir(final)
    fs.move(staged, final)


def write_partition(
    location: DatasetLocation,
    table: str,
    day: date,
    data: pa.Table,
    exported_at: datetime | None = None,
) -> None:
    """Replace one day of a table with `data` (columns of schema.TABLES[table]), as the export
    would.

    For tests and the benchmark's generator, which make datasets without PostgreSQL.
    """
    fs, root = location.arrow()
    staging = f"{root}/{table}/_staging-{uuid.uuid4().hex}"
    staged = f"{staging}/{partition(day)}"
    fs.create_dir(staged, recursive=True)
    pq.write_table(
        data.select(TABLES[table].names).cast(TABLES[table]),
        f"{staged}/part-00000.parquet",
        filesystem=fs,
        row_group_size=ROW_GROUP_ROWS,
    )
    _commit_day(
        fs,
        root,
        staging,
        table=table,
        day=day,
        rows=data.num_rows,
        exported_at=exported_at or datetime.now(UTC),
    )
    fs.delete_dir(staging)


async def export_days(
    database_url: str,
    location: DatasetLocation,
    days: Sequence[date],
    progress: Progress | None = None,
    now: Callable[[], datetime] | None = None,
    work_dir: Path | None = None,
) -> list[ExportResult]:
    """Export the jobs and attempts of these UTC days, replacing their partitions.

    Exports of the same database serialize on an advisory lock, so a manual
    report and the nightly one never interleave their partition swaps.

    Raises:
        AnalyticsError: when PostgreSQL cannot be reached or a query fails.
    """
    clock = now or (lambda: datetime.now(UTC))
    fs, root = location.arrow()
    results: list[ExportResult] = []
    conn = await pg.connect(database_url)
    try:
        await pg.lock_exports(conn)
        with tempfile.TemporaryDirectory(prefix="horae-export-", dir=work_dir) as tmp:
            for table, schema in TABLES.items():
                for first, last in runs(days):
                    started = time.perf_counter()
                    csv_path = Path(tmp) / f"{table}-{first}.csv"
                    await pg.copy_to_csv(
                        conn,
                        EXPORT_QUERIES[table],
                        day_start(first),
                        day_start(last + timedelta(days=1)),
                        csv_path,
                    )
                    staging = f"{root}/{table}/_staging-{uuid.uuid4().hex}"
                    run_days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
                    counts = await asyncio.to_thread(
                        csv_to_partitions,
                        csv_path,
                        schema,
                        fs,
                        staging=staging,
                        days=run_days,
                        progress=progress,
                        table=table,
                    )
                    csv_path.unlink()
                    exported_at = clock()
                    for day in run_days:
                        _commit_day(
                            fs,
                            root,
                            staging,
                            table=table,
                            day=day,
                            rows=counts[day],
                            exported_at=exported_at,
                        )
                    fs.delete_dir(staging)
                    results.append(
                        ExportResult(
                            table,
                            tuple(run_days),
                            sum(counts.values()),
                            time.perf_counter() - started,
                        )
                    )
    finally:
        try:
            await pg.unlock_exports(conn)
        finally:
            await conn.close()
    return results
