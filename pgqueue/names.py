"""Naming rules for schemas, table prefixes, queues and job kinds."""

from __future__ import annotations

import re

from .errors import InvalidName

__all__ = [
    "MAX_KIND_LENGTH",
    "MAX_QUEUE_LENGTH",
    "check_identifier",
    "check_text",
    "validate_kind",
    "validate_queue",
]

# Identifiers end up inside SQL text, so they are restricted to a set that needs no quoting
# (we still quote them) and that folds the same way on every PostgreSQL.
_IDENT_RE = re.compile(r"[a-z_][a-z0-9_]*\Z")
# Queue names and kinds travel as bound parameters, never as SQL, so they may be more liberal;
# the limits keep them readable in logs, NOTIFY payloads and the CLI.
_QUEUE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]*\Z")
_KIND_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]*\Z")
MAX_QUEUE_LENGTH = 64
MAX_KIND_LENGTH = 128


def check_identifier(what: str, value: str, max_length: int) -> str:
    """Return ``value`` if it is a valid lowercase SQL identifier, else raise InvalidName."""
    if not isinstance(value, str) or not _IDENT_RE.match(value) or len(value) > max_length:
        raise InvalidName(
            f"invalid {what} {value!r}: use 1 to {max_length} lowercase letters, digits and "
            "underscores, starting with a letter or underscore"
        )
    return value


def check_text(what: str, value: str) -> str:
    """Return ``value`` if PostgreSQL can store it as ``text``, else raise ``ValueError``.

    PostgreSQL text holds neither NUL characters nor lone surrogates (which are not UTF-8).
    """
    if "\x00" in value:
        raise ValueError(f"{what} must not contain a NUL character (\\x00), got {value!r}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"{what} must be valid Unicode text: it holds a lone surrogate "
                f"({exc.object[exc.start : exc.end]!r}), which is not UTF-8; got {value!r}"
            ) from None
    return value


def validate_queue(name: object) -> str:
    """Return ``name`` if it is a valid queue name, else raise :class:`InvalidName`."""
    if not isinstance(name, str) or not name:
        raise InvalidName(
            f"invalid queue name {name!r}: a queue name must be a non-empty string; "
            "leave the option unset to use the client's default queue"
        )
    if len(name) > MAX_QUEUE_LENGTH or not _QUEUE_RE.match(name):
        raise InvalidName(
            f"invalid queue name {name!r}: use up to {MAX_QUEUE_LENGTH} letters, digits and "
            "the characters '_', '.', ':', '-', not starting with a punctuation mark"
        )
    return name


def validate_kind(kind: object) -> str:
    """Return ``kind`` if it is a valid job kind, else raise :class:`InvalidName`."""
    if (
        not isinstance(kind, str)
        or not kind
        or len(kind) > MAX_KIND_LENGTH
        or not _KIND_RE.match(kind)
    ):
        raise InvalidName(
            f"invalid job kind {kind!r}: use up to {MAX_KIND_LENGTH} letters, digits and the "
            "characters '_', '.', ':', '-', starting with a letter or underscore"
        )
    return kind
