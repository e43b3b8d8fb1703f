"""Runs one page's examples in this process: ``python tests/docs_runner.py plan.json``.

The plan lists the page's steps in order: files to write, python blocks to run (in one namespace,
top-level ``await`` on one event loop) and commands to run. Started by
``tests/test_docs_examples.py`` in the page's working directory; see ``tests/docs_examples.py``.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import os
import shlex
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any


def main() -> int:
    """Run the plan named on the command line; 1 and the block's place on the first failure."""
    plan = json.loads(Path(sys.argv[1]).read_text())
    sys.path.insert(0, os.getcwd())
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    with asyncio.Runner() as runner:
        for step in plan["steps"]:
            where = step["where"]
            try:
                if step["kind"] == "file":
                    path = Path(step["file"]).resolve()
                    if not path.is_relative_to(Path.cwd()):  # never outside the page's folder
                        raise ValueError(f"{step['file']}: not a path under the working folder")
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(step["code"])
                elif step["kind"] == "python":
                    code = compile(
                        step["code"],
                        where,
                        "exec",
                        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                        dont_inherit=True,
                    )
                    result = eval(code, namespace)  # an exec, with top-level await allowed
                    if inspect.iscoroutine(result):
                        runner.run(result)
                elif step["kind"] == "command":
                    words = shlex.split(step["code"], comments=True)
                    if words[:2] == ["pip", "install"] or words[:3] == ["python", "-m", "pip"]:
                        continue  # the test's environment has pgqueue and its extras installed
                    done = subprocess.run(
                        step["code"],
                        shell=True,
                        executable="/bin/bash",
                        timeout=120,
                        capture_output=True,
                        text=True,
                        stdin=subprocess.DEVNULL,
                    )
                    sys.stdout.write(done.stdout)
                    if done.returncode != 0:
                        print(
                            f"{where}: `{step['code']}` exited {done.returncode}:\n{done.stderr}",
                            file=sys.stderr,
                        )
                        return 1
            except BaseException:
                print(f"{where}: the example failed:", file=sys.stderr)
                traceback.print_exc()
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
