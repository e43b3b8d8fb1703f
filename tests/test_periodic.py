"""Periodic entries without a database: declaration errors, tick maths, the missed-tick policy.

The schedulers and the tick ledger on every driver mode are tested in tests/_async/
test_periodic.py; here is what every process computes alone from an entry: its ticks (interval
ticks counted from the epoch, cron ticks in the entry's zone, across daylight-saving changes of
real zones), its grace, its jitter, and which missed ticks ``plan_ticks`` acts on.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import pgqueue
from pgqueue.periodic import (
    ALIASES,
    DEFAULT_GRACE_MAX,
    LATE_AFTER,
    InvalidSchedule,
    Periodic,
    next_tick,
    plan_ticks,
)
from tests import jobs

JOB = jobs.Record(token="periodic")
T0 = datetime(2030, 1, 2, 3, 4, 0, tzinfo=UTC)  # a whole minute: a tick of every schedule here
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


def entry(**kwargs: Any) -> Periodic:
    """A Periodic named 'p' running JOB every minute, unless the arguments say otherwise."""
    kwargs.setdefault("name", "p")
    kwargs.setdefault("job", JOB)
    if "cron" not in kwargs and "every" not in kwargs:
        kwargs["every"] = MINUTE
    return Periodic(**kwargs)


def utc(text: str) -> datetime:
    """An ISO 8601 instant with its offset, in UTC."""
    return datetime.fromisoformat(text).astimezone(UTC)


# -- declaration errors ----------------------------------------------------------------------------


def test_invalid_schedule_is_a_configuration_and_value_error() -> None:
    assert issubclass(InvalidSchedule, pgqueue.ConfigurationError)
    assert issubclass(InvalidSchedule, ValueError)
    assert pgqueue.InvalidSchedule is InvalidSchedule


@pytest.mark.parametrize(
    "cron",
    ["61 * * * *", "* * *", "", "not a cron", "0 0 30 2 *", "* * * * MOO", "*/0 * * * *"],
)
def test_a_bad_cron_expression_fails_at_declaration(cron: str) -> None:
    with pytest.raises(InvalidSchedule, match=r"bad cron expression .*use 5 fields"):
        entry(cron=cron)


def test_six_fields_are_refused() -> None:
    # cronsim reads a sixth field as seconds (first); pgqueue's cron is 5 fields, as documented
    with pytest.raises(InvalidSchedule, match="5 fields"):
        entry(cron="*/20 * * * * *")


@pytest.mark.parametrize("cron", ["@reboot", "@every 5m", "@hourly2", "@"])
def test_an_unknown_alias_fails_and_lists_the_known_ones(cron: str) -> None:
    with pytest.raises(InvalidSchedule, match="unknown cron alias") as info:
        entry(cron=cron)
    assert "@hourly" in str(info.value)
    assert "5 fields" in str(info.value)


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "../etc/passwd", "utc+2", None])
def test_an_unknown_time_zone_fails_at_declaration(zone: Any) -> None:
    with pytest.raises(InvalidSchedule, match=r"unknown time zone .*IANA"):
        entry(cron="0 * * * *", timezone=zone)


@pytest.mark.parametrize(
    "kwargs", [{}, {"cron": "* * * * *", "every": MINUTE}], ids=["neither", "both"]
)
def test_exactly_one_of_cron_and_every(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidSchedule, match="exactly one of cron= and every="):
        Periodic("p", JOB, **kwargs)


@pytest.mark.parametrize(
    "every", [timedelta(milliseconds=999), timedelta(0), -MINUTE, 60, "1m"], ids=repr
)
def test_every_is_a_timedelta_of_a_second_or_more(every: Any) -> None:
    with pytest.raises(InvalidSchedule, match=r"every must be a datetime.timedelta of at least 1s"):
        entry(every=every)
    assert entry(every=SECOND).every == SECOND


@pytest.mark.parametrize("what", ["grace", "backfill", "jitter"])
def test_negative_or_untyped_policies_fail(what: str) -> None:
    for bad in (-SECOND, 5):
        with pytest.raises(InvalidSchedule, match=f"{what} must be a datetime.timedelta"):
            entry(**{what: bad})
    assert getattr(entry(**{what: timedelta(0)}), what) == timedelta(0)


def test_overlap_is_allow_or_skip() -> None:
    with pytest.raises(InvalidSchedule, match="overlap must be 'allow' or 'skip'"):
        entry(overlap="never")
    assert entry().overlap == "allow"
    assert entry(overlap="skip").overlap == "skip"


@pytest.mark.parametrize("name", ["", "has space", "x" * 129, "semi;colon", 42, "1starts-digit"])
def test_a_bad_name_fails(name: Any) -> None:
    with pytest.raises(InvalidSchedule, match="invalid periodic entry name"):
        entry(name=name)


def test_names_may_use_the_kind_characters() -> None:
    assert entry(name="reports.daily:eu-west_1").name == "reports.daily:eu-west_1"
    assert entry(name="x" * 128).name == "x" * 128


@pytest.mark.parametrize("job", [jobs.Record, "tests.jobs.Record", None], ids=repr)
def test_the_job_is_a_worker_instance(job: Any) -> None:
    with pytest.raises(InvalidSchedule, match=r"job must be a pgqueue.Worker instance"):
        entry(job=job)


def test_options_are_job_options() -> None:
    with pytest.raises(InvalidSchedule, match=r"options must be a pgqueue.JobOptions"):
        entry(options={"queue": "q"})


@pytest.mark.parametrize(
    "options",
    [
        pgqueue.JobOptions(job_id="once"),
        pgqueue.JobOptions(unique=HOUR),
        pgqueue.JobOptions(run_in=HOUR),
        pgqueue.JobOptions(run_at=datetime(2030, 1, 1, tzinfo=UTC)),
    ],
    ids=["job_id", "unique", "run_in", "run_at"],
)
def test_the_registry_refuses_job_id_and_unique(options: pgqueue.JobOptions) -> None:
    registry = pgqueue.WorkerRegistry()
    with pytest.raises(InvalidSchedule, match="are not for periodic jobs"):
        registry.schedule(entry(options=options))
    assert registry.periodic == []


def test_the_registry_refuses_duplicate_names_and_non_entries() -> None:
    registry = pgqueue.WorkerRegistry()
    first = registry.schedule(entry(name="a"))
    with pytest.raises(InvalidSchedule, match="named 'a' is already scheduled"):
        registry.schedule(entry(name="a", every=HOUR))
    with pytest.raises(InvalidSchedule, match=r"schedule\(\) takes a pgqueue.Periodic"):
        registry.schedule("a")  # type: ignore[arg-type]
    second = registry.schedule(entry(name="b", cron="@daily"))
    assert registry.periodic == [first, second]
    # the job's class is registered with the entry
    assert jobs.Record.kind in registry


# -- the schedule ----------------------------------------------------------------------------------


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_every_alias_means_its_expression(alias: str) -> None:
    by_alias = entry(cron=alias)
    by_fields = entry(cron=ALIASES[alias])
    assert by_alias.spec == alias
    start = datetime(2031, 5, 17, 13, 7, tzinfo=UTC)
    want = by_fields.ticks_between(start, start + timedelta(days=800))
    assert by_alias.ticks_between(start, start + timedelta(days=800)) == want
    assert want  # even @yearly ticks in 800 days
    assert entry(cron=alias.upper()).ticks_between(start, start + timedelta(days=800)) == want


def test_the_aliases_are_the_usual_ones() -> None:
    assert ALIASES == {
        "@yearly": "0 0 1 1 *",
        "@annually": "0 0 1 1 *",
        "@monthly": "0 0 1 * *",
        "@weekly": "0 0 * * 0",
        "@daily": "0 0 * * *",
        "@midnight": "0 0 * * *",
        "@hourly": "0 * * * *",
    }


def test_interval_ticks_are_counted_from_the_epoch_whatever_the_start() -> None:
    p = entry(every=timedelta(seconds=7))
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    ticks = p.ticks_between(T0, T0 + MINUTE)
    assert ticks
    assert all((t - epoch) % timedelta(seconds=7) == timedelta(0) for t in ticks)
    assert all(b - a == timedelta(seconds=7) for a, b in itertools.pairwise(ticks))
    # any start inside the window yields the same ticks after it: no process's start matters
    for offset in (0.0, 0.001, 1.5, 6.999, 13.0):
        start = T0 + timedelta(seconds=offset)
        assert p.ticks_between(start, T0 + MINUTE) == [t for t in ticks if t > start]
    assert p.spec == "every 7s"
    assert entry(every=timedelta(minutes=90)).spec == "every 5400s"
    assert entry(every=timedelta(seconds=1.5)).spec == "every 1.5s"


@pytest.mark.parametrize("ms", [1100, 1300, 3700, 9999, 1001, 1500, 61_000])
def test_fractional_intervals_tick_strictly_after_and_exactly(ms: int) -> None:
    # in float seconds, every 1.1 s gave back the tick it was asked to follow: the scheduler
    # then waited for nothing and tried the same tick again and again
    p = entry(every=timedelta(milliseconds=ms))
    step = timedelta(milliseconds=ms)
    tick = p.last_tick(T0)
    assert tick is not None
    for _ in range(2000):
        following = next(p.ticks_after(tick))
        assert following - tick == step
        assert p.last_tick(following) == following
        assert p.last_tick(following - timedelta(microseconds=1)) == tick
        assert next_tick(p.spec, "UTC", tick) == following
        tick = following
    assert p.ticks_between(tick, tick) == []


def test_the_interval_spec_keeps_every_digit() -> None:
    for every, spec in [
        (timedelta(days=12, seconds=1), "every 1036801s"),
        (timedelta(seconds=1234567), "every 1234567s"),
        (timedelta(seconds=1, microseconds=1), "every 1.000001s"),
        (timedelta(minutes=90), "every 5400s"),
        (timedelta(seconds=1.5), "every 1.5s"),
    ]:
        p = entry(every=every)
        assert p.spec == spec
        # what cron list shows as the next tick is the entry's own next tick
        assert next_tick(p.spec, "UTC", T0) == next(p.ticks_after(T0))
    # two intervals that differ in the 7th digit are two declarations
    a = entry(every=timedelta(seconds=1234567))
    b = entry(every=timedelta(seconds=1234570))
    assert a.definition() != b.definition()


def test_ticks_between_is_half_open_and_in_order() -> None:
    p = entry(cron="*/15 * * * *")
    assert p.ticks_between(T0, T0 + HOUR) == [
        utc("2030-01-02T03:15:00+00:00"),
        utc("2030-01-02T03:30:00+00:00"),
        utc("2030-01-02T03:45:00+00:00"),
        utc("2030-01-02T04:00:00+00:00"),
    ]
    assert p.ticks_between(T0, T0) == []
    tick = utc("2030-01-02T03:15:00+00:00")
    assert p.ticks_between(tick - timedelta(microseconds=1), tick) == [tick]
    assert p.ticks_between(tick, tick + timedelta(minutes=14)) == []


def test_cron_ticks_are_read_in_the_entry_zone_and_returned_in_utc() -> None:
    p = entry(cron="0 9 * * *", timezone="Asia/Tokyo")
    (tick,) = p.ticks_between(T0, T0 + timedelta(days=1))
    assert tick == utc("2030-01-03T09:00:00+09:00")
    assert tick.tzinfo == UTC
    # a naive or differently zoned start means the same instant
    assert next(p.ticks_after(T0.astimezone(ZoneInfo("America/Los_Angeles")))) == tick


def test_last_tick() -> None:
    every = entry(every=timedelta(seconds=10))
    assert every.last_tick(T0 + timedelta(seconds=9.999)) == T0
    assert every.last_tick(T0 + timedelta(seconds=10)) == T0 + timedelta(seconds=10)
    cron = entry(cron="*/15 * * * *")
    assert cron.last_tick(T0) == utc("2030-01-02T03:00:00+00:00")
    assert cron.last_tick(utc("2030-01-02T03:15:00+00:00")) == utc("2030-01-02T03:15:00+00:00")
    assert cron.last_tick(utc("2030-01-02T03:29:59.5+00:00")) == utc("2030-01-02T03:15:00+00:00")
    yearly = entry(cron="@yearly", timezone="Europe/Paris")
    assert yearly.last_tick(T0) == utc("2030-01-01T00:00:00+01:00")


def test_interval_and_grace() -> None:
    assert entry(every=timedelta(seconds=5)).interval(T0) == timedelta(seconds=5)
    assert entry(cron="*/15 * * * *").interval(T0) == timedelta(minutes=15)
    assert entry(cron="0 9 * * 1-5").interval(utc("2030-01-04T12:00:00+00:00")) == timedelta(
        days=3
    )  # Friday 9:00 to Monday 9:00
    # the default grace is min(interval, 10 min); a given grace is kept as given
    assert entry(every=SECOND).grace_at(T0) == SECOND
    assert entry(every=timedelta(minutes=5)).grace_at(T0) == timedelta(minutes=5)
    assert entry(cron="@hourly").grace_at(T0) == DEFAULT_GRACE_MAX == timedelta(minutes=10)
    assert entry(cron="@daily", grace=HOUR).grace_at(T0) == HOUR
    assert entry(every=SECOND, grace=timedelta(0)).grace_at(T0) == timedelta(0)


def test_jitter_is_stable_per_tick_and_below_its_bound() -> None:
    p = entry(every=SECOND, jitter=timedelta(seconds=30))
    ticks = p.ticks_between(T0, T0 + timedelta(minutes=10))
    delays = [p.jitter_for(t) for t in ticks]
    assert all(0 <= d < 30 for d in delays)
    assert len(set(delays)) > len(delays) * 0.9  # spread, not one value
    assert max(delays) > 25
    assert min(delays) < 5
    # the same on every process: a new entry object with the same name agrees
    again = entry(every=SECOND, jitter=timedelta(seconds=30))
    assert [again.jitter_for(t) for t in ticks] == delays
    # another entry's ticks are delayed differently
    other = entry(name="other", every=SECOND, jitter=timedelta(seconds=30))
    assert [other.jitter_for(t) for t in ticks] != delays
    assert entry(every=SECOND).jitter_for(T0) == 0.0
    assert entry(every=SECOND, jitter=timedelta(0)).jitter_for(T0) == 0.0


def test_the_definition_fingerprint_changes_with_what_and_when() -> None:
    base = entry(cron="*/5 * * * *")
    assert base.definition() == entry(cron="*/5 * * * *").definition()
    for other in (
        entry(cron="*/10 * * * *"),
        entry(cron="*/5 * * * *", timezone="Europe/Paris"),
        entry(cron="*/5 * * * *", job=jobs.Record(token="another")),
        entry(cron="*/5 * * * *", options=pgqueue.JobOptions(queue="q")),
    ):
        assert other.definition() != base.definition()


# -- plan_ticks: the missed-tick policy ------------------------------------------------------------


def test_steady_state_acts_on_the_tick_just_due() -> None:
    p = entry(every=MINUTE)
    assert plan_ticks(p, T0, T0 + timedelta(seconds=30)) == ([], T0)
    due = T0 + MINUTE
    assert plan_ticks(p, T0, due) == ([(due, "scheduled")], due)
    assert plan_ticks(p, T0, due + LATE_AFTER) == ([(due, "scheduled")], due)


def test_default_policy_enqueues_only_the_newest_missed_tick_within_grace() -> None:
    p = entry(every=MINUTE)  # grace: one minute
    last = T0 - timedelta(minutes=30)  # down for half an hour
    now = T0 + timedelta(seconds=20)
    assert plan_ticks(p, last, now) == ([(T0, "late")], T0)
    # just within LATE_AFTER of its tick it is on time
    assert plan_ticks(p, last, T0 + timedelta(seconds=3)) == ([(T0, "scheduled")], T0)


def test_default_policy_passes_over_a_tick_older_than_its_grace() -> None:
    p = entry(cron="@hourly")  # grace: 10 minutes
    last = T0 - timedelta(hours=5)
    top = utc("2030-01-02T03:00:00+00:00")
    assert plan_ticks(p, last, top + timedelta(minutes=9)) == ([(top, "late")], top)
    planned, new_last = plan_ticks(p, last, top + timedelta(minutes=11))
    assert planned == []
    # the passed-over ticks are never acted on later either
    assert top <= new_last <= top + timedelta(minutes=11)
    assert plan_ticks(p, new_last, top + timedelta(minutes=30))[0] == []
    # an explicit grace widens the window
    wide = entry(cron="@hourly", grace=timedelta(minutes=30))
    assert plan_ticks(wide, last, top + timedelta(minutes=29)) == ([(top, "late")], top)
    assert plan_ticks(wide, last, top + timedelta(minutes=31))[0] == []


def test_backfill_enqueues_every_tick_of_its_window_oldest_first() -> None:
    p = entry(every=MINUTE, backfill=timedelta(minutes=5))
    now = T0 + timedelta(seconds=2)
    last = T0 - timedelta(hours=1)
    planned, new_last = plan_ticks(p, last, now)
    window = [T0 - timedelta(minutes=n) for n in (4, 3, 2, 1)]
    assert planned == [(t, "backfill") for t in window] + [(T0, "scheduled")]
    assert new_last == T0
    # the window's oldest edge is included; a tick just past it is not
    edge = plan_ticks(p, last, T0)[0]
    assert [t for t, _ in edge] == [T0 - timedelta(minutes=n) for n in (5, 4, 3, 2, 1, 0)]
    # when the newest tick is late too, it is a backfill as well
    late, _ = plan_ticks(p, last, T0 + timedelta(seconds=30))
    assert {how for _, how in late} == {"backfill"}
    assert len(late) == 5
    # the window never reaches back before the last tick acted on
    recent, _ = plan_ticks(p, T0 - timedelta(minutes=2), now)
    assert recent == [(T0 - MINUTE, "backfill"), (T0, "scheduled")]


def test_backfill_of_zero_acts_on_an_exactly_due_tick_only() -> None:
    p = entry(every=MINUTE, backfill=timedelta(0))
    assert plan_ticks(p, T0 - HOUR, T0) == ([(T0, "scheduled")], T0)
    assert plan_ticks(p, T0 - HOUR, T0 + SECOND)[0] == []


def test_a_new_entry_starting_now_acts_on_nothing_missed() -> None:
    # the scheduler starts a new entry's count at the time it is declared
    p = entry(every=SECOND, backfill=timedelta(days=1))
    now = T0 + timedelta(milliseconds=400)
    assert plan_ticks(p, now, now) == ([], now)
    assert plan_ticks(p, now, T0 + SECOND) == ([(T0 + SECOND, "scheduled")], T0 + SECOND)


# -- daylight-saving changes of real zones ---------------------------------------------------------

# (zone, the day clocks go forward, the day they go back) in 2026
DST = [
    ("Europe/Paris", "2026-03-29", "2026-10-25"),
    ("America/New_York", "2026-03-08", "2026-11-01"),
]


def local_days(zone: str, day: str, before: int, after: int) -> tuple[datetime, datetime]:
    """UTC instants of local midnight ``before`` days before ``day`` and ``after`` days after."""
    z = ZoneInfo(zone)
    midnight = datetime.fromisoformat(day).replace(tzinfo=z)
    return (midnight - timedelta(days=before)).astimezone(UTC), (
        midnight + timedelta(days=after)
    ).astimezone(UTC)


@pytest.mark.parametrize(("zone", "spring", "fall"), DST)
def test_a_daily_job_in_the_skipped_hour_runs_at_the_first_valid_instant(
    zone: str, spring: str, fall: str
) -> None:
    p = entry(cron="30 2 * * *", timezone=zone)
    start, end = local_days(zone, spring, 2, 3)
    local = [t.astimezone(ZoneInfo(zone)) for t in p.ticks_between(start, end)]
    assert [t.strftime("%m-%d %H:%M") for t in local] == [
        f"{(datetime.fromisoformat(spring) + timedelta(days=d)):%m-%d} {hm}"
        for d, hm in [(-2, "02:30"), (-1, "02:30"), (0, "03:00"), (1, "02:30"), (2, "02:30")]
    ]
    (fired,) = [t for t in local if t.date().isoformat() == spring]
    # 02:30 does not exist that day: the job runs once, at 03:00, the first valid instant
    assert fired.hour == 3
    assert fired.minute == 0
    assert fired.utcoffset() != local[0].utcoffset()
    # in real time: 24 h between ordinary days, 23 h 30 on either side of 03:00
    gaps = [b.astimezone(UTC) - a.astimezone(UTC) for a, b in itertools.pairwise(local)]
    half = timedelta(hours=23, minutes=30)
    assert gaps == [timedelta(hours=24), half, half, timedelta(hours=24)]


@pytest.mark.parametrize(("zone", "spring", "fall"), DST)
def test_a_daily_job_in_the_repeated_hour_runs_once(zone: str, spring: str, fall: str) -> None:
    for cron in ("30 2 * * *", "30 1 * * *"):  # the repeated hour: 2-3 in Paris, 1-2 in NY
        p = entry(cron=cron, timezone=zone)
        start, end = local_days(zone, fall, 2, 3)
        ticks = p.ticks_between(start, end)
        assert len(ticks) == 5, ticks  # one per day, the change day included
        local = [t.astimezone(ZoneInfo(zone)) for t in ticks]
        assert {t.strftime("%H:%M") for t in local} == {cron[3:4].zfill(2) + ":30"}
        assert [t.date().isoformat() for t in local].count(fall) == 1


@pytest.mark.parametrize(("zone", "spring", "fall"), DST)
@pytest.mark.parametrize("cron", ["0 * * * *", "*/30 * * * *", "@hourly"])
def test_sub_daily_ticks_are_distinct_instants_none_doubled_at_either_change(
    zone: str, spring: str, fall: str, cron: str
) -> None:
    p = entry(cron=cron, timezone=zone)
    step = timedelta(minutes=30) if cron.startswith("*/30") else HOUR
    for day in (spring, fall):
        start, end = local_days(zone, day, 0, 1)
        ticks = p.ticks_between(start, end)
        assert len(set(ticks)) == len(ticks)
        assert ticks == sorted(ticks)
        # every tick is one step of real time after the one before: none doubled, none missed,
        # the real day being 23 h (spring) or 25 h (fall) long
        assert all(b - a == step for a, b in itertools.pairwise(ticks)), ticks
        assert len(ticks) == (end - start) // step
        assert end - start == timedelta(hours=23 if day == spring else 25)


@pytest.mark.parametrize(("zone", "spring", "fall"), DST)
def test_last_tick_and_next_tick_agree_across_the_changes(
    zone: str, spring: str, fall: str
) -> None:
    for cron in ("*/30 * * * *", "30 2 * * *", "15 1 * * *"):
        p = entry(cron=cron, timezone=zone)
        for day in (spring, fall):
            start, end = local_days(zone, day, 1, 1)
            ticks = p.ticks_between(start - timedelta(days=1), end + timedelta(days=1))
            probe = start
            while probe < end:
                before = [t for t in ticks if t <= probe]
                assert p.last_tick(probe) == before[-1], (cron, probe)
                assert next(p.ticks_after(probe)) == ticks[len(before)], (cron, probe)
                assert next_tick(cron, zone, probe) == ticks[len(before)], (cron, probe)
                probe += timedelta(minutes=10, seconds=7)


def test_plan_ticks_across_the_fall_back_hour_enqueues_each_instant_once() -> None:
    zone = ZoneInfo("America/New_York")
    p = entry(cron="*/30 * * * *", timezone="America/New_York", backfill=timedelta(hours=3))
    midnight, _ = local_days("America/New_York", "2026-11-01", 0, 1)
    now = midnight + timedelta(hours=4)  # 03:00 EST, after 01:00-02:00 happened twice
    planned, last = plan_ticks(p, midnight, now)
    ticks = [t for t, _ in planned]
    assert len(ticks) == len(set(ticks))
    assert [t.astimezone(zone).strftime("%H:%M%z") for t in ticks] == [
        "01:00-0400",
        "01:30-0400",
        "01:00-0500",
        "01:30-0500",
        "02:00-0500",
        "02:30-0500",
        "03:00-0500",
    ]
    assert [how for _, how in planned] == ["backfill"] * 6 + ["scheduled"]
    assert last == now


# -- next_tick of stored schedules -----------------------------------------------------------------


def test_next_tick_of_stored_specs() -> None:
    assert next_tick("every 5s", "UTC", T0 + timedelta(seconds=3)) == T0 + timedelta(seconds=5)
    assert next_tick("every 5s", "UTC", T0) == T0 + timedelta(seconds=5)
    assert next_tick("every 1.5s", "UTC", T0) == T0 + timedelta(seconds=1.5)
    assert next_tick("*/15 * * * *", "UTC", T0) == utc("2030-01-02T03:15:00+00:00")
    assert next_tick("@hourly", "Europe/Paris", T0) == utc("2030-01-02T04:00:00+00:00")
    assert next_tick("0 9 * * *", "Asia/Tokyo", T0) == utc("2030-01-03T09:00:00+09:00")
    # the same as the entry that wrote the spec
    for p in (entry(every=timedelta(seconds=7)), entry(cron="@daily", timezone="Europe/Paris")):
        assert next_tick(p.spec, p.timezone, T0) == next(p.ticks_after(T0))


@pytest.mark.parametrize(
    ("schedule", "zone"),
    [
        ("garbage", "UTC"),
        ("every xs", "UTC"),
        ("every 0s", "UTC"),
        ("every -5s", "UTC"),
        ("every infs", "UTC"),
        ("every nans", "UTC"),
        ("every 1e300s", "UTC"),
        ("every 0.0000001s", "UTC"),
        ("61 * * * *", "UTC"),
        ("@reboot", "UTC"),
        ("* * * * *", "Mars/Olympus_Mons"),
        ("* * * * *", ""),
    ],
)
def test_next_tick_of_an_unreadable_spec_is_none(schedule: str, zone: str) -> None:
    assert next_tick(schedule, zone, T0) is None


def test_a_job_class_whose_own_options_are_unique_is_refused_at_start() -> None:
    import uuid
    from dataclasses import dataclass

    from pgqueue._sync.runtime.scheduler import Scheduler

    @dataclass
    class Once(pgqueue.Worker):
        kind = "test.once"
        job_options = pgqueue.JobOptions(unique=HOUR)

        def process(self, ctx: pgqueue.JobContext) -> None:
            pass

    registry = pgqueue.WorkerRegistry()
    registry.schedule(Periodic("once", Once(), every=HOUR))
    with pytest.raises(InvalidSchedule, match="its class's job_options included"):
        Scheduler(
            store=None,  # type: ignore[arg-type]
            entries=registry.periodic,
            registry=registry,
            settings=pgqueue.Settings(),
            config=pgqueue.RuntimeConfig(),
            instance_id=uuid.uuid4(),
            stopping=None,  # type: ignore[arg-type]
        )
