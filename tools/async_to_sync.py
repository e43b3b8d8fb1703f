#!/usr/bin/env python3
"""Generate the synchronous twin of pgqueue's hand-written asyncio code.

The asyncio code is the source of truth; the sync modules are produced from it by this
script, in the spirit of psycopg's ``tools/async_to_sync.py`` and the ``unasync`` package.
Unlike psycopg's tool (which round-trips through the AST) this one edits the token stream
of the source, so comments, blank lines and formatting survive; ``ruff format`` then
tidies the lines that became shorter.

What it does to each mapped source file (see ``FILE_RULES``):

* drops ``async`` before ``def``/``with``/``for`` and drops every ``await`` (in code);
* renames identifiers in code: the explicit ``RENAMES`` map first, then ``AsyncFoo`` ->
  ``Foo`` and ``async_foo`` -> ``sync_foo``. A string that is one identifier (an
  ``__all__`` entry) and the fields of an f-string are code too;
* never rewrites prose (comments, docstrings, the text of strings): there only the names
  of asyncio-side code change (``AsyncFoo``, the ``RENAMES``, and names quoted as code in
  backticks); words such as "await" or "asynchronous" and file paths
  (``tools/async_to_sync.py``) stay as written. Write prose that is true on both sides;
* fails when a ``RENAMES`` rule is used by no source (a stale rule hides typos);
* honours line directives written as comments in the asyncio source:

  - ``code  # sync: other code`` - the whole physical line becomes ``other code`` (with
    the line's indentation), emitted verbatim (no renaming). On a line of its own,
    ``# sync: code`` adds a line that exists only in the sync twin;
  - ``code  # async-only`` - the physical line is dropped from the sync twin;
  - ``# async-only: begin`` ... ``# async-only: end`` (each alone on its line) - the
    lines in between, delimiters included, are dropped;

* prepends a header saying the file is generated, then runs ``ruff format`` (the version
  pinned in pyproject.toml's ``dev`` extra, so that ``--check`` agrees on every machine).

Usage::

    python tools/async_to_sync.py          # (re)write the generated files
    python tools/async_to_sync.py --check  # exit 1 if any generated file is stale
"""

from __future__ import annotations

import argparse
import difflib
import io
import keyword
import re
import shutil
import subprocess
import sys
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Final

# The repository root is the parent of tools/, wherever the script is invoked from.
REPO_ROOT: Final = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class FileRule:
    """One source glob and how to derive each match's destination path.

    The destination is the source path (relative to the repository root) with the one path
    segment equal to ``old_segment`` replaced by ``new_segment``.
    """

    source_glob: str
    old_segment: str
    new_segment: str
    # File names matched by the glob that are hand-written on both sides.
    exclude: frozenset[str] = field(default_factory=frozenset)


# compat.py and __init__.py are hand-written on both sides: each side's compat module holds
# the primitives that genuinely differ (asyncio vs threading), and the package __init__
# files choose what they export.
_HAND_WRITTEN: Final = frozenset({"compat.py", "__init__.py"})

# Which asyncio sources have a generated sync twin. Extend this list to add more.
FILE_RULES: Final[tuple[FileRule, ...]] = (
    FileRule("pgqueue/_async/*.py", "_async", "_sync", _HAND_WRITTEN),
    FileRule("pgqueue/_async/runtime/*.py", "_async", "_sync"),
    FileRule("tests/_async/*.py", "_async", "_sync", _HAND_WRITTEN),
    FileRule("pgqueue_adapters/psycopg/_async.py", "_async.py", "_sync.py"),
    FileRule("pgqueue_adapters/psycopg/_async_library.py", "_async_library.py", "_sync_library.py"),
    FileRule("pgqueue_adapters/sqlalchemy/_async.py", "_async.py", "_sync.py"),
)

# Identifier renames that the general rules below do not cover (or would get wrong).
# They win over the general rules. ``Awaitable`` is deliberately absent: it has no
# sync counterpart that would type-check the same way, so the author handles it.
RENAMES: Final[dict[str, str]] = {
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "asynccontextmanager": "contextmanager",
    "AbstractAsyncContextManager": "AbstractContextManager",
    "AsyncIterator": "Iterator",
    "_async": "_sync",
    "create_async_engine": "create_engine",
}

# ``Async`` followed by an uppercase letter: AsyncClient -> Client. Lowercase after the
# prefix (Asynchronous, Asyncio) is an ordinary word and is left alone.
_ASYNC_PREFIX_RE: Final = re.compile(r"Async(?=[A-Z])")
_ASYNC_SNAKE_PREFIX: Final = "async_"

# An identifier-like word inside a string or comment: starts with a letter or underscore
# and is not glued to a preceding word character (so "x2Async" is one word, untouched).
_WORD_RE: Final = re.compile(r"\b[^\W\d]\w*")
# A string literal that holds one identifier and nothing else (an ``__all__`` entry, a name
# looked up with getattr) is code, and renamed like code.
_IDENTIFIER_RE: Final = re.compile(r"[^\W\d]\w*\Z")
# A string literal: optional prefix letters, then the quotes.
_STRING_RE: Final = re.compile(
    r"(?P<prefix>[A-Za-z]*)(?P<quote>\'\'\'|\"\"\"|\'|\")(?P<body>.*)(?P=quote)\Z", re.DOTALL
)

# Line directives. They are looked for in COMMENT tokens only, so a "#" inside a string
# can never trigger one.
_SYNC_DIRECTIVE_RE: Final = re.compile(r"#\s*sync:[ \t]*(?P<code>.*)$")
_ASYNC_ONLY_RE: Final = re.compile(r"#\s*async-only\s*$")
_BLOCK_BEGIN_RE: Final = re.compile(r"#\s*async-only:\s*begin\s*")
_BLOCK_END_RE: Final = re.compile(r"#\s*async-only:\s*end\s*")
# Anything that looks like an async-only directive but matches none of the forms above
# is a typo that would silently leave async code in the sync twin: reject it.
_ASYNC_ONLY_ANY_RE: Final = re.compile(r"#\s*async-only\b")

_DROPPED_BEFORE: Final = frozenset({"def", "with", "for"})

HEADER_MARKER: Final = "# WARNING: this file was generated by tools/async_to_sync.py"
_HEADER_TEMPLATE: Final = (
    HEADER_MARKER + " from {source}.\n"
    "# Do not edit it by hand: edit the source and run `make generate`.\n"
)

# --check prints at most this many diff lines in total, to keep CI logs readable.
_MAX_DIFF_LINES: Final = 200

# Python >= 3.12 splits f-strings into several tokens; 3.11 has one STRING token. The
# names are looked up dynamically so the script type-checks and runs on both.
_FSTRING_START: Final = getattr(tokenize, "FSTRING_START", -1)
_FSTRING_END: Final = getattr(tokenize, "FSTRING_END", -1)


class GenerationError(Exception):
    """A source file cannot be turned into its sync twin (bad directive, syntax error...)."""


# The RENAMES keys that a run met; a rule no source uses is an error (a stale rule hides typos).
_used_renames: set[str] = set()


def rename_identifier(name: str) -> str:
    """Return the sync spelling of identifier ``name`` (unchanged if no rule applies)."""
    # The explicit map is checked first so that it can override the general rules.
    if name in RENAMES:
        _used_renames.add(name)
        return RENAMES[name]
    if _ASYNC_PREFIX_RE.match(name):
        return name[len("Async") :]
    # Require something after the prefix: "async_" alone is not a meaningful name.
    if name.startswith(_ASYNC_SNAKE_PREFIX) and len(name) > len(_ASYNC_SNAKE_PREFIX):
        return "sync_" + name[len(_ASYNC_SNAKE_PREFIX) :]
    return name


# Code quoted in prose: ``literal``, `literal`, or a :role:`target`.
_CODE_SPAN_RE: Final = re.compile(r"``[^`]+``|`[^`]+`")


def _is_path(text: str, start: int, end: int) -> bool:
    """Whether the word at ``text[start:end]`` is part of a file path."""
    return (
        text[start - 1 : start] == "/" or text[end : end + 1] == "/" or text[end : end + 3] == ".py"
    )


def _rename_prose_word(match: re.Match[str]) -> str:
    """Rename one word of prose if it names code of the asyncio side, else keep it."""
    word = match.group()
    if _is_path(match.string, match.start(), match.end()):
        return word
    if word in RENAMES or _ASYNC_PREFIX_RE.match(word):
        return rename_identifier(word)
    return word


def _rename_quoted_word(match: re.Match[str]) -> str:
    """Rename one word of quoted code (``async_connect``) as code, unless it is a path."""
    word = match.group()
    return word if _is_path(match.string, match.start(), match.end()) else rename_identifier(word)


def rename_text(text: str) -> str:
    """Rename the code named in prose (a comment, or the text of a string literal).

    Prose is kept as written: only words that name code of the asyncio side change: names
    with the ``Async`` prefix (``AsyncClient`` -> ``Client``), the explicit ``RENAMES`` (such
    as ``_async`` in a dotted module path) and any name quoted as code (``async_connect``).
    Ordinary words, ``await``/``async`` and file paths stay as written, so write text that
    reads true on both sides (or use a ``# sync:`` directive).
    """
    out: list[str] = []
    last = 0
    for span in _CODE_SPAN_RE.finditer(text):
        out.append(_WORD_RE.sub(_rename_prose_word, text[last : span.start()]))
        out.append(_WORD_RE.sub(_rename_quoted_word, span.group()))
        last = span.end()
    out.append(_WORD_RE.sub(_rename_prose_word, text[last:]))
    return "".join(out)


def _rename_code(code: str) -> str:
    return _WORD_RE.sub(lambda m: rename_identifier(m.group()), code)


def _rename_fstring_body(text: str) -> str:
    """Rename an f-string's text: its replacement fields as code, the rest as prose."""
    out: list[str] = []
    literal_start = field_start = depth = i = 0
    while i < len(text):
        if depth == 0:
            if text.startswith(("{{", "}}"), i):
                i += 2
                continue
            if text[i] == "{":
                out.append(rename_text(text[literal_start:i]) + "{")
                depth, field_start = 1, i + 1
        elif text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                out.append(_rename_code(text[field_start:i]) + "}")
                literal_start = i + 1
        i += 1
    out.append(rename_text(text[literal_start:]))
    return "".join(out)


def rename_string(token: str) -> str:
    """Rename a string literal: a lone identifier and f-string fields as code, the rest prose."""
    match = _STRING_RE.match(token)
    if match is None:  # pragma: no cover - every STRING token matches
        return rename_text(token)
    prefix, quote, body = match["prefix"], match["quote"], match["body"]
    if "f" in prefix.lower():
        new = _rename_fstring_body(body)
    elif _IDENTIFIER_RE.match(body):
        new = rename_identifier(body)
    else:
        new = rename_text(body)
    return f"{prefix}{quote}{new}{quote}"


@dataclass
class _Directives:
    """Line directives found in one source: physical line numbers are 1-based."""

    removed: set[int] = field(default_factory=set)
    replaced: dict[int, str] = field(default_factory=dict)


def _find_directives(
    tokens: Sequence[tokenize.TokenInfo], lines: Sequence[str], source_name: str
) -> _Directives:
    """Collect the ``# sync:`` / ``# async-only`` directives from the COMMENT tokens."""
    found = _Directives()
    block_start: int | None = None
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        row, col = tok.start
        where = f"{source_name}:{row}"
        alone = not lines[row - 1][:col].strip()
        text = tok.string

        if _BLOCK_BEGIN_RE.fullmatch(text) or _BLOCK_END_RE.fullmatch(text):
            # Block delimiters trailing code would make it unclear whether that line is in.
            if not alone:
                raise GenerationError(f"{where}: {text!r} must be alone on its line")
            if _BLOCK_BEGIN_RE.fullmatch(text):
                if block_start is not None:
                    raise GenerationError(
                        f"{where}: nested '# async-only: begin' "
                        f"(the block opened at line {block_start} is not closed)"
                    )
                block_start = row
            else:
                if block_start is None:
                    raise GenerationError(f"{where}: '# async-only: end' without a begin")
                found.removed.update(range(block_start, row + 1))
                block_start = None
            continue

        if block_start is not None:
            # Everything inside an async-only block goes away, directives included.
            continue

        sync_match = _SYNC_DIRECTIVE_RE.search(text)
        async_only = _ASYNC_ONLY_RE.search(text) is not None
        if sync_match and async_only:
            raise GenerationError(f"{where}: both '# sync:' and '# async-only' on one line")
        if sync_match:
            code = sync_match["code"].rstrip()
            if not code:
                raise GenerationError(
                    f"{where}: '# sync:' needs the replacement code "
                    "(use '# async-only' to drop a line)"
                )
            found.replaced[row] = code
        elif async_only:
            found.removed.add(row)
        elif _ASYNC_ONLY_ANY_RE.search(text):
            raise GenerationError(f"{where}: unrecognised async-only directive {text!r}")

    if block_start is not None:
        raise GenerationError(f"{source_name}:{block_start}: '# async-only: begin' is never ended")
    return found


_OPENING: Final = frozenset({"(", "[", "{"})
_CLOSING: Final = frozenset({")", "]", "}"})
# Tokens that can end an expression: a "(" right after one of them is a call, not a group.
_ATOM_TYPES: Final = frozenset({tokenize.NAME, tokenize.NUMBER, tokenize.STRING})


def _is_atom_end(tok: tokenize.TokenInfo) -> bool:
    """Return True if ``tok`` can end an operand (so a following "(" would be a call)."""
    if tok.type == tokenize.NAME:
        return not keyword.iskeyword(tok.string) or tok.string in {"None", "True", "False"}
    return tok.type in _ATOM_TYPES or (tok.type == tokenize.OP and tok.string in _CLOSING)


def _await_group(tokens: Sequence[tokenize.TokenInfo], i: int) -> tuple[int, int] | None:
    """Return the indices of the parentheses around ``await <primary>`` at ``tokens[i]``.

    ``(await cur.fetchone())[0]`` would otherwise become ``(cur.fetchone())[0]``, which
    ruff format leaves alone. ``await`` only ever takes a primary (a name, attribute, call
    or subscript), so once it is gone the parentheses are redundant. Returns None unless the
    group is exactly that on one line: a call ``f(await x)``, a tuple, a generator
    expression or a conditional keeps its parentheses.
    """
    if i < 1 or tokens[i - 1].type != tokenize.OP or tokens[i - 1].string != "(":
        return None
    if i >= 2 and _is_atom_end(tokens[i - 2]):
        return None  # f(await x) or x[0](await y): call parentheses
    depth = 0
    for j in range(i + 1, len(tokens)):
        tok = tokens[j]
        if depth:
            # Inside nested brackets anything goes, line breaks included.
            if tok.type == tokenize.OP and tok.string in _OPENING:
                depth += 1
            elif tok.type == tokenize.OP and tok.string in _CLOSING:
                depth -= 1
            continue
        if tok.type == tokenize.OP:
            if tok.string == ")":
                return (i - 1, j)
            if tok.string in _OPENING:
                depth += 1
            elif tok.string != ".":
                return None  # an operator, comma, walrus...: more than a primary
        elif tok.type == tokenize.NAME and keyword.iskeyword(tok.string):
            return None  # "for", "if", "and"...: a comprehension or larger expression
        elif tok.type not in _ATOM_TYPES:
            return None  # a line break, comment or f-string part: keep it simple
    return None


def _token_edits(
    tokens: Sequence[tokenize.TokenInfo], line_offsets: Sequence[int], source: str
) -> list[tuple[int, int, str]]:
    """Compute ``(start, end, replacement)`` character edits for the token-level transform.

    Edits never touch a newline, so the output keeps the source's physical line numbering;
    the line directives rely on that.
    """

    def offset(pos: tuple[int, int]) -> int:
        """Convert a tokenize ``(row, col)`` position to an index into ``source``."""
        return line_offsets[pos[0] - 1] + pos[1]

    edits: list[tuple[int, int, str]] = []
    fstring_depth = 0
    fstring_start = 0
    for i, tok in enumerate(tokens):
        # On Python >= 3.12 treat a whole f-string as one piece of text, exactly like the
        # single STRING token that 3.11 produces, so both versions give the same output.
        if tok.type == _FSTRING_START:
            if fstring_depth == 0:
                fstring_start = offset(tok.start)
            fstring_depth += 1
            continue
        if tok.type == _FSTRING_END:
            fstring_depth -= 1
            if fstring_depth == 0:
                end = offset(tok.end)
                old = source[fstring_start:end]
                new = rename_string(old)
                if new != old:
                    edits.append((fstring_start, end, new))
            continue
        if fstring_depth:
            continue

        if tok.type == tokenize.NAME:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            drop = tok.string == "await" or (
                tok.string == "async"
                and nxt is not None
                and nxt.type == tokenize.NAME
                and nxt.string in _DROPPED_BEFORE
            )
            if drop:
                start, end = offset(tok.start), offset(tok.end)
                # Drop the whitespace up to the next token too ("await  f()" -> "f()"),
                # but never across a line break: that would shift the line numbering.
                if nxt is not None and nxt.start[0] == tok.end[0]:
                    end = offset(nxt.start)
                edits.append((start, end, ""))
                if tok.string == "await" and (group := _await_group(tokens, i)) is not None:
                    for k in group:
                        paren = tokens[k]
                        neighbour = tokens[k - 1] if paren.string == "(" else tokens[k + 1]
                        # "not(await x)" must become "not x", not "notx".
                        glued = neighbour.end == paren.start or neighbour.start == paren.end
                        keep_apart = glued and neighbour.type in _ATOM_TYPES
                        edits.append(
                            (offset(paren.start), offset(paren.end), " " if keep_apart else "")
                        )
            else:
                new = rename_identifier(tok.string)
                if new != tok.string:
                    edits.append((offset(tok.start), offset(tok.end), new))
        elif tok.type in (tokenize.STRING, tokenize.COMMENT):
            if tok.type == tokenize.STRING:
                new = rename_string(tok.string)
            else:
                new = rename_text(tok.string)
            if new != tok.string:
                edits.append((offset(tok.start), offset(tok.end), new))
    return edits


def _header(source_name: str) -> str:
    """Return the "generated file" header naming ``source_name``."""
    return _HEADER_TEMPLATE.format(source=source_name)


def transform(source: str, source_name: str) -> str:
    """Return the sync twin of asyncio ``source``, header included, before ``ruff format``.

    ``source_name`` is the source path relative to the repository root (as written in the
    header and in error messages). Raises :class:`GenerationError` on a malformed directive
    or on source that cannot be tokenized.
    """
    # Work on "\n"-only text that ends with a newline so that rows map 1:1 to lines.
    # str.splitlines() is not used: it also splits on \f, \v, ... which tokenize does not.
    source = source.replace("\r\n", "\n").replace("\r", "\n")
    if not source.endswith("\n"):
        source += "\n"
    lines = [line + "\n" for line in source.split("\n")[:-1]]
    line_offsets = [0]
    for line in lines:
        line_offsets.append(line_offsets[-1] + len(line))

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError) as exc:
        raise GenerationError(f"{source_name}: cannot tokenize: {exc}") from exc

    directives = _find_directives(tokens, lines, source_name)

    # Apply the edits from the end so earlier offsets stay valid.
    text = source
    for start, end, new in sorted(_token_edits(tokens, line_offsets, source), reverse=True):
        text = text[:start] + new + text[end:]
    new_lines = [line + "\n" for line in text.split("\n")[:-1]]
    if len(new_lines) != len(lines):  # pragma: no cover - would be a bug in _token_edits
        raise AssertionError(f"{source_name}: token edits changed the number of lines")

    out: list[str] = []
    for row, line in enumerate(new_lines, start=1):
        if row in directives.removed:
            continue
        if row in directives.replaced:
            # Keep the original indentation; the replacement code is used verbatim.
            original = lines[row - 1]
            indent = original[: len(original) - len(original.lstrip(" \t"))]
            out.append(indent + directives.replaced[row] + "\n")
        else:
            out.append(line)

    # The header goes first (a comment before the module docstring keeps it a docstring),
    # but after a shebang line, which only works on line 1.
    position = 1 if out and out[0].startswith("#!") else 0
    out.insert(position, _header(source_name))
    return "".join(out)


def find_ruff() -> Path:
    """Locate the ruff executable: next to the running interpreter first, then on PATH."""
    # The venv's ruff is the version pinned for the project; a global one may format
    # differently and make --check flap between machines.
    bindir = Path(sys.executable).parent
    for name in ("ruff", "ruff.exe"):
        candidate = bindir / name
        if candidate.is_file():
            return candidate
    found = shutil.which("ruff")
    if found is None:
        raise GenerationError("ruff not found (next to the Python interpreter or on PATH)")
    return Path(found)


def format_source(code: str, dest: str) -> str:
    """Format ``code`` with ``ruff format`` as if it were the file ``dest``.

    ``dest`` may be relative to the repository root. Passing it as ``--stdin-filename``
    makes ruff use the project configuration (line length, target version...) that
    applies to that path. Imports are deliberately not fixed: an unused import in a
    generated file is a bug to fix in the source with a directive.
    """
    dest_path = REPO_ROOT / dest  # an absolute dest stays as it is
    result = subprocess.run(
        [str(find_ruff()), "format", "--stdin-filename", str(dest_path), "-"],
        input=code,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    if result.returncode != 0:
        raise GenerationError(f"ruff format failed on {dest}:\n{result.stderr.strip()}")
    return result.stdout


def _destination(rel_source: PurePosixPath, rule: FileRule) -> PurePosixPath:
    """Return the destination of ``rel_source`` by swapping the rule's path segment."""
    parts = list(rel_source.parts)
    if parts.count(rule.old_segment) != 1:
        raise GenerationError(
            f"{rel_source}: expected exactly one path segment {rule.old_segment!r}"
        )
    parts[parts.index(rule.old_segment)] = rule.new_segment
    return PurePosixPath(*parts)


def plan(
    root: Path = REPO_ROOT, rules: Sequence[FileRule] = FILE_RULES
) -> list[tuple[PurePosixPath, PurePosixPath]]:
    """Return the ``(source, destination)`` pairs, relative to ``root``, that exist now."""
    pairs: list[tuple[PurePosixPath, PurePosixPath]] = []
    for rule in rules:
        # A glob that matches nothing (a tree without that package yet) is fine.
        for path in sorted(root.glob(rule.source_glob)):
            if path.name in rule.exclude or not path.is_file():
                continue
            rel = PurePosixPath(path.relative_to(root).as_posix())
            pairs.append((rel, _destination(rel, rule)))
    return pairs


def generate_file(root: Path, source: PurePosixPath, dest: PurePosixPath) -> str:
    """Return the final (formatted) content of ``dest`` generated from ``source``."""
    code = transform((root / source).read_text(encoding="utf-8"), str(source))
    # Catch an invalid result here, with the generated line in the message, rather than
    # through ruff's less specific parse error.
    try:
        compile(code, str(dest), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise GenerationError(
            f"{source}: the generated {dest} is not valid Python "
            f"(line {exc.lineno}: {(exc.text or '').strip()!r}): {exc.msg}. "
            "Fix the source, e.g. with a '# sync:' or '# async-only' directive."
        ) from exc
    return format_source(code, str(root / dest))


def is_generated(path: Path) -> bool:
    """Return True if the file at ``path`` carries this script's header."""
    try:
        with path.open(encoding="utf-8") as f:
            # The header is on line 1, or on line 2 after a shebang.
            head = [f.readline() for _ in range(2)]
    except (OSError, UnicodeDecodeError):
        return False
    return any(line.startswith(HEADER_MARKER) for line in head)


def find_orphans(
    root: Path, expected: set[PurePosixPath], rules: Sequence[FileRule] = FILE_RULES
) -> list[PurePosixPath]:
    """Return generated files under ``root`` whose source no longer exists.

    Only files carrying the header are considered, so hand-written files are never
    reported (or deleted).
    """
    orphans: set[PurePosixPath] = set()
    for rule in rules:
        dest_glob = _destination(PurePosixPath(rule.source_glob), rule)
        for path in root.glob(str(dest_glob)):
            rel = PurePosixPath(path.relative_to(root).as_posix())
            if rel in expected or path.name in rule.exclude or not path.is_file():
                continue
            if is_generated(path):
                orphans.add(rel)
    return sorted(orphans)


def _read(path: Path) -> str | None:
    """Return the text of ``path``, or None if it does not exist."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def run(
    root: Path = REPO_ROOT,
    *,
    check: bool = False,
    rules: Sequence[FileRule] = FILE_RULES,
    renames_must_be_used: bool = True,
) -> int:
    """Generate (or with ``check`` only verify) every mapped file under ``root``.

    Returns the process exit status: 0 when everything is (now) up to date, 1 when
    ``check`` found differences or a hand-written file is in a generated file's way.
    """
    status = 0
    generated: dict[PurePosixPath, str] = {}
    _used_renames.clear()
    for source, dest in plan(root, rules):
        generated[dest] = generate_file(root, source, dest)
    unused = sorted(set(RENAMES) - _used_renames)
    if unused and renames_must_be_used:
        raise GenerationError(
            f"rename rules that no source uses: {', '.join(map(repr, unused))}; remove them "
            "from RENAMES in tools/async_to_sync.py"
        )

    diff_budget = _MAX_DIFF_LINES
    for dest, content in generated.items():
        path = root / dest
        current = _read(path)
        if current == content:
            continue
        if current is not None and not is_generated(path):
            # Never clobber a hand-written file that happens to sit where a twin goes.
            print(
                f"refusing to overwrite {dest}: it lacks the generated-file header", file=sys.stderr
            )
            status = 1
            continue
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8", newline="\n")
            print(f"wrote {dest}")
            continue
        status = 1
        print(f"{'missing' if current is None else 'stale'}: {dest}")
        if diff_budget > 0:
            diff = list(
                difflib.unified_diff(
                    (current or "").splitlines(keepends=True),
                    content.splitlines(keepends=True),
                    fromfile=f"{dest} (on disk)",
                    tofile=f"{dest} (generated)",
                )
            )
            shown = diff[:diff_budget]
            sys.stdout.write(
                "".join(line if line.endswith("\n") else line + "\n" for line in shown)
            )
            diff_budget -= len(shown)
            if len(shown) < len(diff):
                print("... (diff truncated)")

    for orphan in find_orphans(root, set(generated), rules):
        if check:
            status = 1
            print(f"orphaned (source removed): {orphan}")
        else:
            (root / orphan).unlink()
            print(f"deleted {orphan}")

    if check:
        if status == 0:
            print("generated files are up to date")
        else:
            print("run `make generate` (python tools/async_to_sync.py) to update them")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run the generator; return the exit status."""
    parser = argparse.ArgumentParser(
        description="Generate pgqueue's sync modules from their asyncio sources."
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write anything; exit 1 if a generated file is missing or stale",
    )
    args = parser.parse_args(argv)
    try:
        return run(REPO_ROOT, check=args.check)
    except GenerationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
