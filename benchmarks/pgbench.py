"""The pgbench references of SPEC §10: what PostgreSQL itself does with pgqueue's statements.

The bars on enqueue are ratios to pgbench running, on pgqueue's own table in a database
migrated by pgqueue, the very statement pgqueue sends:

- ``job_insert`` as ``pgqueue.queries`` renders it for the default installation (public
  schema, tables ``pgqueue_*``), its ``pg_notify`` included, with the values pgqueue binds for a
  ``bench.noop`` job (``store_codec.insert_params`` of ``enqueue.prepare``): kind, queue,
  priority, max_attempts, options and channel as pgqueue sends them, the payload ``{"i": N}``
  built from pgbench's ``\\set i random(...)`` and cast to jsonb as pgqueue's is. pgbench
  cannot bind a NULL, so the parameters pgqueue sends as NULL (run_at, run_in, key) are
  written as NULL literals; every other value is a bound parameter (``-M prepared``). One
  transaction per statement (autocommit), durable commits, ``-n`` (no vacuum), for a fixed
  time: 1 client (``-c 1 -j 1``) and 10 clients (``-c 10 -j 2``).
- The same at 1 client with pgqueue's secondary indexes dropped (only the primary key), and
  with each one dropped alone: what each index costs the hot path. And without the
  ``pg_notify`` (what the wake-up costs: a notification takes a server-wide lock at commit).
- The 1,000-row INSERT ceiling: one statement inserting 1,000 rows of the same shape
  (``INSERT ... SELECT ... generate_series``, ``jsonb_build_object('i', g)``, no NOTIFY) per
  transaction, 1 client; reported in rows/s.

Each run is checked: the table holds exactly the rows of the transactions pgbench reports,
and pgbench reports no failed transaction.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

PGBENCH = shutil.which("pgbench") or "/usr/bin/pgbench"

#: Rows per statement of the bulk reference.
BULK_ROWS = 1000

_PARAM_RE = re.compile(r"\$(\d+)")
_NOTIFY_RE = re.compile(r"pg_notify\(\s*\$\d+\s*,[^()]*\)(::text)?")


@dataclass(frozen=True)
class Script:
    """A pgbench script and the variables it is run with (``-D name=value``)."""

    text: str
    defines: dict[str, str]
    rows_per_tx: int


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _pgqueue_insert() -> tuple[str, tuple[Any, ...], int, str, str]:
    """pgqueue's ``job_insert`` for the default installation, the parameters it binds for a
    ``bench.noop`` job, which of them is the payload, and the payload's text around ``i``."""
    from pgqueue.enqueue import prepare
    from pgqueue.queries import queries_for
    from pgqueue.settings import Settings
    from pgqueue.store_codec import insert_params

    from .subjects.pgqueue_subject import NoopSync

    settings = Settings()
    sql = queries_for(settings).job_insert
    marker = 987654321
    job = prepare(NoopSync(i=marker), None, settings=settings, registry=None)
    params = insert_params(job, settings.channel)
    found = [k for k, v in enumerate(params) if isinstance(v, str) and str(marker) in v]
    if len(found) != 1:
        raise RuntimeError(
            f"cannot tell the payload among job_insert's parameters {params!r}: "
            "benchmarks/pgbench.py must learn the new way pgqueue binds it"
        )
    head, _, tail = params[found[0]].partition(str(marker))
    return sql, params, found[0], head, tail


def job_insert_script(*, notify: bool = True) -> Script:
    """pgqueue's single-job INSERT as a pgbench script (see the module's docstring)."""
    sql, params, payload_at, head, tail = _pgqueue_insert()
    body = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    if not notify:
        body, found = _NOTIFY_RE.subn("NULL::text", body)
        if found != 1:
            raise RuntimeError("job_insert has no pg_notify(...) this script knows how to remove")
    defines: dict[str, str] = {}

    def sub(match: re.Match[str]) -> str:
        k = int(match.group(1)) - 1
        if k >= len(params):
            raise RuntimeError(f"job_insert uses ${k + 1} but pgqueue binds {len(params)} values")
        if k == payload_at:
            return f"({_literal(head)} || CAST(:i AS text) || {_literal(tail)})"
        if params[k] is None:
            return "NULL"
        defines[f"p{k + 1}"] = str(params[k])
        return f":p{k + 1}"

    body = _PARAM_RE.sub(sub, body)
    text = f"\\set i random(1, 1000000000)\n{body};\n"
    return Script(text, defines, 1)


def bulk_insert_script(rows: int = BULK_ROWS) -> Script:
    """One INSERT of ``rows`` rows shaped as pgqueue's ``bench.noop`` jobs (no NOTIFY)."""
    sql, params, _, _, _ = _pgqueue_insert()
    table = re.search(r"INSERT INTO\s+(\S+)", sql)
    if table is None:
        raise RuntimeError("no INSERT INTO in job_insert")
    kind, queue, _, priority, max_attempts, *_ = params
    options = params[8]
    text = (
        "\\set base random(0, 1000000000)\n"
        f"INSERT INTO {table.group(1)} "
        "(kind, queue, payload, priority, max_attempts, scheduled_for, key, options) "
        f"SELECT {_literal(kind)}, {_literal(queue)}, jsonb_build_object('i', :base + g), "
        f"{_literal(priority)}, {_literal(max_attempts)}, now(), NULL, "
        f"{_literal(options)}::jsonb FROM generate_series(1, {rows}) AS g;\n"
    )
    return Script(text, {}, rows)


def secondary_indexes(dsn: str) -> list[str]:
    """The indexes of ``pgqueue_jobs`` other than its primary key, by name."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "WHERE x.indrelid = 'public.pgqueue_jobs'::regclass AND NOT x.indisprimary "
            "ORDER BY 1"
        ).fetchall()
    return [r[0] for r in rows]


def drop_indexes(dsn: str, names: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP INDEX public."{name}"')


def run(
    dsn: str, script: Script, *, clients: int, threads: int, seconds: float, tmp: Path
) -> dict[str, float]:
    """Run ``script`` with pgbench on the database at ``dsn``; return rows/s and what it did."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    path = tmp / "pgbench-script.sql"
    path.write_text(script.text)
    cmd = [PGBENCH, "-n", "-M", "prepared", "-c", str(clients), "-j", str(threads)]
    cmd += ["-T", str(max(1, round(seconds))), "-f", str(path)]
    for name, value in script.defines.items():
        cmd += ["-D", f"{name}={value}"]
    for flag, key in (("-h", "host"), ("-p", "port"), ("-U", "user")):
        if info.get(key):
            cmd += [flag, str(info[key])]
    cmd.append(str(info["dbname"]))
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    done = re.search(r"number of transactions actually processed: (\d+)", out.stdout)
    failed = re.search(r"number of failed transactions: (\d+)", out.stdout)
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out.stdout)
    if done is None or tps is None:
        raise RuntimeError(f"cannot read pgbench's output:\n{out.stdout}")
    if failed is not None and int(failed.group(1)):
        raise RuntimeError(f"pgbench: {failed.group(1)} failed transactions:\n{out.stdout}")
    transactions = int(done.group(1))
    with psycopg.connect(dsn, autocommit=True) as conn:
        (rows,) = conn.execute("SELECT count(*) FROM public.pgqueue_jobs").fetchone()  # type: ignore[misc]
    if rows != transactions * script.rows_per_tx:
        raise RuntimeError(
            f"pgbench reported {transactions} transactions of {script.rows_per_tx} rows, "
            f"the table holds {rows}"
        )
    return {
        "jobs_per_s": float(tps.group(1)) * script.rows_per_tx,
        "tps": float(tps.group(1)),
        "transactions": float(transactions),
    }
