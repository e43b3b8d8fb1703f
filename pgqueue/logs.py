"""Logging set-up for pgqueue's processes: plain text, or one JSON object per line.

pgqueue logs through the standard ``logging`` module (loggers ``pgqueue`` and, for jobs'
``ctx.logger``, ``pgqueue.job``), and every record about a job carries structured fields as
``extra``: ``job_id`` (the row id), ``job_kind``, ``job_queue``, ``job_attempt``,
``job_max_attempts``, ``outcome``, ``duration``, ``instance_id``, ``error``. :class:`JsonFormatter`
writes them, with the record's time, level, logger and message, as one JSON object per line;
:func:`configure_logging` is what ``pgqueue worker --log-format json`` uses, for programs that
run workers themselves.

The standard library does this in about forty lines, so pgqueue needs no logging dependency:
python-json-logger would add a package for the same, and structlog a logging model of its own
that an application may not use.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any, Literal

__all__ = ["TEXT_FORMAT", "JsonFormatter", "LogFormat", "configure_logging"]

LogFormat = Literal["text", "json"]
"""The log formats of :func:`configure_logging` and ``pgqueue worker --log-format``."""

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"
"""The text format of ``pgqueue worker``'s log lines."""

# The attributes every LogRecord has: whatever else a record carries came as ``extra``.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """Formats each record as one JSON object on one line.

    Keys: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, ``thread``, then every
    ``extra`` field of the record (``job_id``, ``job_kind``, ...), and ``traceback`` when the
    record has an exception. Values JSON cannot hold are written as their ``str()``.
    """

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as a JSON line."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "thread": record.threadName,
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["traceback"] = record.exc_text
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(
    level: int | str = "INFO", format: LogFormat = "text", stream: IO[str] | None = None
) -> logging.Handler:
    """Send pgqueue's log (and the root logger's) to ``stream`` (stderr) as ``format``.

    ``"json"`` writes one JSON object per line (:class:`JsonFormatter`), ``"text"`` the lines
    ``pgqueue worker`` prints. Replaces the root logger's handlers and sets its level; returns
    the handler. For a program that runs workers itself and has no logging set-up of its own.
    """
    if format not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', got {format!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler
