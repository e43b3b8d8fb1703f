"""pgqueue's ``$1, $2, ...`` placeholders rewritten for a SQLAlchemy dialect's DBAPI paramstyle.

Pure string work, the same on both sides, so written once (not generated). The driver sends the
result through ``exec_driver_sql``, so statements reach the database library as they would
without SQLAlchemy.
"""

from __future__ import annotations

import functools
import re
from typing import Any, NamedTuple

from pgqueue.driver import Params
from pgqueue.errors import ConfigurationError

__all__ = ["Converted", "bind_params", "convert_placeholders"]

# "$" inside an identifier (a$1) is part of the name, not a placeholder.
_PLACEHOLDER_RE = re.compile(r"(?<![\w$])\$(\d+)")


class Converted(NamedTuple):
    """A statement rewritten for one DBAPI paramstyle, and how to lay out its parameters.

    ``shape`` is ``"tuple"`` (the parameters as given), ``"dict"`` (``{"p1": $1, ...}``) or
    ``"order"`` (a tuple of the parameters at the 0-based indexes in ``order``, one per
    placeholder, repeats included).
    """

    sql: str
    shape: str
    order: tuple[int, ...] = ()


@functools.lru_cache(maxsize=1024)
def convert_placeholders(sql: str, paramstyle: str) -> Converted:
    """Rewrite ``$1, $2, ...`` placeholders of ``sql`` into DBAPI ``paramstyle`` (cached).

    ``numeric_dollar`` is PostgreSQL's own style and passes through; ``pyformat`` gives
    ``%(p1)s``, ``format`` ``%s``, ``named`` ``:p1``, ``numeric`` ``:1`` and ``qmark`` ``?``.
    In the ``%`` styles a literal ``%`` is doubled. The statement must not contain ``$n``
    inside string literals (pgqueue's never do).
    """
    if paramstyle == "numeric_dollar":
        return Converted(sql, "tuple")
    if paramstyle in ("pyformat", "format"):
        sql = sql.replace("%", "%%")
    order: list[int] = []

    def colon(match: re.Match[str], text: str) -> str:
        # ":" right before the placeholder (an array slice a[1:$2]) must not make a "::" cast.
        return " " + text if match.start() > 0 and match.string[match.start() - 1] == ":" else text

    def replace(match: re.Match[str]) -> str:
        n = int(match[1])
        if n < 1:
            raise ConfigurationError(f"invalid placeholder ${n} in {sql!r}")
        if paramstyle == "pyformat":
            return f"%(p{n})s"
        if paramstyle == "named":
            return colon(match, f":p{n}")
        if paramstyle == "numeric":
            return colon(match, f":{n}")
        order.append(n - 1)
        return "%s" if paramstyle == "format" else "?"

    if paramstyle not in ("pyformat", "format", "named", "numeric", "qmark"):
        raise ConfigurationError(f"unsupported DBAPI paramstyle {paramstyle!r}")
    converted = _PLACEHOLDER_RE.sub(replace, sql)
    if paramstyle in ("pyformat", "named"):
        return Converted(converted, "dict")
    if paramstyle == "numeric":
        return Converted(converted, "tuple")
    return Converted(converted, "order", tuple(order))


def bind_params(
    sql: str, params: Params, paramstyle: str
) -> tuple[str, tuple[Any, ...] | dict[str, Any]]:
    """Return ``sql`` and ``params`` laid out for a DBAPI of ``paramstyle``."""
    converted = convert_placeholders(sql, paramstyle)
    if converted.shape == "dict":
        return converted.sql, {f"p{i}": value for i, value in enumerate(params, 1)}
    if converted.shape == "order":
        try:
            return converted.sql, tuple(params[i] for i in converted.order)
        except IndexError:
            raise ConfigurationError(
                f"the statement uses ${max(converted.order) + 1} but only {len(params)} "
                "parameters were given"
            ) from None
    return converted.sql, tuple(params)
