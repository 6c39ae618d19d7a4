"""The export's file side: PostgreSQL-style CSV -> typed per-day Parquet,
partition replacement, and which days need exporting (markers)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from audit.analytics.export import csv_to_partitions, days_to_export, write_partition
from audit.analytics.location import MARKER, DatasetLocation
from audit.analytics.schema import ATTEMPTS, JOBS, TS
from audit.analytics.window import ReportWindow

D1, D2 = date(2026, 11, 20), date(2026, 11, 21)
US = 1_000_000


def epoch_us(moment: datetime) -> int:
    return int((moment - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))


def day_number(day: date) -> int:
    return (day - date(1970, 1, 1)).days


def test_csv_to_partitions_types_nulls_and_days(tmp_path: Path) -> None:
    t1 = datetime(2026, 11, 20, 23, 59, 59, 123456, tzinfo=UTC)
    t2 = datetime(2026, 11, 21, 0, 0, 0, 1, tzinfo=UTC)
    # As COPY ... (FORMAT csv) writes: NULL = empty unquoted; '' = ""; quotes doubled; newlines
    # quoted.
    lines = [
        f'j1,1,billing,w1,{epoch_us(t1) - US},{epoch_us(t1)},failed,ValueError,"bad '
        f'""x""\nline 2",20,3,'
        f"{epoch_us(t1) - 60 * US},{day_number(D1)}",
        f'j2,2,billing,,,{epoch_us(t2)},succeeded,,"",,,{epoch_us(t2) - 60 * US},{day_number(D2)}',
    ]
    csv = tmp_path / "attempts.csv"
    csv.write_text("\n".join(lines) + "\n")
    fs = pafs.LocalFileSystem()
    seen: list[int] = []
    counts = csv_to_partitions(
        csv,
        ATTEMPTS,
        fs,
        str(tmp_path / "stage"),
        [D1, D2, date(2026, 11, 22)],
        lambda table, n: seen.append(n),
        "attempts",
    )
    assert counts == {D1: 1, D2: 1, date(2026, 11, 22): 0} and sum(seen) == 2
    first = pq.read_table(tmp_path / "stage" / "day=2026-11-20" / "part-00000.parquet")
    assert first.schema == ATTEMPTS and first.schema.field("finished_at").type == TS
    row = first.to_pylist()[0]
    assert (
        row["finished_at"] == t1
        and row["error_message"] == 'bad "x"\nline 2'
        and row["duration_ms"] == 20
    )
    second = pq.read_table(
        tmp_path / "stage" / "day=2026-11-21" / "part-00000.parquet"
    ).to_pylist()[0]
    assert (
        second["worker_id"] is None
        and second["started_at"] is None
        and second["error_type"] is None
    )
    assert second["error_message"] == "" and second["finished_at"] == t2
    empty = pq.read_table(tmp_path / "stage" / "day=2026-11-22" / "part-00000.parquet")
    assert empty.num_rows == 0 and empty.schema == ATTEMPTS


def test_csv_rows_outside_the_days_are_refused(tmp_path: Path) -> None:
    t = datetime(2026, 11, 20, 12, tzinfo=UTC)
    csv = tmp_path / "jobs.csv"
    csv.write_text(f"j,t,completed,1,3,0,{epoch_us(t)},,{epoch_us(t)},,,,{day_number(D1)}\n")
    try:
        csv_to_partitions(csv, JOBS, pafs.LocalFileSystem(), str(tmp_path / "s"), [D2])
    except ValueError as exc:
        assert "outside" in str(exc)
    else:
        raise AssertionError("a row of another day was accepted")


def jobs_table(n: int) -> pa.Table:
    t = datetime(2026, 11, 20, 12, tzinfo=UTC)
    return pa.Table.from_pylist(
        [
            {
                "job_id": f"j{i}",
                "topic": "t",
                "status": "completed",
                "attempts": 1,
                "max_attempts": 3,
                "failed_attempts": 0,
                "created_at": t,
                "run_at": t,
                "finished_at": t,
                "last_error_type": None,
                "last_error_message": None,
                "cron_name": None,
            }
            for i in range(n)
        ],
        schema=JOBS,
    )


def test_write_partition_replaces_the_day(tmp_path: Path) -> None:
    location = DatasetLocation.parse(str(tmp_path / "ds"))
    write_partition(location, "jobs", D1, jobs_table(5))
    write_partition(location, "jobs", D1, jobs_table(2))
    day_dir = tmp_path / "ds" / "jobs" / "day=2026-11-20"
    assert sorted(p.name for p in day_dir.iterdir()) == [MARKER, "part-00000.parquet"]
    assert pq.read_table(day_dir / "part-00000.parquet").num_rows == 2
    assert json.loads((day_dir / MARKER).read_text())["rows"] == 2
    assert not [p for p in (tmp_path / "ds" / "jobs").iterdir() if p.name.startswith("_staging")]


def test_days_to_export_adds_unsettled_or_missing_baseline_days(tmp_path: Path) -> None:
    location = DatasetLocation.parse(str(tmp_path / "ds"))
    window = ReportWindow(D2, D2, "UTC", baseline_days=2)  # baseline 11-19, 11-20
    settled = datetime(2026, 11, 22, 6, tzinfo=UTC)
    for table in ("jobs", "attempts"):
        write_partition(
            location,
            table,
            date(2026, 11, 19),
            jobs_table(0) if table == "jobs" else ATTEMPTS.empty_table(),
            exported_at=settled,
        )
        # 11-20 was exported while it was still running: export it again
        write_partition(
            location,
            table,
            D1,
            jobs_table(0) if table == "jobs" else ATTEMPTS.empty_table(),
            exported_at=datetime(2026, 11, 20, 18, tzinfo=UTC),
        )
    now = datetime(2026, 11, 22, 2, 30, tzinfo=UTC)
    assert days_to_export(location, window, now) == [D1, D2]
    assert days_to_export(location, window, now, refresh_all=True) == [date(2026, 11, 19), D1, D2]
