"""The real processes of the browser tests and of the screenshots: dashboard, worker, Chromium.

``pgqueue dashboard`` and ``pgqueue worker`` run as subprocesses on the database and schema
given; Chromium is Debian's (``/usr/bin/chromium`` and ``/usr/bin/chromedriver``, or
``$PGQUEUE_CHROMIUM`` and ``$PGQUEUE_CHROMEDRIVER``), headless, driven by Selenium, which is
given both paths so that Selenium Manager never tries to download a browser or a driver.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("PGQUEUE_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("PGQUEUE_CHROMEDRIVER", "/usr/bin/chromedriver"))
# Headless, and nothing that reaches out to the network (it is closed here: Chromium's own
# connections would only be refused, many at a time).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


def missing_browser() -> str | None:
    """Why the browser tests cannot run here (None when they can)."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return (
                f"{path} not found: the browser tests need Debian's {package} "
                "(apt-get install --no-install-recommends chromium chromium-driver, as .ci/run "
                "does)"
            )
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


def clean_env(dsn: str, schema: str, **extra: str) -> dict[str, str]:
    """The environment of a pgqueue subprocess: ours without PGQUEUE_*, then the database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    env.pop("DATABASE_URL", None)
    return {**env, "PGQUEUE_DSN": dsn, "PGQUEUE_SCHEMA": schema, **extra}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Process:
    """A subprocess whose output goes to a log file, stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args = args
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )

    def output(self) -> str:
        """What the process wrote so far."""
        return self.log.read_text(errors="replace")

    def check_alive(self) -> None:
        """Fail, with its output, if the process has exited."""
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"{' '.join(self.args[:4])} exited with {self.proc.returncode}:\n{self.output()}"
            )

    def stop(self, timeout: float = 20) -> int | None:
        """Stop the process gracefully (SIGTERM), or kill it after ``timeout`` seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


class Dashboard(Process):
    """``pgqueue dashboard`` on a free port of 127.0.0.1; ``url(path)`` addresses it."""

    def __init__(self, env: dict[str, str], log: Path, *options: str) -> None:
        self.port = free_port()
        super().__init__(
            [
                sys.executable,
                "-m",
                "pgqueue",
                "dashboard",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                *options,
            ],
            env,
            log,
        )
        self.base = f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "/") -> str:
        """The absolute URL of ``path`` on this server."""
        return self.base + path

    def wait_ready(self, timeout: float = 30) -> None:
        """Wait until the overview answers 200."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                with urllib.request.urlopen(self.url("/"), timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the dashboard did not answer in {timeout}s:\n{self.output()}")
            time.sleep(0.05)


def worker(env: dict[str, str], log: Path, registry: str, *options: str) -> Process:
    """``pgqueue worker <registry>`` with ``options``."""
    return Process([sys.executable, "-m", "pgqueue", "worker", registry, *options], env, log)


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A headless Chromium driven by Selenium, in a fresh profile removed afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    profile = Path(tempfile.mkdtemp(prefix="pgqueue-chromium-"))
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    service = Service(executable_path=str(CHROMEDRIVER), log_output=str(profile / "driver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def emulate(driver: Any, *, dark: bool = False, phone: bool = False) -> None:
    """Set the page's colour scheme (prefers-color-scheme) and a phone's viewport, or undo."""
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]},
    )
    if phone:
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True},
        )
    else:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def screenshot(driver: Any, path: Path, max_height: int = 2000) -> None:
    """Save the whole page (up to ``max_height`` CSS pixels) as a PNG at ``path``."""
    import base64

    metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    content = metrics["cssContentSize"]
    viewport = metrics["cssLayoutViewport"]
    clip = {
        "x": 0,
        "y": 0,
        "width": viewport["clientWidth"],
        "height": min(max(content["height"], viewport["clientHeight"]), max_height),
        "scale": 1,
    }
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {"format": "png", "captureBeyondViewport": True, "clip": clip},
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
