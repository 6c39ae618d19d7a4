from __future__ import annotations

from horae import on_event, ScheduleArrivedEvent

SEEN: list[tuple[str, int]] = []


@on_event("plugin.smoke")
async def smoke(event: ScheduleArrivedEvent) -> None:
    SEEN.append((event.payload["n"], event.attempt))


async def test_smoke(horae, horae_clock) -> None:
    await horae.schedule_in("plugin.smoke", "1h", payload={"n": "a"})
    await horae.schedule_in("plugin.smoke", "2h", payload={"n": "b"})
    await horae_clock.advance("90m")
    assert SEEN == [("a", 1)]
    await horae_clock.advance("1h")
    assert SEEN == [("a", 1), ("b", 1)]
    ran = await horae.ran("plugin.smoke")
    print(ran)
    assert [r.runs[0].started_at for r in ran]
