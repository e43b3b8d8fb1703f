"""The backoff helper shared by the runtime's retry loops (pure: no database)."""

from __future__ import annotations

import pytest

from pgqueue.backoff import Backoff


def test_delays_double_up_to_the_cap() -> None:
    backoff = Backoff(0.1, 1.0)
    assert [backoff.next() for _ in range(7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1, 1, 1])


def test_reset_starts_again_from_the_initial_delay() -> None:
    backoff = Backoff(0.1, 5.0)
    for _ in range(4):
        backoff.next()
    assert backoff.upcoming == pytest.approx(1.6)
    backoff.reset()
    assert backoff.upcoming == 0.1
    assert backoff.next() == 0.1


def test_a_cap_below_the_initial_delay_wins() -> None:
    backoff = Backoff(0.1, 0.05)
    assert [backoff.next() for _ in range(3)] == [0.05, 0.05, 0.05]
    backoff.reset()
    assert backoff.upcoming == 0.05


def test_jitter_spreads_each_delay_within_its_fraction() -> None:
    backoff = Backoff(1.0, 4.0, jitter=0.2)
    for base in (1.0, 2.0, 4.0, 4.0):
        delays = []
        for _ in range(200):
            probe = Backoff(base, base, jitter=0.2)
            delays.append(probe.next())
        assert all(0.8 * base <= d <= 1.2 * base for d in delays)
        assert len(set(delays)) > 1  # actually spread
        assert 0.8 * base <= backoff.next() <= 1.2 * base
    # jitter never feeds into the doubling
    assert backoff.upcoming == 4.0


@pytest.mark.parametrize(
    ("initial", "cap", "jitter"),
    [(0, 1, 0), (0.1, 0, 0), (-1, 1, 0), (0.1, 1, 1.0), (0.1, 1, -0.1)],
)
def test_nonsense_is_refused(initial: float, cap: float, jitter: float) -> None:
    with pytest.raises(ValueError, match="backoff"):
        Backoff(initial, cap, jitter=jitter)
