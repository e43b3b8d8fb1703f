"""The runtime's pure parts (the cancel flag) and the store codec (claim rows, outcome batches)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime

from pgqueue.execution import CancelFlag, ClaimedJob, Outcome, is_coroutine_function
from pgqueue.store_codec import claim_decode, claim_kinds, finish_params


def test_cancel_flag_behaves_like_an_event() -> None:
    flag = CancelFlag()
    assert not flag.is_set()
    assert flag.wait(0.01) is False
    flag.set()
    assert flag.is_set()
    assert flag.wait(0) is True


def test_cancel_flag_wakes_a_waiting_thread() -> None:
    flag = CancelFlag()
    woke: list[float] = []

    def waiter() -> None:
        flag.wait(10)
        woke.append(time.monotonic())

    thread = threading.Thread(target=waiter)
    thread.start()
    deadline = time.monotonic() + 5
    while flag._event is None and time.monotonic() < deadline:  # the waiter made its event
        time.sleep(0.001)
    set_at = time.monotonic()
    flag.set()
    thread.join(5)
    assert woke
    assert woke[0] - set_at < 1


def test_cancel_flag_set_before_the_first_wait_is_seen() -> None:
    flag = CancelFlag()
    flag.set()
    assert flag.wait(10) is True


def test_claim_rows_split_off_the_next_due_row() -> None:
    now = datetime.now(UTC)
    job = (7, "k", '{"a":1}', 1, 25, now, "{}", 0, "key-7", None)
    claim = claim_decode([job, (None,) * 9 + (2.5,)], "lease", "q")
    assert [j.id for j in claim.jobs] == [7]
    assert claim.next_due == 2.5
    claim = claim_decode([job, (None,) * 10], "lease", "q")
    assert [j.id for j in claim.jobs] == [7]
    assert claim.next_due is None
    claim = claim_decode([job], "lease", "q")  # every slot filled: no next-due row
    assert [j.id for j in claim.jobs] == [7]
    assert claim.next_due is None
    (claimed,) = claim.jobs
    assert (claimed.id, claimed.queue, claimed.job_id, claimed.attempt) == (7, "q", "key-7", 1)
    assert (claimed.timeout, claimed.backoff, claimed.options_error) == (None, None, None)
    (with_options,) = claim_decode([(*job[:6], '{"timeout":1.5}', *job[7:])], "lease", "q").jobs
    assert with_options.timeout == 1.5


def test_finish_params_is_one_json_array_of_outcomes() -> None:
    def job(i: int) -> ClaimedJob:
        duration = None if i == 6 else float(i)  # cut off: no duration, the stored one stays
        return ClaimedJob(
            i, "k", "q", "{}", 1, 3, datetime.now(UTC), 0, uuid.uuid4(), duration=duration
        )

    batch = [
        (job(1), Outcome("complete")),
        (job(2), Outcome("retry", delay=4.0, message='bo"om\n\u00e9', error='{"a":1}')),
        (job(3), Outcome("fail", message="bad", error="{}")),
        (job(4), Outcome("cancel", message="stop", error="{}")),
        (job(5), Outcome("snooze", delay=9.0)),
        (job(6), Outcome("release")),
    ]
    (text,) = finish_params(batch)
    rows = json.loads(text)
    assert [r["id"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["lease"] for r in rows] == [str(j.lease) for j, _ in batch]
    assert [r["action"] for r in rows] == [
        "complete",
        "error",
        "error",
        "error",
        "snooze",
        "release",
    ]
    assert [r.get("status") for r in rows] == [None, "pending", "failed", "cancelled", None, None]
    assert [r["delay"] for r in rows] == [0.0, 4.0, 0.0, 0.0, 9.0, 0.0]
    assert [r.get("message") for r in rows] == [None, 'bo"om\n\u00e9', "bad", "stop", None, None]
    assert [r.get("error") for r in rows] == [None, '{"a":1}', "{}", "{}", None, None]
    assert [r.get("duration") for r in rows] == [1.0, 2.0, 3.0, 4.0, 5.0, None]


def test_claim_kinds_is_one_text() -> None:
    assert claim_kinds(["a.b", "c:d-e_f"]) == "a.b,c:d-e_f"


def test_coroutine_check_is_remembered_per_function() -> None:
    class A:
        async def process(self) -> None: ...

        def other(self) -> None: ...

    assert is_coroutine_function(A().process) is True
    assert is_coroutine_function(A().process) is True
    assert is_coroutine_function(A().other) is False
