"""redis-server's instructions per job and per script call, under callgrind (issue 34).

Instruction counts do not depend on how loaded the machine is, so one run says what a change
to the Lua scripts bought, where Redis CPU time on this shared machine cannot. A plain
redis-server (not a cluster node: bench/cluster.py counts that one) runs under
`valgrind --tool=callgrind`; counters are zeroed and dumped around each measured part:

- per job: N jobs stored with schedule_many (enqueue), then one worker (concurrency 50) runs
  them all (claim + complete); the outbox on (the audit's events), no relay;
- per call (`--per-call`): each hot script's top level alone (its helpers defined, then
  `return 1`), an empty script, and a claim with nothing due, 300 pipelined calls each.

    .venv/bin/python bench/redis_instructions.py [--jobs 2000] [--per-call]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis as sync_redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cluster import drain  # noqa: E402
from bench.common import scratch_dir  # noqa: E402
from scheduler.store.scripts import script_source  # noqa: E402
from tests.cluster.servers import binaries, free_ports  # noqa: E402

HOT_SCRIPTS = ("enqueue", "claim", "complete", "fail")


class Callgrind:
    """A redis-server under callgrind: `measure(tag)` zeroes the counters, runs the caller's
    block, dumps them, and `instructions(tag)` reads the dump."""

    def __init__(self, work: Path) -> None:
        server, _ = binaries()
        self.dir, self.port = work, free_ports(1)[0]
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/callgrind.out.%p"]
            + [str(server), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(work)]
            + ["--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with sync_redis.Redis(port=self.port) as c:
                    c.ping()
                return
            except sync_redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def control(self, what: str) -> None:
        subprocess.run(
            ["callgrind_control", what, str(self.proc.pid)], check=True, capture_output=True
        )

    @contextmanager
    def measure(self, tag: str) -> Iterator[None]:
        self.control("--zero")
        yield
        self.control(f"--dump={tag}")

    def instructions(self, tag: str) -> int:
        for dump in self.dir.glob("callgrind.out.*"):
            text = dump.read_text(errors="replace")
            if f"Trigger: dump {tag}\n" not in text[:3000]:
                continue
            for line in text.splitlines():
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
        raise RuntimeError(f"no callgrind dump {tag!r} in {self.dir}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def per_call(cg: Callgrind, calls: int = 300) -> dict[str, int]:
    """Instructions per EVALSHA: an empty script, each hot script's top level, an idle claim."""
    keys = [f"{{b}}:{k}" for k in ("due", "active", "outbox", "counts", "crons", "served", "dls")]
    keys += ["{b}:seq", "{b}:known"]
    args = ["1000", "50", "30000", "w", "{b}:j:", "0", "{b}:dl:", "0", "0"]
    sources = {"empty script": "return 1"}
    for name in HOT_SCRIPTS:
        source = script_source(name, True)
        sources[f"{name}: top level"] = source[: source.rindex(f"\n-- {name}:")] + "\nreturn 1"
    sources["claim: nothing due"] = script_source("claim", True)
    out = {}
    with sync_redis.Redis(port=cg.port) as c:
        for i, (label, source) in enumerate(sources.items()):
            sha = c.script_load(source)
            for n, tag in ((20, None), (calls, f"call{i}")):
                pipe = c.pipeline(transaction=False)
                for _ in range(n):
                    pipe.evalsha(sha, len(keys), *keys, *args)
                if tag is None:
                    pipe.execute()
                    continue
                with cg.measure(tag):
                    pipe.execute()
                out[label] = cg.instructions(tag) // calls
    return out


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--per-call", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the callgrind files (their path)")
    args = p.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind (callgrind) is not installed")
    with scratch_dir("horae-bench-cg-", args.keep) as work:
        cg = Callgrind(work)
        try:
            asyncio.run(drain(cg.url, [cg.port], 200, 1))  # scripts loaded, paths warm
            asyncio.run(drain(cg.url, [cg.port], args.jobs, 1, around=cg.measure))
            enqueue, run = cg.instructions("enqueue"), cg.instructions("run")
            n = args.jobs
            print(f"redis-server instructions per job, drain of {n:,} (outbox on, no relay):")
            print(f"  enqueue (schedule_many)  {enqueue / n:>10,.0f}")
            print(f"  claim + complete         {run / n:>10,.0f}")
            print(f"  whole job                {(enqueue + run) / n:>10,.0f}")
            if args.per_call:
                print("redis-server instructions per call (pipelined):")
                for label, count in per_call(cg).items():
                    print(f"  {label:24} {count:>10,}")
        finally:
            cg.stop()


if __name__ == "__main__":
    main()
