"""The overview's two charts, drawn on the server as SVG: no script, no chart library.

:func:`charts` turns the per-minute counts of
:meth:`~pgqueue._async.store.AsyncStore.job_finished_per_minute` into the shapes the
``_charts.html`` template draws: the jobs finished per minute (stacked bars: completed, failed,
cancelled) and the failure rate per minute (a line: failed / (completed + failed), minutes where
nothing completed or failed left blank).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

__all__ = ["Bar", "Charts", "charts"]

WIDTH = 600
"""The charts' width in SVG units (they scale to their box)."""
HEIGHT = 120
"""The height of a chart's drawing area, in SVG units."""


@dataclass(frozen=True)
class Bar:
    """One minute of the throughput chart: where its three parts are drawn, and its numbers."""

    minute: datetime
    ago: int
    x: float
    width: float
    completed: int
    failed: int
    cancelled: int
    # y and height of each part, bottom up: completed, failed, cancelled
    parts: tuple[tuple[str, float, float], ...]

    @property
    def total(self) -> int:
        """The jobs that finished in this minute."""
        return self.completed + self.failed + self.cancelled

    @property
    def label(self) -> str:
        """The bar's tooltip: when, and what finished."""
        when = "this minute" if self.ago == 0 else f"{self.ago} min ago"
        return (
            f"{when}: {self.completed} completed, {self.failed} failed, {self.cancelled} cancelled"
        )


@dataclass(frozen=True)
class Charts:
    """Both charts of the overview, and the hour's totals."""

    minutes: int
    bars: list[Bar]
    peak: int  # the throughput chart's top (jobs per minute)
    rate_path: str  # SVG path of the failure rate line ('' when no minute has a rate)
    rate_points: list[tuple[float, float, str]]  # x, y, tooltip of each minute with a rate
    completed: int
    failed: int
    cancelled: int

    @property
    def finished(self) -> int:
        """Jobs finished in the whole span."""
        return self.completed + self.failed + self.cancelled

    @property
    def failure_rate(self) -> float | None:
        """Failed / (completed + failed) over the span; ``None`` when neither happened."""
        ended = self.completed + self.failed
        return self.failed / ended if ended else None

    @property
    def summary(self) -> str:
        """One sentence for screen readers and the charts' captions."""
        rate = self.failure_rate
        return (
            f"{self.finished} jobs finished in the last {self.minutes} minutes: "
            f"{self.completed} completed, {self.failed} failed, {self.cancelled} cancelled"
            + ("" if rate is None else f" ({rate:.1%} failed)")
        )


def _ceiling(value: int) -> int:
    """Round a chart's top up to 1, 2 or 5 times a power of ten (at least 1)."""
    top = 1
    while True:
        for step in (1, 2, 5):
            if value <= top * step:
                return top * step
        top *= 10


def charts(rows: Sequence[tuple[datetime, int, int, int]]) -> Charts:
    """Lay out the charts of ``rows``: (minute, completed, failed, cancelled), oldest first."""
    count = max(len(rows), 1)
    slot = WIDTH / count
    peak = _ceiling(max((c + f + x for _, c, f, x in rows), default=0))
    bars: list[Bar] = []
    points: list[tuple[float, float, str]] = []
    path: list[str] = []
    previous = False
    for i, (minute, completed, failed, cancelled) in enumerate(rows):
        ago = len(rows) - 1 - i
        x = i * slot
        base = float(HEIGHT)
        parts = []
        for name, n in (("completed", completed), ("failed", failed), ("cancelled", cancelled)):
            height = HEIGHT * n / peak
            if n:
                parts.append((name, round(base - height, 2), round(height, 2)))
            base -= height
        bars.append(
            Bar(
                minute,
                ago,
                round(x + slot * 0.1, 2),
                round(slot * 0.8, 2),
                completed,
                failed,
                cancelled,
                tuple(parts),
            )
        )
        ended = completed + failed
        if ended:
            rate = failed / ended
            cx, cy = round(x + slot / 2, 2), round(HEIGHT - HEIGHT * rate, 2)
            when = "this minute" if ago == 0 else f"{ago} min ago"
            points.append((cx, cy, f"{when}: {rate:.0%} failed ({failed} of {ended})"))
            path.append(f"{'L' if previous else 'M'}{cx} {cy}")
            previous = True
        else:
            previous = False
    return Charts(
        minutes=len(rows),
        bars=bars,
        peak=peak,
        rate_path=" ".join(path),
        rate_points=points,
        completed=sum(r[1] for r in rows),
        failed=sum(r[2] for r in rows),
        cancelled=sum(r[3] for r in rows),
    )
