"""``pgqueue completion``: the script that gives the shell tab completion of ``pgqueue``.

click does the completing: the script calls ``pgqueue`` with ``$_PGQUEUE_COMPLETE`` set, and the
command answers with the commands, options and values that fit. This command only prints the
script, so that it can be installed without knowing that variable.
"""

from __future__ import annotations

import sys

import rich_click as click
from click.shell_completion import get_completion_class

__all__ = ["COMPLETE_VAR", "SHELLS", "completion"]

SHELLS = ("bash", "zsh", "fish")
"""The shells click completes in."""

COMPLETE_VAR = "_PGQUEUE_COMPLETE"
"""The variable that asks ``pgqueue`` for completions (click's name for a ``pgqueue`` program)."""


@click.command("completion", short_help="print the shell's tab completion script")
@click.argument(
    "shell", type=click.Choice(SHELLS), required=True, help=f"one of {', '.join(SHELLS)}"
)
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    r"""Print the script that completes pgqueue's commands, options and values in SHELL.

    \b
    bash, in ~/.bashrc:            eval "$(pgqueue completion bash)"
    zsh, in ~/.zshrc:              eval "$(pgqueue completion zsh)"
    fish, once:                    pgqueue completion fish > ~/.config/fish/completions/pgqueue.fish

    To keep a new shell from starting Python, write the script to a file once and source that.
    """
    complete = get_completion_class(shell)
    assert complete is not None  # every name in SHELLS has a class
    root = ctx.find_root().command
    # The same script as click prints for `_PGQUEUE_COMPLETE=<shell>_source pgqueue`.
    sys.stdout.write(complete(root, {}, "pgqueue", COMPLETE_VAR).source())
