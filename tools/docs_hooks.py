"""mkdocs hooks of the documentation site (mkdocs.yml: ``hooks``).

The pages hide the setup and checks of their executed examples in HTML comments
(tests/docs_examples.py). Python-Markdown's fenced-code extension would still render a fenced
block inside a comment, so the comments are removed before the page is rendered: only comments
that start a line (a comment inside a code example is part of the example).
"""

from __future__ import annotations

import re
from typing import Any

COMMENT = re.compile(r"^[ \t]*<!--.*?-->[ \t]*\n?", re.S | re.M)
FENCE = re.compile(r"^[ \t]*```", re.M)
BLOCK = re.compile(r"(^[ \t]*```[\w+-]*[ \t]*\n.*?^[ \t]*```[ \t]*$)", re.S | re.M)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Drop the page's line-leading HTML comments outside its code blocks."""
    parts = BLOCK.split(markdown)
    out: list[str] = []
    hidden = False
    for part in parts:
        if FENCE.match(part):
            if not hidden:
                out.append(part)
            continue
        text = part
        if hidden:  # a comment that opened before a fenced block: find where it closes
            end = text.find("-->")
            if end < 0:
                continue
            text = text[end + 3 :].lstrip("\n")
            hidden = False
        text = COMMENT.sub("", text)
        opened = re.search(r"^[ \t]*<!--(?!.*-->)", text, re.M)
        if opened and "-->" not in text[opened.start() :]:
            text = text[: opened.start()]
            hidden = True
        out.append(text)
    return "".join(out)
