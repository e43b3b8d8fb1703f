"""The documentation site, built and served for the browser: ``mkdocs build`` into a folder,
``http.server`` on a free local port (the site is static files)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from tests.browser import harness


def build(out: Path, *, strict: bool = True) -> None:
    """Build the site into ``out``; strictly (a warning fails it, as ``make docs``) by default."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict" if strict else "--no-strict",
            "--site-dir",
            str(out),
        ],
        cwd=harness.ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"mkdocs build failed:\n{done.stdout}\n{done.stderr}")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on 127.0.0.1; yield its base URL."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
