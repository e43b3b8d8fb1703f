"""A griffe extension for the API reference: the docstrings' reST becomes Markdown.

pgqueue's docstrings name other objects the way Sphinx does (``:class:`Worker```,
``:meth:`~Client.add_job```); mkdocstrings renders Markdown, where those would show as written.
Each role becomes the name in backticks (``~`` keeps the last part, as Sphinx shows it), and
the ``::`` that introduces an indented example becomes ``:``.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

ROLE = re.compile(r":(?:class|meth|func|attr|data|mod|exc|obj|const):`(~?)([^`]+)`")
# reST's "text::" before an indented example: Markdown shows the indented lines as code already
LITERAL = re.compile(r"(\S)::$", re.M)


def _name(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


class SphinxRoles(Extension):
    """Rewrites the roles of every docstring griffe loads."""

    def on_object(self, *, obj: Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring, if it has one."""
        if obj.docstring is not None:
            obj.docstring.value = LITERAL.sub(r"\1:", ROLE.sub(_name, obj.docstring.value))
