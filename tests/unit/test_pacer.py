"""The Pacer behind [worker] batch_window_ms: a call after a quiet spell starts at once, one
that follows within the window waits for the window's end."""

from __future__ import annotations

import asyncio

from scheduler.worker.pacer import Pacer


async def test_a_call_within_the_window_waits_for_its_end() -> None:
    pacer, loop = Pacer(0.2), asyncio.get_running_loop()
    t0 = loop.time()
    await pacer.wait()
    first = loop.time() - t0
    await pacer.wait()
    second = loop.time() - t0
    assert first < 0.1, "the first call is not held back"
    assert second >= 0.2 - 0.005, "the second waits for the end of the first one's window"


async def test_a_call_after_a_quiet_spell_goes_at_once() -> None:
    pacer, loop = Pacer(0.05), asyncio.get_running_loop()
    await pacer.wait()
    await asyncio.sleep(0.08)
    t0 = loop.time()
    await pacer.wait()
    assert loop.time() - t0 < 0.04


async def test_no_window_never_waits() -> None:
    pacer, loop = Pacer(0.0), asyncio.get_running_loop()
    t0 = loop.time()
    for _ in range(100):
        await pacer.wait()
    assert loop.time() - t0 < 0.05
