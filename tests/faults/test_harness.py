"""The suite's own checks can fail: the duplicate-run check, fed synthetic runs and faults."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.faults.harness import OUTCOME_WRITE, START_SLACK, Fault, Run, unexcused_reruns

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
VICTIM, OTHER = 101, 202


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def rerun(pid: int, started: float, returned: float | None) -> list[Run]:
    """A job's two runs: the one checked, then a later one in another process."""
    return [
        Run(1, pid, at(started), None if returned is None else at(returned)),
        Run(1, OTHER, at(100), at(101)),
    ]


EXCUSED = [
    # killed while its code ran
    pytest.param(
        rerun(VICTIM, 10, None), [Fault(at(12), "SIGKILL", VICTIM, fatal=True)], id="kill"
    ),
    # stopped while its code ran; it returned after it was resumed
    pytest.param(rerun(VICTIM, 10, 30), [Fault(at(12), "SIGSTOP", VICTIM)], id="stop"),
    # every process hit while it ran
    pytest.param(rerun(VICTIM, 10, 13), [Fault(at(12), "backends", None)], id="all"),
    # killed after its code returned, before its outcome could be written
    pytest.param(
        rerun(VICTIM, 10, 12),
        [Fault(at(12) + OUTCOME_WRITE, "SIGKILL", VICTIM, fatal=True)],
        id="kill-before-outcome",
    ),
    # the fault just before the run's start row was stamped
    pytest.param(
        rerun(VICTIM, 10, None), [Fault(at(10) - START_SLACK, "SIGKILL", VICTIM)], id="slack"
    ),
]

UNEXCUSED = [
    # no fault at all
    pytest.param(rerun(VICTIM, 10, 11), [], id="none"),
    # a fault in another process
    pytest.param(rerun(VICTIM, 10, None), [Fault(at(12), "SIGKILL", OTHER, True)], id="other"),
    # every process hit, long after the run had finished (the old check excused this)
    pytest.param(rerun(VICTIM, 10, 11), [Fault(at(50), "backends", None)], id="all-after"),
    # its process killed long after the run had finished (the old check excused this too)
    pytest.param(
        rerun(VICTIM, 10, 11), [Fault(at(50), "SIGKILL", VICTIM, fatal=True)], id="kill-after"
    ),
    # a fault before the run began
    pytest.param(rerun(VICTIM, 10, None), [Fault(at(5), "backends", None)], id="before"),
    # just outside the outcome window
    pytest.param(
        rerun(VICTIM, 10, 12),
        [Fault(at(12.01) + OUTCOME_WRITE, "SIGKILL", VICTIM, fatal=True)],
        id="outcome-window",
    ),
]


@pytest.mark.parametrize(("runs", "faults"), EXCUSED)
def test_a_rerun_is_excused_by_a_fault_during_the_earlier_run(
    runs: list[Run], faults: list[Fault]
) -> None:
    assert unexcused_reruns(runs, faults) == []


@pytest.mark.parametrize(("runs", "faults"), UNEXCUSED)
def test_a_rerun_is_reported_unless_a_fault_struck_during_the_earlier_run(
    runs: list[Run], faults: list[Fault]
) -> None:
    assert unexcused_reruns(runs, faults) == [runs[0]]


def test_only_earlier_runs_of_jobs_that_ran_again_are_checked() -> None:
    once = Run(2, VICTIM, at(10), at(11))
    runs = [*rerun(VICTIM, 10, 11), once, Run(3, OTHER, at(20), None)]
    # one fault, during the first job's later run: it excuses nothing earlier
    assert unexcused_reruns(runs, [Fault(at(100.5), "SIGKILL", OTHER, True)]) == [runs[0]]
