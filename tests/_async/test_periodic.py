"""Periodic jobs in-process against a real PostgreSQL: the tick ledger, the policies, the admin.

Every driver mode runs ``test_ticks_and_the_cron_admin_on_every_driver_mode``, which goes
through every statement of sql/periodic.sql once (the parameters' types are where drivers
differ). The tests that wait for several ticks (exactly-once across three runtimes, missed
ticks, overlap, pause, a newer declaration) run in one driver mode per side, ``HEAVY_MODES``:
asyncpg-pool here, psycopg-url in the generated sync suite. The schedule maths is tested
without a database in tests/test_periodic.py.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections import defaultdict
from collections.abc import (
    AsyncIterator,
    Awaitable,  # async-only
    Callable,
)
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

import pgqueue
from tests import jobs
from tests._async.helpers import wait_until

FAST = pgqueue.RuntimeConfig(
    poll_interval=0.2,
    heartbeat_interval=0.3,
    rescue_after=2.0,
    leader_interval=0.3,
    shutdown_timeout=2.0,
)
SECOND = timedelta(seconds=1)
HEAVY_MODES = ["asyncpg-pool"]  # sync: HEAVY_MODES = ["psycopg-url"]
heavy = pytest.mark.parametrize("driver", HEAVY_MODES, indirect=True)

# what each run of a Tick job saw: (job id, ctx.periodic, ctx.tick, n), per token
SEEN: defaultdict[str, list[tuple[int, str | None, datetime | None, int]]] = defaultdict(list)


@dataclass
class Tick(pgqueue.Worker):
    """Records what its context says about the entry and tick that enqueued it."""

    kind = "periodic_tick"
    token: str
    n: int = 0

    def process(self, ctx: pgqueue.JobContext) -> None:
        SEEN[self.token].append((ctx.id, ctx.periodic, ctx.tick, self.n))


# builds a client on the test's schema (see the ``make`` fixture)
Make = Callable[[pgqueue.WorkerRegistry], Awaitable[pgqueue.AsyncClient]]  # async-only
# sync: Make = Callable[[pgqueue.WorkerRegistry], pgqueue.Client]


@pytest.fixture
async def make(driver: pgqueue.AsyncDriver, settings: pgqueue.Settings) -> AsyncIterator[Make]:
    """Build clients with a registry on the test's schema (migrated); stop them at the end."""
    made: list[pgqueue.AsyncClient] = []

    async def build(registry: pgqueue.WorkerRegistry) -> pgqueue.AsyncClient:
        client = pgqueue.AsyncClient(driver, registry=registry, settings=settings)
        if not made:
            await client.migrate()
        made.append(client)
        return client

    yield build
    for client in made:
        await client.stop(0)


@pytest.fixture
def token() -> str:
    """A key of this test's runs in ``SEEN`` (and ``jobs.PEAK``)."""
    return uuid.uuid4().hex


@pytest.fixture
def ticks_table(settings: pgqueue.Settings) -> str:
    """The tick ledger of the test's schema."""
    return f'"{settings.schema}"."{settings.prefix}cron_ticks"'


def registry_with(*entries: pgqueue.Periodic) -> pgqueue.WorkerRegistry:
    """A registry of the test jobs with these periodic entries."""
    registry = pgqueue.WorkerRegistry(Tick, jobs.Overlap)
    for entry in entries:
        registry.schedule(entry)
    return registry


def ledger(db: Any, table: str, name: str) -> list[tuple[datetime, str, int | None]]:
    """The entry's ticks, oldest first: (tick, how, job id)."""
    return db.rows(f"SELECT tick, how, job_id FROM {table} WHERE name = $1 ORDER BY tick", (name,))


def job_rows(db: Any, table: str, ids: list[int]) -> dict[int, tuple[Any, ...]]:
    """id -> (status, scheduled_for, options, payload) of the given jobs."""
    rows = db.rows(
        f"SELECT id, status, scheduled_for, options, payload FROM {table} WHERE id = ANY($1)",
        (ids,),
    )
    return {row[0]: row[1:] for row in rows}


def db_now(db: Any) -> datetime:
    """The database's clock: the one that says when a tick is due."""
    value: datetime = db.value("SELECT clock_timestamp()")
    return value


def seen_ticks(token: str) -> dict[int, tuple[str | None, datetime | None, int]]:
    """Job id -> (ctx.periodic, ctx.tick, n) of the Tick jobs of ``token`` that ran."""
    return {job_id: (name, tick, n) for job_id, name, tick, n in SEEN[token]}


# -- every driver mode -----------------------------------------------------------------------------


async def test_ticks_and_the_cron_admin_on_every_driver_mode(
    make: Make, db: Any, jobs_table: str, ticks_table: str, token: str, settings: pgqueue.Settings
) -> None:
    entries = f'"{settings.schema}"."{settings.prefix}cron_entries"'
    # run_on_start, so that a tick is enqueued at once; a scheduled tick takes the same
    # statement (tested below, on fewer modes, as they take seconds)
    entry = pgqueue.Periodic(
        "beat",
        Tick(token=token),
        every=SECOND,
        jitter=timedelta(milliseconds=200),
        run_on_start=True,
        overlap="skip",
        options=pgqueue.JobOptions(priority=3, max_attempts=2),
    )
    client = await make(registry_with(entry))
    before = db_now(db)
    await client.start({"default": 4}, config=FAST)

    def completed(how: str) -> tuple[datetime, str, int] | None:
        for tick, row_how, job_id in ledger(db, ticks_table, "beat"):
            if row_how == how and job_id is not None:
                status = job_rows(db, jobs_table, [job_id])[job_id][0]
                return (tick, how, job_id) if status == "completed" else None
        return None

    start_tick, _, start_job = await wait_until(
        lambda: completed("start"), what="the start tick's job ran"
    )
    # one job at start, at that instant (to the millisecond), whatever the schedule says
    assert start_tick >= before.replace(microsecond=before.microsecond // 1000 * 1000)
    assert start_tick <= db_now(db)
    assert [how for _, how, _ in ledger(db, ticks_table, "beat")].count("start") == 1
    # the job knows its entry and tick: the ledger's
    assert seen_ticks(token)[start_job] == ("beat", start_tick, 0)
    _, scheduled_for, options, payload = job_rows(db, jobs_table, [start_job])[start_job]
    # jitter: the job is due at its tick plus the entry's stable delay for that tick
    assert scheduled_for == start_tick + timedelta(seconds=entry.jitter_for(start_tick))
    assert options["periodic"]["name"] == "beat"
    assert datetime.fromisoformat(options["periodic"]["tick"]) == start_tick
    assert payload == {"token": token, "n": 0}
    assert db.rows(
        f"SELECT priority, max_attempts FROM {jobs_table} WHERE id = $1", (start_job,)
    ) == [(3, 2)]

    # cron_list: the entry as declared, its last tick, last run and next tick
    (info,) = await client.cron_list()
    assert isinstance(info, pgqueue.PeriodicInfo)
    assert (info.name, info.schedule, info.timezone, info.kind, info.queue) == (
        "beat",
        "every 1s",
        "UTC",
        "periodic_tick",
        "default",
    )
    assert not info.paused
    assert not info.retired
    assert info.last_tick is not None
    assert info.last_tick >= start_tick
    assert info.next_tick is not None
    assert info.next_tick > info.last_tick - SECOND
    assert info.last_run is not None
    assert info.last_run.status == "completed"

    # pause (twice: still found), trigger while paused, resume; unknown names: found nowhere
    assert await client.cron_pause("beat") is True
    assert await client.cron_pause("beat") is True
    (info,) = await client.cron_list()
    assert info.paused
    assert info.paused_at is not None
    job_id = await client.cron_trigger("beat")
    manual_tick, _, _ = await wait_until(lambda: completed("manual"), what="the triggered job ran")
    assert seen_ticks(token)[job_id] == ("beat", manual_tick, 0)
    with pytest.raises(pgqueue.JobNotFound, match="no periodic entry named 'nothing-here'"):
        await client.cron_trigger("nothing-here")

    # cron_history (still paused: no tick comes in meanwhile): newest first, paged by
    # ``before``, each tick with its job as it is now
    history = await client.cron_history("beat")
    assert all(isinstance(t, pgqueue.TickInfo) for t in history)
    assert [t.tick for t in history] == sorted(
        (t for t, _, _ in ledger(db, ticks_table, "beat")), reverse=True
    )
    (manual,) = [t for t in history if t.how == "manual"]
    assert (manual.tick, manual.job_id, manual.status) == (manual_tick, job_id, "completed")
    assert history[-1].how == "start"
    older = await client.cron_history("beat", limit=1, before=history[0].tick)
    assert [(t.tick, t.job_id) for t in older] == [(history[1].tick, history[1].job_id)]
    assert await client.cron_history("nothing-here") == []
    for call in (client.cron_pause, client.cron_resume, client.cron_trigger, client.cron_history):
        with pytest.raises(pgqueue.InvalidFilter, match="invalid periodic entry name"):
            await call("no spaces allowed")
    for limit in (0, 1001, True, 1.5):
        with pytest.raises(pgqueue.InvalidFilter, match="limit must be a whole number"):
            await client.cron_history("beat", limit=limit)  # type: ignore[arg-type]

    # no worker evaluates it for a while (removed from the code): retired, its history kept
    await client.stop(0)
    assert await client.cron_resume("beat") is True
    assert await client.cron_resume("beat") is False  # not paused any more
    assert await client.cron_pause("nothing-here") is False
    assert await client.cron_resume("nothing-here") is False
    db.rows(f"UPDATE {entries} SET seen_at = now() - interval '1 hour' WHERE name = 'beat'")
    (info,) = await client.cron_list()
    assert info.retired
    assert not info.paused
    assert info.seen_age > 3000
    assert len(await client.cron_history("beat")) == len(history)


# -- exactly one job per tick --------------------------------------------------------------------


@heavy
async def test_three_runtimes_enqueue_exactly_one_job_per_tick(
    make: Make, db: Any, jobs_table: str, ticks_table: str, token: str
) -> None:
    registry = registry_with(pgqueue.Periodic("every-second", Tick(token=token), every=SECOND))
    runtimes = [await make(registry) for _ in range(3)]
    for client in runtimes:
        await client.start({"default": 2}, config=FAST)
    # all three evaluate the entry: each has tried (and lost or won) ticks once four are in
    rows = await wait_until(
        lambda: (r := ledger(db, ticks_table, "every-second")) and len(r) >= 4 and r,
        what="four ticks",
    )
    ticks = [tick for tick, _, _ in rows]
    # consecutive: one every second from the first, none missing, none doubled
    assert [b - a for a, b in itertools.pairwise(ticks)] == [SECOND] * (len(ticks) - 1)
    assert {how for _, how, _ in rows} == {"scheduled"}
    ids = [job_id for _, _, job_id in rows]
    assert None not in ids
    assert len(set(ids)) == len(ids)
    # one job per tick in the jobs table too: no job without its tick
    by_tick = db.rows(
        f"SELECT (options->'periodic'->>'tick')::timestamptz, count(*) FROM {jobs_table} "
        "GROUP BY 1 ORDER BY 1"
    )
    last = rows[-1][0]
    assert [(t, c) for t, c in by_tick if t <= last] == [(t, 1) for t in ticks]
    # each job saw the ledger's tick
    await wait_until(lambda: set(ids) <= set(seen_ticks(token)), what="the jobs ran")
    seen = seen_ticks(token)
    assert [seen[job_id][:2] for job_id in ids] == [("every-second", t) for t in ticks]
    assert len(SEEN[token]) == len(seen)  # each job ran once


# -- missed ticks ----------------------------------------------------------------------------------


def interval_with_a_late_tick(now: datetime) -> int:
    """A whole number of seconds (>= 60) whose newest tick before ``now`` is 8-15 s old.

    So that the newest tick is late (more than LATE_AFTER) yet within its grace, and the next
    one is at least 45 s away: the test sees the missed-tick policy at start and nothing else.
    """
    epoch = now.timestamp()
    for seconds in range(60, 1200):
        if 8 <= epoch % seconds <= 15:
            return seconds
    raise AssertionError(f"no interval for {now}")  # pragma: no cover - ~16 fit on average


@heavy
async def test_missed_ticks_follow_the_default_and_backfill_policies(
    make: Make, db: Any, jobs_table: str, ticks_table: str, token: str
) -> None:
    now = db_now(db)
    every = timedelta(seconds=interval_with_a_late_tick(now))
    late = pgqueue.Periodic("late", Tick(token=token, n=1), every=every)
    backfill = pgqueue.Periodic(
        "backfill", Tick(token=token, n=2), every=every, backfill=every * 2.5
    )
    fresh = pgqueue.Periodic(
        "fresh", Tick(token=token, n=3), every=SECOND, backfill=timedelta(hours=1)
    )
    newest = late.last_tick(now)
    assert newest is not None
    client = await make(registry_with(late, backfill, fresh))  # migrated, not started
    # the workers were down: each entry's last tick acted on is four intervals ago
    old = newest - 4 * every
    for name in ("late", "backfill"):
        db.rows(
            f"INSERT INTO {ticks_table} (name, tick, how) VALUES ($1, $2, 'scheduled')",
            (name, old),
        )
    await client.start({"default": 4}, config=FAST)

    def acted() -> bool:
        return (
            len(ledger(db, ticks_table, "late")) >= 2
            and len(ledger(db, ticks_table, "backfill")) >= 4
            and len(ledger(db, ticks_table, "fresh")) >= 1
        )

    await wait_until(acted, what="the missed ticks acted on")
    # default: only the newest missed tick, within its grace (one interval), marked late
    assert [(t, how) for t, how, _ in ledger(db, ticks_table, "late")] == [
        (old, "scheduled"),
        (newest, "late"),
    ]
    # backfill: every tick of the window (2.5 intervals), oldest first; older ones never
    rows = ledger(db, ticks_table, "backfill")
    assert [(t, how) for t, how, _ in rows] == [
        (old, "scheduled"),
        (newest - 2 * every, "backfill"),
        (newest - every, "backfill"),
        (newest, "backfill"),
    ]
    backfilled = [job_id for _, _, job_id in rows[1:]]
    assert backfilled == sorted(backfilled)  # enqueued oldest first
    # a new entry never backfills, however long its window: its first tick is after its start
    first_fresh = ledger(db, ticks_table, "fresh")[0]
    assert first_fresh[0] > now
    assert first_fresh[1] == "scheduled"
    # each job ran knowing its tick
    late_job = ledger(db, ticks_table, "late")[1][2]
    await wait_until(lambda: {late_job, *backfilled} <= set(seen_ticks(token)), what="the jobs ran")
    seen = seen_ticks(token)
    assert seen[late_job] == ("late", newest, 1)
    assert [seen[j] for j in backfilled] == [("backfill", newest - k * every, 2) for k in (2, 1, 0)]
    assert db.value(f"SELECT count(*) FROM {jobs_table} WHERE payload->>'n' IN ('1', '2')") == 4


# -- overlap ---------------------------------------------------------------------------------------


@heavy
async def test_overlap_skip_records_the_tick_as_skipped_while_the_previous_job_runs(
    make: Make, db: Any, jobs_table: str, ticks_table: str, token: str
) -> None:
    entry = pgqueue.Periodic(
        "slow", jobs.Overlap(token=token, seconds=1.3), every=SECOND, overlap="skip"
    )
    client = await make(registry_with(entry))
    await client.start({"default": 4}, config=FAST)

    def skipped_then_ran() -> bool:
        hows = [how for _, how, _ in ledger(db, ticks_table, "slow")]
        return "skipped" in hows and "scheduled" in hows[hows.index("skipped") + 1 :]

    await wait_until(skipped_then_ran, timeout=15, what="a skipped tick, then a job again")
    rows = ledger(db, ticks_table, "slow")
    for _, how, job_id in rows:
        assert (job_id is None) == (how == "skipped")
    ids = [job_id for _, _, job_id in rows if job_id is not None]
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == len(ids)
    # the four free slots never ran two of the entry's jobs at once
    assert jobs.PEAK[token] == 1
    # the tick after a skipped one was enqueued because the job before it had finished
    first_skip = [how for _, how, _ in rows].index("skipped")
    assert rows[first_skip - 1][1] == "scheduled"


# -- pause, resume, trigger ------------------------------------------------------------------------


@heavy
async def test_a_paused_entry_records_no_tick_and_resumes_without_catching_up(
    make: Make, db: Any, ticks_table: str, token: str, settings: pgqueue.Settings
) -> None:
    entries = f'"{settings.schema}"."{settings.prefix}cron_entries"'
    client = await make(registry_with(pgqueue.Periodic("p", Tick(token=token), every=SECOND)))
    await client.start({"default": 2}, config=FAST)
    await wait_until(lambda: ledger(db, ticks_table, "p"), what="a first tick")
    assert await client.cron_pause("p")
    paused = db_now(db)
    # a whole tick falls while paused (waiting for the clock is what pausing is about)
    await wait_until(lambda: db_now(db) > paused + 1.2 * SECOND, what="a tick's time")
    manual_id = await client.cron_trigger("p")
    assert await client.cron_resume("p")
    resumed: datetime = db.value(f"SELECT resumed_at FROM {entries} WHERE name = 'p'")
    rows = await wait_until(
        lambda: (r := ledger(db, ticks_table, "p")) and r[-1][0] > resumed and r,
        what="a tick after resuming",
    )
    during = [(t, how) for t, how, _ in rows if paused < t < resumed]
    # nothing but the operator's trigger while paused; the paused-over ticks never come back
    assert [how for _, how in during] == ["manual"]
    after = [(t, how) for t, how, _ in rows if t >= resumed]
    assert after[0][1] == "scheduled"
    assert after[0][0] - resumed < SECOND
    assert [job_id for _, _, job_id in rows].count(manual_id) == 1
    # history and list, as an operator reads them
    await wait_until(lambda: manual_id in seen_ticks(token), what="the triggered job ran")
    history = await client.cron_history("p")
    # newest first (ticks may have come in since ``rows`` was read)
    assert [t.tick for t in history if t.tick <= rows[-1][0]] == [t for t, _, _ in rows][::-1]
    assert [t.how for t in history if t.job_id == manual_id] == ["manual"]
    (info,) = await client.cron_list()
    assert not info.paused
    assert info.last_tick is not None
    assert info.last_tick >= after[0][0]
    assert info.next_tick is not None
    assert info.next_tick > info.last_tick - SECOND
    assert info.last_run is not None


# -- two declarations of one entry -----------------------------------------------------------------


@heavy
async def test_the_newest_declaration_wins_and_the_older_one_stops(
    make: Make,
    db: Any,
    jobs_table: str,
    ticks_table: str,
    token: str,
    settings: pgqueue.Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pgqueue")
    entries = f'"{settings.schema}"."{settings.prefix}cron_entries"'
    old = await make(
        registry_with(
            pgqueue.Periodic("shared", Tick(token=token, n=1), every=2 * SECOND, run_on_start=True)
        )
    )
    await old.start({"default": 2}, config=FAST)
    await wait_until(lambda: ledger(db, ticks_table, "shared"), what="the old one's start tick")
    new = await make(
        registry_with(pgqueue.Periodic("shared", Tick(token=token, n=2), every=SECOND))
    )
    await new.start({"default": 2}, config=FAST)
    await wait_until(
        lambda: db.value(f"SELECT schedule FROM {entries} WHERE name = 'shared'") == "every 1s",
        what="the new declaration",
    )
    # the statement that records a tick reads the declaration it runs under, and only
    # records a tick that is due by its own clock: once the new declaration is committed (as
    # it is now), every tick recorded later is the new one's
    cutoff = db_now(db)
    await wait_until(
        lambda: len([r for r in ledger(db, ticks_table, "shared") if r[0] > cutoff]) >= 2,
        what="two ticks of the new declaration",
    )
    await wait_until(
        lambda: "started later: this worker stops evaluating it" in caplog.text,
        what="the older worker's warning",
    )
    assert "declared differently by another worker; this declaration, the newest" in (caplog.text)
    rows = [r for r in ledger(db, ticks_table, "shared") if r[0] > cutoff]
    stored = job_rows(db, jobs_table, [job_id for _, _, job_id in rows])
    assert {stored[job_id][3]["n"] for _, _, job_id in rows} == {2}
    # an odd second: only the new schedule (every second) has those ticks
    assert any(int(t.timestamp()) % 2 for t, _, _ in rows)
    (info,) = await old.cron_list()
    assert info.schedule == "every 1s"
    # the newer deploy stops (a canary, a rollback): once nobody has evaluated its declaration
    # for rescue_after, the older worker declares the entry again and its schedule resumes
    await new.stop(0)
    await wait_until(
        lambda: "this worker evaluates it again" in caplog.text,
        timeout=FAST.rescue_after + 5,
        what="the older worker taking the entry back",
    )
    await wait_until(
        lambda: db.value(f"SELECT schedule FROM {entries} WHERE name = 'shared'") == "every 2s",
        what="the older declaration back",
    )
    back = db_now(db)
    await wait_until(
        lambda: len([r for r in ledger(db, ticks_table, "shared") if r[0] > back]) >= 2,
        timeout=10,
        what="two ticks of the older declaration",
    )
    later = [r for r in ledger(db, ticks_table, "shared") if r[0] > back]
    assert not any(int(t.timestamp()) % 2 for t, _, _ in later)  # every 2 s again
    assert {job_rows(db, jobs_table, [j])[j][3]["n"] for _, _, j in later if j} == {1}
