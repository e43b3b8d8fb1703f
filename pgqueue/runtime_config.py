"""Tunables of the worker runtime, with their defaults."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from .errors import ConfigurationError

__all__ = ["RuntimeConfig"]


@dataclass(frozen=True)
class RuntimeConfig:
    """How a running client claims, retries, heartbeats and maintains (all times in seconds).

    - ``poll_interval``: how often an idle queue checks for due jobs when no notification came
      (LISTEN/NOTIFY normally wakes it at once).
    - ``heartbeat_interval``: how often this process proves it is alive.
    - ``rescue_after``: a process silent for this long is presumed dead; the leader returns its
      jobs to pending (or failed if that was their last attempt). Keep it well above
      ``heartbeat_interval``.
    - ``leader_interval``: how often the leader runs its duties (and others try to lead).
    - ``retry_backoff`` / ``retry_backoff_max``: exponential backoff between failed attempts:
      ``min(retry_backoff * 2 ** (attempt - 1), retry_backoff_max)``, with +/-20 % jitter.
      Per job type and per job: ``JobOptions(retry_backoff=..., retry_backoff_max=...)``.
    - ``completed_retention`` / ``failed_retention``: how long finished jobs are kept (failed
      and cancelled ones longer, for inspection); removed by the leader in batches of
      ``cleanup_batch``.
    - ``shutdown_timeout``: default for ``stop()``: how long running jobs may finish.
    - ``listener_reconnect_max``: cap of the backoff between LISTEN reconnect attempts.
    - ``claim_retry_max``: cap of the backoff between attempts to claim jobs (and to hand
      back what a claim whose reply was lost took) while the database fails.
    - ``outcome_retry_max``: cap of the backoff between attempts to record how jobs ended
      while the database fails (the outcomes are kept meanwhile).
    - ``unknown_kind_interval``: how often a worker looks for due jobs of its queues whose kind
      no running worker registers (they would wait silently); it warns about each such kind
      when first found, then every 10 checks while they wait.
    - ``periodic``: whether this worker evaluates the registry's periodic entries (default
      yes; any number of workers may, each tick is still one job).
    """

    poll_interval: float = 1.0
    heartbeat_interval: float = 5.0
    rescue_after: float = 30.0
    leader_interval: float = 5.0
    retry_backoff: float = 2.0
    retry_backoff_max: float = 3600.0
    completed_retention: float = timedelta(days=1).total_seconds()
    failed_retention: float = timedelta(days=7).total_seconds()
    cleanup_batch: int = 1000
    shutdown_timeout: float = 30.0
    listener_reconnect_max: float = 5.0
    claim_retry_max: float = 5.0
    outcome_retry_max: float = 5.0
    unknown_kind_interval: float = 60.0
    periodic: bool = True

    def __post_init__(self) -> None:
        for name in (
            "poll_interval",
            "heartbeat_interval",
            "rescue_after",
            "leader_interval",
            "retry_backoff_max",
            "completed_retention",
            "failed_retention",
            "listener_reconnect_max",
            "claim_retry_max",
            "outcome_retry_max",
            "unknown_kind_interval",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigurationError(f"RuntimeConfig.{name} must be a positive number")
        if self.retry_backoff < 0 or self.shutdown_timeout < 0:
            raise ConfigurationError("retry_backoff and shutdown_timeout must not be negative")
        if self.cleanup_batch < 1:
            raise ConfigurationError("RuntimeConfig.cleanup_batch must be at least 1")
        if self.rescue_after <= 2 * self.heartbeat_interval:
            raise ConfigurationError(
                "RuntimeConfig.rescue_after must be more than twice heartbeat_interval, or live "
                "workers would be taken for dead"
            )
