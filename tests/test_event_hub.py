"""The events hub on its own: subscription by type, unsubscribing, failing handlers."""

from __future__ import annotations

import logging
import threading
import uuid

import pytest

from pgqueue.events import (
    AdminAction,
    Event,
    EventHub,
    JobFinished,
    LeaderGained,
    LogSubscriber,
)

INSTANCE = uuid.uuid4()


def finished(outcome: str = "completed", **kw: object) -> JobFinished:
    return JobFinished(
        id=1,
        kind="k",
        queue="q",
        attempt=1,
        max_attempts=3,
        instance_id=INSTANCE,
        outcome=outcome,  # type: ignore[arg-type]
        duration=0.5,
        queue_wait=0.1,
        **kw,  # type: ignore[arg-type]
    )


def test_handlers_get_the_types_they_asked_for() -> None:
    hub = EventHub()
    everything: list[Event] = []
    only_finished: list[Event] = []
    hub.subscribe(everything.append)
    hub.subscribe(only_finished.append, JobFinished)
    assert hub.wants(JobFinished)
    assert hub.wants(LeaderGained)
    hub.emit(finished())
    hub.emit(LeaderGained(INSTANCE))
    assert [type(e) for e in everything] == [JobFinished, LeaderGained]
    assert [type(e) for e in only_finished] == [JobFinished]


def test_nobody_subscribed_means_nothing_is_wanted() -> None:
    hub = EventHub()
    assert not hub.wants(JobFinished)
    hub.emit(finished())  # nobody: nothing happens
    seen: list[Event] = []
    unsubscribe = hub.subscribe(seen.append, AdminAction)
    assert hub.wants(AdminAction)
    assert not hub.wants(JobFinished)
    unsubscribe()
    unsubscribe()  # twice: harmless
    assert not hub.wants(AdminAction)
    hub.emit(AdminAction("cancel", (1,)))
    assert seen == []


def test_a_failing_handler_is_logged_once_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hub = EventHub()
    seen: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("subscriber bug")

    hub.subscribe(broken)
    hub.subscribe(seen.append)
    with caplog.at_level(logging.ERROR, logger="pgqueue"):
        hub.emit(finished())
        hub.emit(finished())
    assert len(seen) == 2
    failures = [r for r in caplog.records if "event subscriber" in r.getMessage()]
    assert len(failures) == 1
    assert "subscriber bug" in (failures[0].exc_text or "")


def test_subscribe_refuses_what_is_not_an_event_class() -> None:
    hub = EventHub()
    with pytest.raises(TypeError, match="event classes"):
        hub.subscribe(print, int)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        hub.subscribe("not a function")  # type: ignore[arg-type]
    assert not hub.wants(JobFinished)


def test_subscribing_from_many_threads_loses_nobody() -> None:
    hub = EventHub()
    counts = [0] * 8

    def subscribe(i: int) -> None:
        def handler(event: Event) -> None:
            counts[i] += 1

        hub.subscribe(handler, JobFinished)

    threads = [threading.Thread(target=subscribe, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    hub.emit(finished())
    assert counts == [1] * 8


def test_log_subscriber_writes_the_worker_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    hub = EventHub()
    hub.subscribe(LogSubscriber(), *LogSubscriber.TYPES)
    with caplog.at_level(logging.DEBUG, logger="pgqueue"):
        hub.emit(finished("retry", delay=2.0, error="ValueError: boom", exc=ValueError("boom")))
        hub.emit(finished("failed", error="ValueError: boom"))
        hub.emit(finished("cancelled", error="cancelled while running"))
        hub.emit(finished("completed"))
        hub.emit(LeaderGained(INSTANCE))
    messages = [r.getMessage() for r in caplog.records]
    assert "job 1 (k) attempt 1/3 failed in 0.500s: ValueError: boom; retrying in 2.0s" in messages
    assert "job 1 (k) attempt 1/3 failed in 0.500s: ValueError: boom; giving up" in messages
    assert "job 1 (k) cancelled in 0.500s: cancelled while running" in messages
    assert "job 1 (k) attempt 1: complete in 0.500s" in messages
    assert f"instance {INSTANCE} is now the leader" in messages
    retry = next(r for r in caplog.records if "retrying" in r.getMessage())
    assert retry.levelno == logging.WARNING
    assert retry.exc_info is not None


def test_a_subclass_reaches_the_subscribers_of_its_base() -> None:
    from pgqueue.events import JobCompleted, JobFailed

    hub = EventHub()
    everything: list[Event] = []
    failures: list[Event] = []
    hub.subscribe(everything.append, JobFinished)
    hub.subscribe(failures.append, JobFailed)
    completed = JobCompleted(1, "k", "q", 1, 3, INSTANCE, "completed", 0.1, 0.0)
    failed = JobFailed(2, "k", "q", 1, 3, INSTANCE, "failed", 0.1, 0.0, error="boom")
    hub.emit(completed)
    hub.emit(failed)
    assert everything == [completed, failed]
    assert failures == [failed]


def test_a_handler_with_wants_is_asked_before_an_event_is_built(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from pgqueue.events import JobCompleted, JobFailed

    hub = EventHub()
    hub.subscribe(LogSubscriber(), *LogSubscriber.TYPES)
    logger = logging.getLogger("pgqueue")
    with caplog.at_level(logging.INFO, logger="pgqueue"):
        assert not hub.wants(JobCompleted)  # only logged at DEBUG
        assert hub.wants(JobFailed)
    with caplog.at_level(logging.DEBUG, logger="pgqueue"):
        assert logger.isEnabledFor(logging.DEBUG)
        assert hub.wants(JobCompleted)
    seen: list[Event] = []
    hub.subscribe(seen.append, JobCompleted)  # a handler without wants(): always built
    with caplog.at_level(logging.INFO, logger="pgqueue"):
        assert hub.wants(JobCompleted)
        hub.emit(JobCompleted(1, "k", "q", 1, 3, INSTANCE, "completed", 0.1, 0.0))
    assert len(seen) == 1
    assert not [r for r in caplog.records if "complete in" in r.getMessage()]  # not at INFO
