"""The code examples of the docs, as ``tests/test_docs_examples.py`` runs them.

Every fenced block of a page is found, in page order, with what the line before it says about it.
How a page's examples run (write new examples this way):

- ``python`` blocks run in page order in one fresh Python process per page, as if typed into one
  module (``__name__ == "__main__"``): a block can use what an earlier block defined. Top-level
  ``await`` is allowed (one event loop per page). The process's working directory is a fresh
  folder on ``sys.path``, and so is the checkout (``import examples.wsgi_app`` works).
  ``$PGQUEUE_DSN`` and ``$DATABASE_URL`` name a fresh database of the page's own, and so does
  the docs' example URL ``postgresql://postgres@127.0.0.1/postgres`` wherever it appears in a
  block or a command (with a driver's scheme too: ``postgresql+asyncpg://...``). The pooler's
  example URL ``postgresql://postgres@127.0.0.1:6432/postgres`` (PgBouncer's port) leads to the
  same database through a real PgBouncer in transaction pooling mode (``tests/pgbouncer.py``),
  started for the pages that use it. Whatever the examples start is killed when the page ends.
- A block whose first line is a comment naming a file by a relative path (``# myapp/jobs.py``,
  ``# settings.toml``; not in a ``text`` or ``console`` block) is written to that path in the
  working directory instead of being run: later blocks import it, later commands use it.
- A block inside an HTML comment (``<!--`` ... ``-->``) runs like the others but the site does not
  show it: the setup a reader already has (a client, a job class).
- ``sh`` and ``console`` blocks: every ``pgqueue ...`` (or ``python -m pgqueue ...``) command is
  parsed by the real command line (the command and each option must exist); in a ``console``
  block only the lines after a ``$`` prompt are commands. With ``<!-- docs-test: run -->`` on the
  line before the block, its commands run for real, in order, in the page's working directory
  (``pip install`` lines excepted: the test's environment has pgqueue installed), and each must
  exit 0 within two minutes.
- ``<!-- docs-test: skip: why -->`` on the line before a ``python`` block: compiled, not run. Only
  for what this machine cannot do (a Kubernetes cluster); say why.
- ``json``, ``toml`` and ``yaml`` blocks must parse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLE_URL = "postgresql://postgres@127.0.0.1/postgres"
POOLER_URL = "postgresql://postgres@127.0.0.1:6432/postgres"

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
DIRECTIVE = re.compile(r"<!--\s*docs-test:\s*(?P<what>[\w-]+)\s*(?::\s*(?P<why>.*?))?\s*-->")
# a relative path only: never above the page's working directory
FILE_HEADER = re.compile(
    r"#\s*(?P<path>(?!/)(?![\w./-]*\.\./)[\w./-]+\.(?:py|toml|cfg|ini|txt|env|yaml|yml|json))\s*"
)


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    directive: str | None  # "run", "skip" or None
    reason: str | None
    hidden: bool

    @property
    def where(self) -> str:
        """``page.md:line``, for messages and tracebacks."""
        return f"{self.page}:{self.line}"

    @property
    def file(self) -> str | None:
        """The path this block is written to, when its first line names one."""
        if self.lang in ("text", "console"):  # output, or another library's code
            return None
        first = self.code.splitlines()[0] if self.code.strip() else ""
        match = FILE_HEADER.fullmatch(first)
        return match["path"] if match else None


def pages() -> list[Path]:
    """Every page of the site, the README and the examples' README."""
    return [*sorted(DOCS.rglob("*.md")), ROOT / "README.md", ROOT / "examples" / "README.md"]


def page_name(path: Path) -> str:
    """A page's name in test ids and messages: its path under docs/, or under the checkout."""
    return str(path.relative_to(DOCS if path.is_relative_to(DOCS) else ROOT))


def page_blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page, in order."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    in_comment = False
    i = 0
    while i < len(lines):
        line = lines[i]
        opening = FENCE.match(line)
        if opening and opening["lang"]:
            indent = len(opening["indent"])
            body: list[str] = []
            j = i + 1
            while j < len(lines) and not re.match(r"^[ \t]*```[ \t]*$", lines[j]):
                body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
                j += 1
            previous = next((p for p in reversed(lines[:i]) if p.strip()), "")
            directive = DIRECTIVE.search(previous)
            blocks.append(
                Block(
                    page=page_name(path),
                    line=i + 1,
                    lang=opening["lang"],
                    code="\n".join(body) + "\n",
                    directive=directive["what"] if directive else None,
                    reason=directive["why"] if directive else None,
                    hidden=in_comment,
                )
            )
            i = j + 1
            continue
        if not DIRECTIVE.search(line):
            # a comment that holds blocks: opened and not closed on this line
            if "<!--" in line and "-->" not in line.split("<!--")[-1]:
                in_comment = True
            elif "-->" in line:
                in_comment = False
        i += 1
    return blocks


def commands(block: Block) -> list[str]:
    """The commands of a ``sh`` or ``console`` block: continuations joined, prompts and comments
    removed (in a ``console`` block, only the lines after a ``$`` prompt)."""
    result: list[str] = []
    pending = ""
    for raw in block.code.splitlines():
        line = raw.rstrip()
        if not pending:
            if block.lang == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not line.strip() or line.lstrip().startswith("#"):
                continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        result.append((pending + line).strip())
        pending = ""
    if pending:
        result.append(pending.strip())
    return result
