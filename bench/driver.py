"""Run ONE (system, scenario, repetition) in this fresh process and print one JSON line.

Started by bench/run.py with the system's own venv python. The producer and the
worker share this process and its single asyncio event loop, for every system, except in
`e2e_split`, where this process is the worker and starts the producer as a process of its
own: this same script with `--role producer` (scenarios.PRODUCER_CMD).

    python driver.py --system horae --scenario e2e --redis redis://127.0.0.1:PORT/0 --n 10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import traceback
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import scenarios  # noqa: E402
from adapters.base import Adapter, Job, NotAvailable  # noqa: E402
from measure import Recorder  # noqa: E402
from scenarios import CONCURRENCY, SCENARIOS, payload  # noqa: E402
from window import WINDOW  # noqa: E402


def load_adapter(system: str) -> type[Adapter]:
    if system == "horae":
        from adapters.horae import HoraeAdapter

        return HoraeAdapter
    if system == "bullmq":
        from adapters.bullmq import BullmqAdapter

        return BullmqAdapter
    if system == "arq":
        from adapters.arq import ArqAdapter

        return ArqAdapter
    if system == "saq":
        from adapters.saq import SaqAdapter

        return SaqAdapter
    raise SystemExit(f"unknown system {system}")


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    rec = Recorder(args.n, fail_first=args.scenario == "retry")
    options = {
        "audit": args.audit,
        "database_url": args.database_url,
        "relay_process": args.relay_process,
        "relay_core": args.relay_core,
    }
    result: dict[str, Any] = {
        "system": system_name(args),
        "scenario": args.scenario,
        "n": args.n,
        "rep": args.rep,
        "pid": os.getpid(),
        "process": scenarios.PROCESS_MODEL.get(args.scenario, scenarios.ONE_PROCESS),
    }
    try:
        adapter = load_adapter(args.system)(args.redis, rec.on_run, options)
    except NotAvailable as exc:
        result["status"] = str(exc)
        return result
    result["versions"] = adapter.versions()
    result["settings"] = {**adapter.settings(), "concurrency": CONCURRENCY}
    await adapter.connect()
    WINDOW.pids = adapter.processes()  # a relay process of its own: its CPU counts
    try:
        result["metrics"] = await SCENARIOS[args.scenario](
            adapter, rec, args.n, args.redis, args.timeout
        )
        cpu = WINDOW.result(args.n)
        if cpu is not None:
            result["metrics"]["cpu_per_job_us"] = cpu
        result["status"] = "ok"
    except NotAvailable as exc:
        result["status"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - reported, the run goes on with the next one
        result["status"] = f"error: {exc!r}"
        result["traceback"] = traceback.format_exc()
    finally:
        for step, limit in (("stop_worker", 30), ("close", 10)):
            task = asyncio.ensure_future(getattr(adapter, step)())
            done, _ = await asyncio.wait([task], timeout=limit)
            if (
                not done
            ):  # report where it hangs (asyncio tasks and their stacks), then give up on it
                result.setdefault("shutdown_error", f"{step} did not return within {limit} s")
                result["shutdown_tasks"] = _task_stacks()
                task.cancel()
            elif task.exception() is not None:
                result.setdefault("shutdown_error", f"{step}: {task.exception()!r}")
    return result


async def produce(args: argparse.Namespace) -> dict[str, Any]:
    """--role producer (e2e_split, paced_split): connect without a worker, say READY, wait for GO on
    stdin, then schedule N jobs one await at a time; report each call's start time and the CPU
    this process spent on them."""
    adapter = load_adapter(args.system)(
        args.redis,
        lambda p, t: False,
        {
            "audit": args.audit,
            "database_url": args.database_url,
            "role": "producer",
            "relay_process": args.relay_process,
        },
    )
    await adapter.connect()
    try:
        paced = (
            args.scenario == "paced_split"
        )  # 200/s through the "at" API, else as fast as one await allows
        jobs = [Job(payload(i)) for i in range(args.n)]
        enq = [0.0] * args.n
        behind = 0
        print("READY", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        cpu0, t0 = time.process_time(), time.perf_counter()
        for i, job in enumerate(jobs):
            if paced:
                behind += await scenarios.pace(t0, i)
                job = scenarios.now_job(i, True)
            enq[i] = time.time()
            await adapter.enqueue(job)
        cpu = time.process_time() - cpu0
    finally:
        await adapter.close()
    return {"enq": enq, "cpu_s": cpu, "behind": behind}


def system_name(args: argparse.Namespace) -> str:
    """The name run.py knows the variant by: horae, horae+audit, horae+audit-proc, a peer."""
    base: str = args.system
    if not args.audit:
        return base
    return base + ("+audit-proc" if args.relay_process else "+audit")


def _task_stacks() -> list[str]:
    import io

    out = []
    for t in asyncio.all_tasks():
        if t is asyncio.current_task():
            continue
        buf = io.StringIO()
        t.print_stack(limit=8, file=buf)
        out.append(f"{t.get_name()}: {buf.getvalue()}")
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--system", required=True)
    p.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    p.add_argument("--redis", required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--rep", type=int, default=0)
    p.add_argument("--audit", action="store_true")
    p.add_argument("--database-url", default="")
    p.add_argument(
        "--relay-process",
        action="store_true",
        help=(
            "with --audit: relay off here, a `horae audit "
            "relay` process of its own (horae+audit-proc)"
        ),
    )
    p.add_argument(
        "--relay-core",
        type=int,
        default=None,
        help="pin that relay process to this core (default: this process's, the client core)",
    )
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument(
        "--pyinstrument", metavar="OUT.txt", help="profile only the measured window (tools venv)"
    )
    p.add_argument(
        "--pg-pid",
        type=int,
        default=0,
        help="the private PostgreSQL's postmaster (its CPU is counted)",
    )
    p.add_argument(
        "--role",
        choices=("worker", "producer"),
        default="worker",
        help="producer: e2e_split's producer process (started by the worker's driver)",
    )
    args = p.parse_args()
    if args.role == "producer":
        print("BENCH-PRODUCER " + json.dumps(asyncio.run(produce(args))), flush=True)
        return
    WINDOW.redis_url, WINDOW.pg_pid = args.redis, args.pg_pid
    scenarios.PRODUCER_CMD = [
        sys.executable,
        os.path.abspath(__file__),
        *sys.argv[1:],
        "--role",
        "producer",
    ]
    if args.pyinstrument:
        WINDOW.setup_profiler()
    result = asyncio.run(main_async(args))
    prof = WINDOW.profiler
    if prof is not None and prof.last_session is not None:
        os.makedirs(os.path.dirname(os.path.abspath(args.pyinstrument)), exist_ok=True)
        with open(args.pyinstrument, "w") as fh:
            fh.write(
                prof.output_text(
                    unicode=True, color=False, show_all=bool(os.environ.get("BENCH_PYI_ALL"))
                )
            )
    print("BENCH-RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
