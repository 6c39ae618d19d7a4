"""One measured run of the report pipeline (the parent samples its memory):
`python bench/analytics/child.py '<json spec>'` prints one JSON line of timings."""

from __future__ import annotations

import json
import sys
import time
from datetime import date
from pathlib import Path

from audit.analytics.location import DatasetLocation
from audit.analytics.pipeline import ReportRequest, run_report
from audit.analytics.window import ReportWindow


def main(spec: dict[str, object]) -> None:
    started = time.perf_counter()
    request = ReportRequest(
        window=ReportWindow(
            date.fromisoformat(str(spec["since"])),
            date.fromisoformat(str(spec["until"])),
            "UTC",
            int(str(spec.get("baseline_days", 7))),
        ),
        out=Path(str(spec["out"])),
        dataset=DatasetLocation.parse(str(spec["dataset"])),
        database_url=str(spec["database_url"]) if spec.get("database_url") else None,
        master=str(spec.get("master") or "local[*]"),
        export=bool(spec.get("export")),
        publish_db=bool(spec.get("publish_db")),
        spark_conf=dict(spec.get("conf") or {}),  # type: ignore[call-overload]
    )
    result = run_report(request)
    print(
        json.dumps(
            {
                "wall_s": time.perf_counter() - started,
                "timings": dict(result.timings),
                "analysis_steps": dict(result.analysis.timings),
                "exported_rows": sum(e.rows for e in result.exports),
                "export_s": sum(e.seconds for e in result.exports),
                "topics": len(result.analysis.totals),
                "attempts": sum(t.attempts for t in result.analysis.totals),
                "jobs": sum(t.jobs for t in result.analysis.totals),
                "alerts": len(result.analysis.alerts),
            }
        )
    )


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
