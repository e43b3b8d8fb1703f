"""Every code example of the docs runs (issue 20): none can go stale.

How a page's blocks run, and how to write one that cannot (rare), is in ``tests/docs_examples.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
import yaml  # mkdocs' dependency

from pgqueue.cli import app as cli
from tests.docs_examples import (
    EXAMPLE_URL,
    POOLER_URL,
    ROOT,
    Block,
    commands,
    page_blocks,
    page_name,
    pages,
)

pytestmark = pytest.mark.timeout(600)
RUNNER = Path(__file__).resolve().parent / "docs_runner.py"
PAGES = {page_name(path): path for path in pages()}
EXAMPLE_URLS = re.compile(
    r"(postgresql(?:\+\w+)?)" + re.escape(EXAMPLE_URL.removeprefix("postgresql"))
)
POOLER_URLS = re.compile(
    r"(postgresql(?:\+\w+)?)" + re.escape(POOLER_URL.removeprefix("postgresql"))
)


def page_ids() -> list[str]:
    return [name for name, path in PAGES.items() if page_blocks(path)]


def steps(blocks: list[Block], url: str, pooled: str | None = None) -> list[dict[str, str]]:
    """The runner's plan for a page: files, python blocks and the commands of ``run`` blocks.

    ``pooled``: the page's database through the test's PgBouncer, for the pooler's example URL.
    """
    plan: list[dict[str, str]] = []
    for block in blocks:
        # the example URLs, with a driver's scheme too (postgresql+asyncpg://...)
        code = EXAMPLE_URLS.sub(lambda m: url.replace("postgresql", m[1], 1), block.code)
        if pooled is not None:
            code = POOLER_URLS.sub(lambda m: pooled.replace("postgresql", m[1], 1), code)
        if block.file:
            plan.append({"kind": "file", "where": block.where, "file": block.file, "code": code})
        elif block.lang == "python" and block.directive != "skip":
            plan.append({"kind": "python", "where": block.where, "code": code})
        elif block.lang in ("sh", "console") and block.directive == "run":
            for command in commands(dataclasses.replace(block, code=code)):
                plan.append({"kind": "command", "where": block.where, "code": command})
    return plan


@pytest.mark.parametrize("page", page_ids())
def test_the_examples_of_the_page_run(
    page: str, fresh_database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    blocks = page_blocks(PAGES[page])
    pooled = None
    if any(POOLER_URL in block.code for block in blocks):
        bouncer = request.getfixturevalue("pgbouncer")
        pooled = bouncer.url(fresh_database.rsplit("/", 1)[1])
    plan = steps(blocks, fresh_database, pooled)
    if not any(step["kind"] != "file" for step in plan):
        pytest.skip(f"{page} has no example to run")
    (tmp_path / ".plan.json").write_text(json.dumps({"steps": plan}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    env.update(
        PGQUEUE_DSN=fresh_database,
        DATABASE_URL=fresh_database,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join([str(tmp_path / "work"), str(ROOT)]),
    )
    work = tmp_path / "work"
    work.mkdir()
    # a session of its own: whatever the page's examples start (workers, servers) is killed with
    # it at the end, even when an example failed before stopping them
    runner = subprocess.Popen(
        [sys.executable, str(RUNNER), str(tmp_path / ".plan.json")],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        out, err = runner.communicate(timeout=540)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
    assert runner.returncode == 0, err[-6000:] + "\n" + out[-2000:]


def all_blocks() -> list[Block]:
    return [block for path in PAGES.values() for block in page_blocks(path)]


@pytest.mark.parametrize(
    "block",
    [b for b in all_blocks() if b.lang == "python" and b.directive == "skip"],
    ids=lambda b: b.where,
)
def test_a_skipped_example_compiles_and_says_why(block: Block) -> None:
    assert block.reason, f"{block.where}: `<!-- docs-test: skip: why -->` must say why"
    compile(block.code, block.where, "exec")


def simple_commands(command: str) -> list[list[str]]:
    """The words of each simple command in a shell line, cut at ``|``, ``&&``, ``;`` and ``>``."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    result: list[list[str]] = [[]]
    skip_next = False
    for word in lexer:
        if skip_next:
            skip_next = False
        elif word and set(word) <= set("|&;()"):
            result.append([])
        elif word and set(word) <= set("<>"):
            skip_next = True  # the redirection's target
        else:
            result[-1].append(word)
    return [words for words in result if words]


def pgqueue_args(words: list[str]) -> list[str] | None:
    """The arguments after ``pgqueue`` (or ``python -m pgqueue``), or None for other commands."""
    start = 0
    while start < len(words) and ("=" in words[start] or words[start] == "exec"):
        start += 1  # `VAR=value pgqueue ...`, `exec pgqueue ...`
    words = words[start:]
    if words[:1] == ["pgqueue"]:
        return words[1:]
    if words[:3] == ["python", "-m", "pgqueue"]:
        return words[3:]
    return None


def parse(args: list[str]) -> None:
    """Parse ``args`` as the command line would, down to the last subcommand, without running it."""
    command: click.Command = cli
    name = "pgqueue"
    parent: click.Context | None = None
    while True:
        try:
            ctx = command.make_context(name, list(args), parent=parent)
        except click.exceptions.Exit:
            return  # --help, --version
        if not isinstance(command, click.Group):
            return
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            return
        name, sub, args = command.resolve_command(ctx, rest)
        assert sub is not None, f"no command {name!r}"
        command, parent = sub, ctx


@pytest.mark.parametrize(
    "block", [b for b in all_blocks() if b.lang in ("sh", "console")], ids=lambda b: b.where
)
def test_the_commands_of_the_block_exist(block: Block) -> None:
    for command in commands(block):
        for words in simple_commands(command):
            args = pgqueue_args(words)
            if args is None:
                continue
            try:
                parse(args)
            except click.UsageError as exc:
                pytest.fail(f"{block.where}: `{command}`: {exc.format_message()}")


@pytest.mark.parametrize(
    "block",
    [b for b in all_blocks() if b.lang in ("json", "toml", "yaml")],
    ids=lambda b: b.where,
)
def test_a_data_example_parses(block: Block) -> None:
    if block.lang == "toml":
        tomllib.loads(block.code)
        return
    if block.lang == "yaml":  # Kubernetes manifests, Compose files: every document parses
        assert all(doc is not None for doc in yaml.safe_load_all(block.code)), block.where
        return
    try:
        json.loads(block.code)
    except json.JSONDecodeError:
        for line in block.code.splitlines():  # a log: one document a line
            if line.strip():
                json.loads(line)
