"""A real PgBouncer in transaction pooling mode, started by the tests in front of the test server.

Debian's ``pgbouncer`` package (``.ci/run`` installs it). It runs as the ``postgres`` OS user
when the tests run as root (PgBouncer refuses root), on a free local port, with trust
authentication for the users of the test server, and forwards every database to the server
the tests use (``PGQUEUE_TEST_DSN``'s host and port).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

__all__ = ["PgBouncer", "missing_pgbouncer"]

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def missing_pgbouncer() -> str | None:
    """Why PgBouncer cannot be started here (None when it can)."""
    if os.access(BINARY, os.X_OK):
        return None
    return (
        f"{BINARY} not found: the tests through a transaction pooler need Debian's pgbouncer "
        "(apt-get install pgbouncer, as .ci/run does)"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PgBouncer:
    """One PgBouncer process: ``pool_mode = transaction``, ``url(...)`` to reach a database."""

    def __init__(self, server_dsn: str, pool_size: int = 20) -> None:
        missing = missing_pgbouncer()
        if missing:
            raise RuntimeError(missing)
        info = psycopg.conninfo.conninfo_to_dict(server_dsn)
        self.server_host = str(info.get("host", "127.0.0.1"))
        self.server_port = int(info.get("port", 5432))
        self.user = str(info.get("user", "postgres"))
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="pgqueue-pgbouncer-"))
        self.dir.chmod(0o777)  # the postgres OS user writes its log and pid file here
        self.log = self.dir / "pgbouncer.log"
        users = self.dir / "users.txt"
        users.write_text(f'"{self.user}" ""\n"postgres" ""\n"root" ""\n')
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={self.server_host} port={self.server_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {users}\n"
            "pool_mode = transaction\n"
            "max_client_conn = 1000\n"
            f"default_pool_size = {pool_size}\n"
            # idle server sessions go soon: the other tests of the run need the server's slots
            "server_idle_timeout = 10\n"
            # what psycopg and asyncpg may send at startup, which PgBouncer would refuse
            "ignore_startup_parameters = extra_float_digits,options,search_path\n"
            f"logfile = {self.log}\n"
            f"pidfile = {self.dir / 'pgbouncer.pid'}\n"
        )
        for path in (users, ini):
            path.chmod(0o644)
        as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
        self.proc = subprocess.Popen(
            [BINARY, *as_user, str(ini)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"PgBouncer exited at start:\n{self.read_log()}")
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.Error:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"PgBouncer did not answer:\n{self.read_log()}") from None
                time.sleep(0.1)

    def url(self, database: str, scheme: str = "postgresql") -> str:
        """A URL of ``database`` through the pooler."""
        return f"{scheme}://{self.user}@127.0.0.1:{self.port}/{database}"

    def read_log(self) -> str:
        """PgBouncer's log so far (for a failing test's message)."""
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"

    def close(self) -> None:
        """Stop PgBouncer and remove its files."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
