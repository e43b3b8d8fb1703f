"""Configuration shared by clients and workers, and the naming rules behind it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from .errors import ConfigurationError
from .names import check_identifier, validate_queue
from .options import JobOptions

__all__ = ["DEFAULT_MAX_PAYLOAD_BYTES", "Settings"]

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024

# PostgreSQL truncates identifiers at 63 bytes; the longest table suffix we append is
# "unique_locks" (12) plus index suffixes, so the prefix keeps room for them.
_MAX_PREFIX_LENGTH = 30


@dataclass(frozen=True)
class Settings:
    """Where pgqueue keeps its tables and how it treats jobs.

    ``schema`` and ``prefix`` place the tables (``public.pgqueue_jobs`` by default); several
    independent installations can share a database by using different values.
    ``max_payload_bytes`` caps the size of a job's JSON arguments. ``job_defaults`` supplies the
    options a job gets when neither the call nor the job class sets them.
    """

    schema: str = "public"
    prefix: str = "pgqueue_"
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    job_defaults: JobOptions = field(default_factory=JobOptions)

    def __post_init__(self) -> None:
        check_identifier("schema name", self.schema, 63)
        check_identifier("table prefix", self.prefix, _MAX_PREFIX_LENGTH)
        size = self.max_payload_bytes
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ConfigurationError(
                f"max_payload_bytes must be a positive number of bytes, got {size!r}"
            )
        # A blank default queue would send every job without an explicit queue nowhere.
        if self.job_defaults.queue is not None:
            validate_queue(self.job_defaults.queue)

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel that wakes this installation's workers."""
        # Channel names are identifiers: at most 63 bytes (all ASCII here). A longer name is
        # cut and given a digest, so two installations never share a channel.
        name = f"{self.prefix}jobs.{self.schema}"
        if len(name) <= 63:
            return name
        digest = hashlib.blake2b(name.encode(), digest_size=6).hexdigest()
        return f"{name[:50]}.{digest}"

    def advisory_key(self, purpose: str) -> int:
        """Return a stable signed 64-bit advisory-lock key for ``purpose`` in this installation.

        Keys depend on the schema and prefix so that two installations in one database never
        wait on each other's locks.
        """
        digest = hashlib.blake2b(
            f"pgqueue:{self.schema}:{self.prefix}:{purpose}".encode(), digest_size=8
        ).digest()
        return int.from_bytes(digest, "big", signed=True)
