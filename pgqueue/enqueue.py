"""Turning a job object plus options into the row that ``job_insert`` stores.

Shared by the sync and async clients. Everything here is checked *before* any SQL runs, so a
refused job never leaves anything behind.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .errors import JobSerializationError, PayloadTooLarge, UnknownJobKind
from .jobs import Worker, WorkerRegistry
from .names import validate_kind
from .options import JobOptionKwargs, JobOptions, ResolvedOptions
from .settings import Settings

__all__ = [
    "PreparedJob",
    "call_options",
    "encode_payload",
    "prepare",
]

# json.dumps escapes U+0000 as \u0000; PostgreSQL's jsonb refuses that escape. Only an odd number
# of backslashes before "u0000" is the escape itself ("\\u0000" is an escaped backslash + text).
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# One encoder for every payload: json.dumps with non-default arguments builds a new one per call.
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


@dataclass(slots=True)
class PreparedJob:
    """A validated job, ready for the store to insert (``store_codec.insert_params``)."""

    kind: str
    queue: str
    payload: str
    priority: int
    max_attempts: int
    run_at: datetime | None
    run_in: float | None
    key: str | None
    options: str
    unique_key: str | None = None
    unique_seconds: float | None = None

    @property
    def keyed(self) -> bool:
        """True when the job needs the conflict-aware insert (``job_id`` or ``unique``)."""
        return self.key is not None or self.unique_key is not None


def encode_payload(job: Worker, settings: Settings) -> str:
    """Serialize ``job``'s arguments to the JSON text stored in the ``payload`` column."""
    what = type(job).__qualname__
    try:
        args = job.to_payload()
    except RecursionError:
        raise _too_deep(what) from None
    try:
        text = _ENCODER.encode(args)
    except RecursionError:
        raise _too_deep(what) from None
    except (TypeError, ValueError) as exc:
        raise JobSerializationError(
            f"cannot store the arguments of {what}: {_culprit(args)}{exc}. Job arguments are "
            "stored as JSON: pass str, int, finite float, bool, None, list or dict values "
            "(convert datetimes, UUIDs, Decimals and sets yourself, or use a pydantic model)"
        ) from exc
    if "u0000" in text and _NUL_ESCAPE.search(text):
        raise JobSerializationError(
            f"cannot store the arguments of {what}: a string contains a NUL character (\\x00), "
            "which PostgreSQL cannot store in JSON; strip it or encode the value (e.g. base64)"
        )
    try:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise JobSerializationError(
            f"cannot store the arguments of {what}: a string holds a lone surrogate "
            f"({exc.object[exc.start : exc.end]!r}), which is not valid UTF-8; fix the text "
            "(e.g. decode bytes with errors='replace') before enqueueing"
        ) from exc
    if size > settings.max_payload_bytes:
        raise PayloadTooLarge(
            f"the arguments of {what} take {size} bytes as JSON, over the limit of "
            f"{settings.max_payload_bytes}: store large data elsewhere and pass a reference, or "
            "raise Settings(max_payload_bytes=...)"
        )
    return text


def _too_deep(what: str) -> JobSerializationError:
    return JobSerializationError(
        f"cannot store the arguments of {what}: they are nested too deeply to encode as JSON; "
        "flatten them, or store the data elsewhere and pass a reference"
    )


def _culprit(args: dict[str, Any]) -> str:
    for name, value in args.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            return f"field {name!r} ({type(value).__name__}): "
    return ""


@dataclass(frozen=True)
class _ClassTemplate:
    """What every job of one class shares when the call adds no options of its own."""

    kind: str
    resolved: ResolvedOptions
    options_json: str


# class -> (settings, class job_options, template): one entry per class, checked by identity,
# because hashing a Settings on every enqueue would cost as much as the work it saves.
_templates: dict[type[Worker], tuple[Settings, JobOptions | None, _ClassTemplate]] = {}


def _class_template(settings: Settings, cls: type[Worker]) -> _ClassTemplate:
    class_options = cls.job_options
    entry = _templates.get(cls)
    if entry is not None and entry[0] is settings and entry[1] is class_options:
        return entry[2]
    kind = validate_kind(cls.kind)
    resolved = settings.job_defaults.merged_with(class_options).resolve()
    template = _ClassTemplate(kind, resolved, _runtime_options(resolved))
    _templates[cls] = (settings, class_options, template)
    return template


def _runtime_options(resolved: ResolvedOptions) -> str:
    runtime: dict[str, Any] = {}
    if resolved.timeout_seconds is not None:
        runtime["timeout"] = resolved.timeout_seconds
    if resolved.backoff_seconds is not None:
        runtime["backoff"] = resolved.backoff_seconds
    if resolved.backoff_max_seconds is not None:
        runtime["backoff_max"] = resolved.backoff_max_seconds
    return json.dumps(runtime, separators=(",", ":"))


def prepare(
    job: Worker,
    options: JobOptions | None,
    *,
    settings: Settings,
    registry: WorkerRegistry | None,
) -> PreparedJob:
    """Validate ``job`` and merge its options: call options over class options over defaults."""
    if not isinstance(job, Worker):
        raise TypeError(
            f"add_job expects an instance of a pgqueue.Worker subclass, got {type(job).__name__}"
        )
    cls = type(job)
    # Resolving options is most of the Python cost of an enqueue; without call options the
    # result depends on the class alone, so it is worked out once per class.
    template = _class_template(settings, cls)
    kind = template.kind
    if registry is not None and kind not in registry:
        raise UnknownJobKind(
            f"kind {kind!r} ({cls.__qualname__}) is not in this client's registry: "
            "register it, or enqueue through a client without a registry"
        )
    if options is None:
        resolved, options_json = template.resolved, template.options_json
    else:
        merged = settings.job_defaults.merged_with(cls.job_options).merged_with(options)
        resolved = merged.resolve()
        options_json = _runtime_options(resolved)
    payload = encode_payload(job, settings)
    unique_key = None
    if resolved.unique_seconds is not None:
        unique_key = unique_key_for(resolved.queue, kind, payload)
    return PreparedJob(
        kind,
        resolved.queue,
        payload,
        resolved.priority,
        resolved.max_attempts,
        resolved.run_at,
        resolved.run_in_seconds,
        resolved.job_id,
        options_json,
        unique_key,
        resolved.unique_seconds,
    )


def unique_key_for(queue: str, kind: str, payload: str) -> str:
    """Return the ``unique=`` lock key: queue + kind + the arguments as canonical JSON, hashed.

    Canonical: keys sorted, no whitespace, so ``{"a": 1, "b": 2}`` and ``{"b": 2, "a": 1}``
    are the same job.
    """
    canonical = json.dumps(json.loads(payload), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"{queue}\x00{kind}\x00{canonical}".encode()).hexdigest()
    return f"{queue}:{kind}:{digest}"


def call_options(options: JobOptions | None, keywords: JobOptionKwargs) -> JobOptions | None:
    """Combine ``add_job``'s ``options`` argument with its keyword options (keywords win).

    ``None`` when the call sets no option at all (the common case, which ``prepare`` serves
    from its per-class cache).
    """
    if not keywords:
        return options
    return (options or JobOptions()).merged_with(JobOptions(**keywords))
