"""The operator views over HTTP: the dead-letter topics listed with their counts before any is
picked, a worker's version, a schedule's recent fires, what a topic's limits hold back, and the
job search by id prefix and by a payload field (a malformed one refused naming the field)."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

from console.data import PayloadMatch, recent_fires
from horae import RateLimit, TopicOptions
from scheduler.core.job import CronInfo
from tests.console.conftest import Env, failing_job, settle

DLQ = "pay.charge.dlq"


def _rows(html: str, table: str) -> list[str]:
    """The body rows of the table of id `table`, as HTML."""
    body = html.split(f'id="{table}"', 1)[1].split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return re.findall(r"<tr[ >].*?</tr>", body, flags=re.S)


async def test_the_dead_letter_topics_and_their_counts_show_before_one_is_picked(env: Env) -> None:
    s = env.scheduler
    await s.configure_topic("pay.charge", TopicOptions(dead_letter=DLQ))
    for _ in range(2):
        await failing_job(s)
    page = await env.client.get("/dead-letters")
    assert page.status_code == 200
    [row] = _rows(page.text, "dead-letter-topics")
    assert f'data-topic="{DLQ}"' in row and "2 letters" in row
    assert 'id="dead-letters"' not in page.text  # no letters until a topic is picked
    link = re.search(r'href="(/dead-letters\?topic=[^"]+)"', row)
    assert link is not None
    letters = await env.client.get(link.group(1).replace("&amp;", "&"))
    assert len(_rows(letters.text, "dead-letters")) == 2
    assert 'id="replay-all"' in letters.text and 'id="delete-all"' in letters.text
    other = await env.client.get("/dead-letters", params={"topic": "pay.nothing"})
    assert other.status_code == 200 and "holds no dead letter" in other.text
    api = (await env.client.get("/api/v1/dead-letters")).json()
    assert api["items"] == [{"topic": DLQ, "count": 2}]


async def test_an_empty_dead_letters_page_says_how_to_get_some(env: Env) -> None:
    page = await env.client.get("/dead-letters")
    assert "--dead-letter" in page.text and 'id="dead-letters"' not in page.text


async def test_the_workers_page_and_api_show_each_workers_version(env: Env) -> None:
    from horae import __version__

    [row] = _rows((await env.client.get("/workers")).text, "workers")
    assert f'<td class="mono version">{__version__}</td>' in row
    [item] = (await env.client.get("/api/v1/workers")).json()["items"]
    assert item["version"] == __version__


def _cron(expr: str, last: datetime | None, tz: str = "UTC", **more: object) -> CronInfo:
    return CronInfo("c", expr, tz, "t", None, False, last, **more)  # type: ignore[arg-type]


def test_recent_fires_walk_back_from_the_last_run() -> None:
    last = datetime(2030, 3, 4, 9, 0, tzinfo=UTC)
    ms = int(last.timestamp() * 1000)
    assert recent_fires(_cron("*/5 * * * *", last), 3) == [ms, ms - 300_000, ms - 600_000]
    # weekdays at 09:00: Monday's run looks back over the weekend to Friday and Thursday
    monday = datetime(2030, 3, 4, 9, 0, tzinfo=UTC)
    days = [datetime.fromtimestamp(f / 1000, UTC).day for f in recent_fires(
        _cron("0 9 * * 1-5", monday), 3
    )]  # fmt: skip
    assert days == [4, 1, 28]  # (2030-03-01 is a Friday; February has 28 days)
    every = _cron("", last, every=timedelta(minutes=10))
    assert recent_fires(every, 2) == [ms, ms - 600_000]
    assert recent_fires(_cron("*/5 * * * *", None), 3) == []


def test_a_burst_of_fires_still_gives_the_latest() -> None:
    """Every minute from 09:00 to 09:59 and then nothing till the next day: the last run at
    09:59 has 59 fires within the hour before it, more than the window's cap."""
    last = datetime(2030, 3, 4, 9, 59, tzinfo=UTC)
    ms = int(last.timestamp() * 1000)
    assert recent_fires(_cron("* 9 * * *", last), 3) == [ms, ms - 60_000, ms - 120_000]


def test_a_payload_match_reads_nested_fields_and_json_values() -> None:
    m = PayloadMatch.parse("order.status=paid")
    assert m is not None and m.matches({"order": {"status": "paid"}})
    assert not m.matches({"order": {"status": "due"}}) and not m.matches("paid")
    n = PayloadMatch.parse("items.0.qty=3")
    assert n is not None and n.matches({"items": [{"qty": 3}]}) and not n.matches({"items": []})
    assert PayloadMatch.parse("  ") is None


async def test_jobs_are_found_by_id_prefix_and_payload_field(env: Env) -> None:
    s = env.scheduler
    for n in range(3):
        await s.schedule_in("pay.report", timedelta(hours=1), job_id=f"inv-7/{n}", payload={"n": n})
    await s.schedule_in("pay.report", timedelta(hours=1), job_id="inv-70", payload={"n": 1})
    done = await s.schedule_in("pay.report", timedelta(0), job_id="inv-7/old", payload={"n": 1})
    await settle(s, done)
    await s.audit.flush()
    found = await env.client.get("/jobs", params={"id": "inv-7/"})
    ids = re.findall(r'<td class="mono id"><a href="[^"]+">([^<]+)</a>', found.text)
    assert ids == ["inv-7/0", "inv-7/1", "inv-7/2", "inv-7/old"]
    by_field = await env.client.get("/jobs", params={"id": "inv-7", "payload": "n=1"})
    ids = re.findall(r'<td class="mono id"><a href="[^"]+">([^<]+)</a>', by_field.text)
    assert ids == ["inv-7/1", "inv-7/old", "inv-70"]
    exact = await env.client.get("/jobs", params={"id": "inv-70"})
    assert exact.status_code == 303 and exact.headers["location"] == "/jobs/inv-70"
    listed = await env.client.get("/jobs", params={"state": "scheduled", "payload": "n=2"})
    ids = re.findall(r'<td class="mono id"><a href="[^"]+">([^<]+)</a>', listed.text)
    assert ids == ["inv-7/2"]
    bad = await env.client.get("/jobs", params={"payload": "no equals sign"})
    assert bad.status_code == 400 and "payload must be field=value" in bad.text


async def test_the_topic_page_says_what_its_limits_hold_back_in_words(env: Env) -> None:
    """A rate limit of one job an hour: of three due jobs one runs and two wait parked, and the
    page counts them beside the limit written as people write it (not the Python repr)."""
    s = env.scheduler
    await s.configure_topic(
        "pay.report", TopicOptions(rate_limit=RateLimit(1, "1h"), timeout="90s")
    )
    for n in range(3):
        await s.schedule_in("pay.report", timedelta(0), payload={"n": n})
    for _ in range(200):
        if (await s.store.parked("pay.report"))[0] == 2:
            break
        await asyncio.sleep(0.05)
    page = (await env.client.get("/topics/pay.report")).text
    held = re.search(r'<dd id="topic-parked">(.*?)</dd>', page, flags=re.S)
    assert held is not None and "2 due jobs parked</span> by its rate limit" in held.group(1)
    assert re.search(r"looked at again in (59|60) min \(\S+Z\)$", held.group(1)), held.group(1)
    assert "<dt>rate limit</dt><dd>1 per 1 h</dd>" in page
    assert "<dt>timeout</dt><dd>1 min 30 s per attempt</dd>" in page
    assert "RateLimit(" not in page and "timedelta" not in page
    listed = (await env.client.get("/topics")).text
    assert "1 per 1 h" in listed and "1 min 30 s" in listed and "RateLimit(" not in listed
    assert '<a href="/topics/pay.report">pay.report</a>' in listed  # (the name opens its page)
    [item] = [
        t
        for t in (await env.client.get("/api/v1/topics")).json()["items"]
        if t["name"] == "pay.report"
    ]
    assert item["parked"] == 2 and item["parked_next_at"].endswith("Z"), item
    assert item["blocked_keys"] == [] and item["options"]["rate_limit"]["max"] == 1, item
    other = (await env.client.get("/topics/pay.charge")).text
    assert '<dd id="topic-parked">none</dd>' in other
