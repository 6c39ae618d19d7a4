"""The audit relay's own instructions per job, under callgrind (issue 34).

The relay's CPU per job (bench/run.py: helpers_us) moves by a tenth from run to run on this
shared machine, more than most changes to its hot path buy; the instructions it executes do
not. So the relay's work on a drain's outbox (bench/audit_writer.py: capture; every
`--fail-every`-th job fails its first attempt) runs in a Python process under `valgrind
--tool=callgrind`, as the relay does it: each entry as XREADGROUP returns it (a flat
[k, v, ...] list) made a map and decoded (audit/relay/stream.py), then written in batches of
`--batch` by the relay's writer (audit/relay/writer.py: BatchWriter) into a fresh database.
Once with the entries of the first N jobs, once with those of the first 2N: starting Python,
importing and migrating cancel out, so (instructions of 2N - instructions of N) / N is what
one job costs the relay, less what loading this file's copy of the entries costs per job (two
more runs that only load them). PostgreSQL runs outside valgrind (its own share:
bench/postgres_instructions.py). Reading the stream's bytes (hiredis) is not included.

    .venv/bin/python bench/relay_instructions.py [--jobs 1000] [--events capture.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from audit_writer import DATABASE, outbox_entries, with_database  # noqa: E402
from common import scratch_dir  # noqa: E402
from servers import start_postgres, stop_postgres  # noqa: E402

Entries = list[tuple[str, dict[str, str]]]


def first_entries(entries: Entries, n: int) -> Entries:
    """The entries of the first n jobs (by first appearance), in stream order."""
    jobs: dict[str, None] = {}
    for _, fields in entries:
        if len(jobs) == n:
            break
        jobs.setdefault(fields["id"])
    return [(k, f) for k, f in entries if f["id"] in jobs]


def load(lines: list[str]) -> list[tuple[str, list[str]]]:
    """Entries (one JSON [id, fields] per line) as XREADGROUP returns them: (id, [k1, v1, ...]).
    The file is kept as lines, parsed a batch at a time: the garbage collector's passes
    would otherwise walk every entry the run holds, a cost no relay has."""
    entries = (json.loads(line) for line in lines)
    return [(k, [x for kv in f.items() for x in kv]) for k, f in entries]


async def relay(pg_url: str, path: Path, batch: int) -> None:
    """The relay's work on the entries in `path` (run under callgrind by main)."""
    import asyncpg

    from audit.options import RelayOptions
    from audit.relay.consumer import settle_gc
    from audit.relay.foldcache import FoldCache
    from audit.relay.stream import Entry, decode
    from audit.relay.writer import BatchWriter
    from audit.settings import AuditSettings
    from scheduler.store.pipe import as_map

    lines = path.read_text().splitlines()
    admin = await asyncpg.connect(pg_url)
    await admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    await admin.execute(f"CREATE DATABASE {DATABASE}")
    options = RelayOptions.from_settings(AuditSettings(), pool_max_size=1)
    writer = BatchWriter(with_database(pg_url, DATABASE), options, FoldCache(options.fold_cache))
    settle_gc()  # as a relay process does once started
    try:
        for i in range(0, len(lines), batch):
            decoded = (decode(Entry(k, as_map(f))) for k, f in load(lines[i : i + batch]))
            await writer.write([pair for pair in decoded if pair is not None])
    finally:
        await writer.close()
        await admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        await admin.close()


def instructions(
    work: Path, name: str, pg_url: str, entries: Entries, batch: int, *, mode: str
) -> int:
    """The instructions of one process over `entries`, under callgrind: the relay's work
    (mode "relay") or loading them alone (mode "load")."""
    path = work / f"{name}.jsonl"
    path.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    out = work / f"callgrind.out.{name}-{mode}"
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__]
        + ["--child", str(path), "--mode", mode, "--database-url", pg_url, "--batch", str(batch)],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},  # the same sets and dicts in every run
    )
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no callgrind totals in {out}")


def main() -> None:
    from audit.settings import AuditSettings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000, help="N (the runs hold N and 2N)")
    parser.add_argument("--fail-every", type=int, default=10, help="0: no failures")
    parser.add_argument("--batch", type=int, default=AuditSettings().batch_size)
    parser.add_argument("--redis-url", default="", help="capture on this Redis (else a private)")
    parser.add_argument("--database-url", default="", help="this PostgreSQL (else a private)")
    parser.add_argument("--events", type=Path, help="replay this capture (audit_writer.py's)")
    parser.add_argument("--keep", action="store_true", help="keep the callgrind files")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("relay", "load"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.mode == "relay":
            asyncio.run(relay(args.database_url, args.child, args.batch))
        else:
            lines = args.child.read_text().splitlines()
            for i in range(0, len(lines), args.batch):
                load(lines[i : i + args.batch])
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind (callgrind) is not installed")
    n = args.jobs
    entries = asyncio.run(outbox_entries(args.events, args.redis_url, 2 * n, args.fail_every))
    started = False
    pg_url = args.database_url
    if not pg_url:
        pg_url, started = start_postgres()
    try:
        with scratch_dir("horae-bench-relaycg-", args.keep) as work:
            small, large = first_entries(entries, n), first_entries(entries, 2 * n)
            counts = {
                mode: [
                    instructions(work, name, pg_url, part, args.batch, mode=mode)
                    for name, part in (("small", small), ("large", large))
                ]
                for mode in ("relay", "load")
            }
    finally:
        if started:
            stop_postgres()
    events = (len(large) - len(small)) / n
    relay_, load_ = counts["relay"], counts["load"]
    per_job = ((relay_[1] - relay_[0]) - (load_[1] - load_[0])) / n
    print(f"the audit relay's instructions per job ({events:.2f} events per job):")
    print(f"  {n:,} jobs      {relay_[0]:>15,}  (loading them alone: {load_[0]:,})")
    print(f"  {2 * n:,} jobs      {relay_[1]:>15,}  (loading them alone: {load_[1]:,})")
    print(f"  per job (difference / N, less loading) {per_job:>12,.0f}")
    print("RELAY-INSTRUCTIONS " + json.dumps({"jobs": n, "per_job": per_job, "counts": counts}))


if __name__ == "__main__":
    main()
