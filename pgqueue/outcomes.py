"""Special ways for ``Worker.process`` to end a job other than returning or failing."""

from __future__ import annotations

from datetime import timedelta

__all__ = ["Cancel", "Discard", "JobOutcome", "Retry"]


class JobOutcome(Exception):
    """Base of the outcomes a job can raise to steer what happens next."""


class Retry(JobOutcome):
    """Run the job again after ``in_``; this attempt does not count against ``max_attempts``.

    Use it to wait for something that is not ready yet (a rate limit, a resource). A job that
    always raises ``Retry`` runs forever: bound it yourself (``ctx.attempt`` does not grow).
    """

    def __init__(self, in_: timedelta = timedelta(seconds=0), reason: str = "") -> None:
        super().__init__(reason or f"retry requested in {in_}")
        self.in_ = in_
        self.reason = reason


class Cancel(JobOutcome):
    """Stop the job for good with status ``cancelled`` (no more attempts)."""

    def __init__(self, reason: str = "cancelled by the job") -> None:
        super().__init__(reason)
        self.reason = reason


class Discard(JobOutcome):
    """Stop the job for good with status ``failed`` (no more attempts), e.g. for bad input."""

    def __init__(self, reason: str = "discarded by the job") -> None:
        super().__init__(reason)
        self.reason = reason
