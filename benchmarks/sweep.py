"""Each library's best drain concurrency in one process: the ``sweep`` scenario's results.

``python -m benchmarks.run --scenarios sweep`` drains the same number of jobs at each of
``--sweep-levels`` (10, 25, 50, 100, 200, 500 by default) for every subject, interleaved, and
writes them into its results file as measurements ``sweep_c<level>``. Every later run takes each
subject's best concurrency from the newest results file that holds a sweep (or from its own
sweep, when it runs one first), so the concurrency behind every "best" figure is reproducible
from a committed results file; ``CONSTANTS`` are the fallback when no sweep was ever run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

DEFAULT_LEVELS = (10, 25, 50, 100, 200, 500)

#: Fallbacks, from the sweeps of 1..1,000 done by hand before the sweep was a scenario.
CONSTANTS = {"pgqueuer": 500, "pgqueuer-pool": 500, "procrastinate": 50}
PGQUEUE_BEST = 100

_SWEEP_RE = re.compile(r"sweep_c(\d+)\Z")


def sweep_table(summary: dict[str, Any]) -> dict[str, dict[int, float]]:
    """subject -> {concurrency: median jobs/s} from a results file's summary."""
    table: dict[str, dict[int, float]] = {}
    for measurement, by_subject in summary.items():
        match = _SWEEP_RE.match(measurement)
        if match is None:
            continue
        for subject, keys in by_subject.items():
            table.setdefault(subject, {})[int(match.group(1))] = keys["jobs_per_s"]["median"]
    return table


def best_of(table: dict[str, dict[int, float]]) -> dict[str, int]:
    """Each subject's concurrency with the highest median (the lower one on a tie)."""
    return {s: max(levels, key=lambda c: (levels[c], -c)) for s, levels in table.items()}


def newest_sweep(exclude: Path | None = None) -> tuple[dict[str, int], str] | None:
    """The best concurrencies of the newest results file holding a sweep (quick runs and other
    benchmarks' files left out), and that file's path relative to the repository."""
    if not RESULTS.is_dir():
        return None
    for path in sorted(RESULTS.glob("*.json"), reverse=True):
        if "quick" in path.name or path == exclude:
            continue
        text = path.read_text()
        if '"sweep_c' not in text:
            continue
        table = sweep_table(json.loads(text).get("summary", {}))
        if table:
            return best_of(table), str(path.relative_to(ROOT))
    return None


class BestConcurrency:
    """Where each subject's best concurrency comes from: this run's sweep, the newest sweep
    in ``benchmarks/results/``, or ``CONSTANTS``."""

    def __init__(self) -> None:
        found = newest_sweep()
        #: subject -> (concurrency, where it comes from)
        self.best: dict[str, tuple[int, str]] = (
            {s: (c, found[1]) for s, c in found[0].items()} if found else {}
        )

    def use_sweep(self, summary: dict[str, Any]) -> None:
        """Take the sweep measured in this run (``summary`` as in a results file)."""
        for subject, c in best_of(sweep_table(summary)).items():
            self.best[subject] = (c, "this run's sweep")

    def _lookup(self, subject: str) -> tuple[int, str]:
        base = subject.partition("+")[0]  # pgqueue/<mode>+quiet: as pgqueue/<mode>
        for name in (subject, base):
            if name in self.best:
                return self.best[name]
        if subject.startswith(("pgqueue/", "pgqueue-base/")):
            return PGQUEUE_BEST, "constants"
        return CONSTANTS.get(subject, PGQUEUE_BEST), "constants"

    def __call__(self, subject: str) -> int:
        return self._lookup(subject)[0]

    def origin(self, subject: str) -> str:
        """Where ``subject``'s best concurrency comes from."""
        return self._lookup(subject)[1]
