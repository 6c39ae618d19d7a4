"""The chaos run's worker launcher: `python -m tests.chaos.worker <horae worker args>`.

CHAOS_CLOCK_OFFSET_S (read here only, never by horae) moves this process's time.time()
ahead by that many seconds before `horae worker` starts, as a host whose clock is
wrong would. Every engine time goes through scheduler/core/clock.py's SystemClock, which
measures its offset to the Redis server's TIME: the run checks that such a worker
still never runs a job early nor takes a live worker's lease."""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    offset = float(os.environ.get("CHAOS_CLOCK_OFFSET_S", "0") or 0)
    if offset:
        real = time.time
        time.time = lambda: real() + offset  # type: ignore[assignment]
        print(f"chaos: this worker's clock runs {offset:+.1f} s off", file=sys.stderr, flush=True)
    from scheduler.cli.main import main as horae

    sys.argv = ["horae", *sys.argv[1:]]
    horae()


if __name__ == "__main__":
    main()
