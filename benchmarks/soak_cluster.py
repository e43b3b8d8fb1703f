"""The soak's PostgreSQL server: a cluster of its own, the run's database, the autovacuum log.

``benchmarks/soak.py`` runs in a database of its own, on a cluster it starts (``initdb`` under
/tmp, stock settings but for logging, autovacuum on) or on an existing server (``--dsn``).
Reading autovacuum runs from the server's log lives here too: only a cluster started here logs
every one of them. Nothing here adds load or takes samples.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from .admin_queries import _dsn_for

PG_BIN = Path("/usr/lib/postgresql/15/bin")
# Logging settings only (the server's behaviour stays stock): every autovacuum run is logged,
# with UTC timestamps that the report can place on the run's timeline.
CLUSTER_CONF = """
# benchmarks/soak.py: a throwaway cluster, stock settings but these
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{socket_dir}'
autovacuum = on
log_autovacuum_min_duration = 0
log_timezone = 'UTC'
log_line_prefix = '%m [%p] '
"""


# -- the server -------------------------------------------------------------------------------


def _as_postgres(command: list[str]) -> list[str]:
    """``command`` run as the ``postgres`` OS user when we are root (initdb refuses root)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Cluster:
    """A server to run on: an admin DSN, and the server log when the run started it."""

    admin_dsn: str
    log: Path | None
    own: bool


@contextlib.contextmanager
def own_cluster(pg_bin: Path, keep: bool) -> Iterator[Cluster]:
    """initdb a cluster under /tmp, start it on a free port; stop and remove it at the end."""
    base = Path(tempfile.mkdtemp(prefix="pgqueue-soak-"))
    data, log = base / "data", base / "postgresql.log"
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    started = False
    try:
        subprocess.run(
            _as_postgres(
                [
                    *(str(pg_bin / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"),
                    *("-E", "UTF8", "--locale=C", "--no-sync"),
                ]
            ),
            cwd=base,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        port = _free_port()
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(CLUSTER_CONF.format(port=port, socket_dir=base))
        # a session of its own: a Ctrl-C in the terminal reaches this process, which stops
        # the server in order, not the server directly
        subprocess.run(
            _as_postgres(
                [
                    *(str(pg_bin / "pg_ctl"), "start", "-w", "-t", "60", "-D", str(data)),
                    *("-l", str(log)),
                ]
            ),
            cwd=base,
            check=True,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        started = True
        print(f"PostgreSQL cluster in {data}, port {port}, log {log}", flush=True)
        yield Cluster(f"postgresql://postgres@127.0.0.1:{port}/postgres", log, True)
    except Exception:
        if log.exists():
            print(f"--- tail of {log}:\n{''.join(log.read_text().splitlines(True)[-30:])}")
        raise
    finally:
        if started:
            subprocess.run(
                _as_postgres([str(pg_bin / "pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(data)]),
                cwd=base,
                check=False,
                stdout=subprocess.DEVNULL,
            )
        if keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def database(cluster: Cluster, keep: bool) -> Iterator[str]:
    """A database of the run's own on ``cluster``; yield its DSN; drop it at the end."""
    name = f"pgqueue_soak_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(cluster.admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield _dsn_for(cluster.admin_dsn, name)
    finally:
        if keep:
            print(f"kept database {name}")
        else:
            with psycopg.connect(cluster.admin_dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


# -- the server log: autovacuum runs ------------------------------------------------------------

LOG_ENTRY = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) UTC \[\d+\] LOG:  "
    r'automatic (vacuum|analyze) of table "([^"]+)"'
)


def autovacuum_runs(log: Path, server_t0: datetime) -> list[dict[str, Any]]:
    """Every autovacuum and autoanalyze of a pgqueue table in the server log, parsed."""
    runs: list[dict[str, Any]] = []
    block: list[str] = []

    def flush() -> None:
        if not block:
            return
        m = LOG_ENTRY.match(block[0])
        text = "\n".join(block)
        block.clear()
        if m is None or "pgqueue_" not in m.group(3):
            return
        at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
        run: dict[str, Any] = {
            "elapsed": round((at - server_t0).total_seconds(), 1),
            "what": m.group(2),
            "table": m.group(3).rsplit(".", 1)[-1],
        }
        for key, pattern in (
            ("index_scans", r"index scans: (\d+)"),
            ("pages_removed", r"pages: (\d+) removed"),
            ("pages_remain", r"pages: \d+ removed, (\d+) remain"),
            ("tuples_removed", r"tuples: (\d+) removed"),
            ("tuples_remain", r"tuples: \d+ removed, (\d+) remain"),
            ("dead_not_removable", r"(\d+) are dead but not yet removable"),
            ("pages_scanned", r"remain, (\d+) scanned"),
            ("dead_items_removed", r"had (\d+) dead item identifiers removed"),
            ("seconds", r"elapsed: ([\d.]+) s"),
        ):
            found = re.search(pattern, text)
            if found:
                run[key] = float(found.group(1)) if key == "seconds" else int(found.group(1))
        indexes = re.findall(
            r'index "([^"]+)": pages: (\d+) in total, (\d+) newly deleted, (\d+) currently '
            r"deleted, (\d+) reusable",
            text,
        )
        if indexes:
            run["indexes"] = {
                name: {"pages": int(p), "newly_deleted": int(nd), "reusable": int(r)}
                for name, p, nd, _, r in indexes
            }
        runs.append(run)

    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("\t") and block:
            block.append(line)
        else:
            flush()
            if LOG_ENTRY.match(line):
                block.append(line)
    flush()
    return runs
