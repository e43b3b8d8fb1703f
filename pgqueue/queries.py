"""Load the SQL shipped in ``pgqueue/sql/`` once, and render it for one installation.

SQL lives in ``.sql`` files. ``queries.sql`` (the runtime's and the enqueue paths'),
``admin.sql`` (the admin API's), ``periodic.sql`` (periodic jobs') and ``web.sql`` (the web
dashboard's) hold named statements (``-- name: job_insert``); ``migrations/NNNN_title.sql`` hold
one migration each. The only substitutions ever made are ``{{schema}}`` and
``{{<table or index>}}`` placeholders, replaced by identifiers that
:class:`~pgqueue.settings.Settings` has validated, then quoted, and ``{{> fragment}}``, replaced
by a ``-- fragment:`` block of the same files (a filter several statements share). User input
only ever travels as bound parameters.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from .settings import Settings

__all__ = [
    "Migration",
    "Queries",
    "migrations_for",
    "migrations_script",
    "migrations_statements",
    "queries_for",
    "split_statements",
]

_PLACEHOLDER_RE = re.compile(r"\{\{([a-z_]+)\}\}")
_NAME_RE = re.compile(r"^--\s*(name|fragment):\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_FRAGMENT_RE = re.compile(r"\{\{>\s*([a-z_]+)\s*\}\}")
# The files of named statements, read in this order; a name may be defined once in all.
STATEMENT_FILES = ("queries.sql", "admin.sql", "periodic.sql", "web.sql")
_MIGRATION_FILE_RE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql\Z")


def quote_ident(name: str) -> str:
    """Quote ``name`` as a PostgreSQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def render(sql: str, settings: Settings) -> str:
    """Replace identifier placeholders in ``sql`` for the installation described by ``settings``.

    ``{{schema}}`` becomes the quoted schema; any other ``{{x}}`` becomes the quoted
    ``prefix + x`` (a table, index or constraint name).
    """

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        return quote_ident(settings.schema if name == "schema" else settings.prefix + name)

    return _PLACEHOLDER_RE.sub(sub, sql)


@functools.cache
def _read(relative: str) -> str:
    return resources.files("pgqueue").joinpath("sql", relative).read_text(encoding="utf-8")


def _blocks(text: str) -> list[tuple[str, str, str]]:
    """Split a statements file into ``(kind, name, body)`` blocks (kind: name or fragment)."""
    marks = list(_NAME_RE.finditer(text))
    out = []
    for i, match in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = "\n".join(
            line for line in text[match.end() : end].strip().splitlines() if line.strip()
        ).rstrip()
        out.append((match.group(1), match.group(2), body))
    return out


@functools.cache
def _raw_queries() -> dict[str, str]:
    statements: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for file in STATEMENT_FILES:
        for kind, name, body in _blocks(_read(file)):
            if name in statements or name in fragments:
                raise RuntimeError(f"pgqueue/sql/{file}: {name!r} is defined twice")
            if kind == "fragment":
                fragments[name] = body.removesuffix(";")
            else:
                # Drop the trailing semicolon: some drivers refuse it in prepared statements.
                statements[name] = body.removesuffix(";")

    def expand(match: re.Match[str]) -> str:
        try:
            return fragments[match.group(1)]
        except KeyError:
            raise RuntimeError(f"pgqueue/sql: no fragment named {match.group(1)!r}") from None

    return {name: _FRAGMENT_RE.sub(expand, body) for name, body in statements.items()}


class Queries:
    """The named statements of the ``sql/*.sql`` files, rendered for one installation.

    One attribute per ``-- name:`` block, declared here so that mypy rejects a misspelt name;
    the declared names and the file's are checked against each other when this module is
    imported. Only the store (``pgqueue/_async/store.py``) names statements.
    """

    migration_lock: str
    schema_create: str
    schema_tables_drop: str
    schema_function_drop: str
    schema_drop_if_empty: str
    migration_table_create: str
    migration_applied_list: str
    migration_record: str
    migration_table_exists: str
    migration_current_version: str
    job_insert: str
    job_insert_keyed: str
    unique_lock_take: str
    job_by_key: str
    job_by_unique_key: str
    job_insert_many: str
    job_reserve_ids: str
    job_notify_queues: str
    job_claim: str
    job_finish_many: str
    job_release_unsure_claims: str
    job_get: str
    job_status_counts: str
    instance_register: str
    instance_heartbeat: str
    instance_unregister: str
    instance_resign: str
    instance_set_leader: str
    instance_lead_lock: str
    instance_lead: str
    instance_remove_stale: str
    job_rescue: str
    job_cleanup: str
    unique_lock_expire: str
    job_unknown_kinds: str
    job_claim_by_ids: str
    job_make_due: str
    # admin.sql
    job_list_id_desc: str
    job_list_id_asc: str
    job_list_due_asc: str
    job_list_due_desc: str
    job_filter_ids: str
    job_filter_count: str
    job_retry_many: str
    job_cancel_many: str
    job_delete_many: str
    job_purge: str
    job_purge_count: str
    job_stats: str
    job_running_list: str
    queue_list: str
    queue_known_names: str
    queue_pause: str
    queue_resume: str
    instance_list: str
    # periodic.sql
    cron_entry_declare: str
    cron_tick_enqueue: str
    cron_entry_touch: str
    cron_entry_list: str
    cron_entry_pause: str
    cron_entry_resume: str
    cron_tick_history: str
    cron_tick_cleanup: str
    cron_entry_trigger: str
    cron_entry_reclaim: str
    # web.sql
    session_read_limits: str
    job_finished_per_minute: str
    web_activity: str

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        for name, sql in _raw_queries().items():
            setattr(self, name, render(sql, settings))

    @staticmethod
    def names() -> list[str]:
        """Return the names of all statements."""
        return sorted(_STATEMENT_NAMES)

    def table(self, name: str) -> str:
        """Return the quoted, schema-qualified name of one of pgqueue's tables."""
        return f"{quote_ident(self.settings.schema)}.{quote_ident(self.settings.prefix + name)}"


_STATEMENT_NAMES = frozenset(n for n, t in Queries.__annotations__.items() if t == "str")


def _check_statement_names() -> None:
    """Fail at import when queries.sql and the attributes of :class:`Queries` disagree."""
    in_file = set(_raw_queries())
    if in_file != _STATEMENT_NAMES:
        only_file, only_class = in_file - _STATEMENT_NAMES, _STATEMENT_NAMES - in_file
        raise RuntimeError(
            "pgqueue/sql/{queries,admin,periodic,web}.sql and pgqueue.queries.Queries disagree: "
            "only in the files "
            f"{sorted(only_file)}, only declared {sorted(only_class)}"
        )


_check_statement_names()


@functools.cache
def queries_for(settings: Settings) -> Queries:
    """Return the (cached) rendered queries for ``settings``."""
    return Queries(settings)


@dataclass(frozen=True)
class Migration:
    """One schema version: its number, a short title and its rendered SQL."""

    version: int
    name: str
    sql: str


@functools.cache
def _raw_migrations() -> tuple[tuple[int, str, str], ...]:
    folder = resources.files("pgqueue").joinpath("sql", "migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_FILE_RE.match(entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort()
    versions = [v for v, _, _ in found]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"pgqueue migrations must be numbered 1..n without gaps: {versions}")
    return tuple(found)


@functools.cache
def migrations_for(settings: Settings) -> tuple[Migration, ...]:
    """Return every migration, in order, rendered for ``settings``."""
    return tuple(Migration(v, name, render(sql, settings)) for v, name, sql in _raw_migrations())


def migrations_script(
    settings: Settings, *, from_version: int = 0, transaction: bool = True
) -> str:
    """Return a SQL script that applies the migrations after ``from_version``.

    The script is what ``migrate()`` does, for people who apply schema changes with Alembic,
    Flyway or psql: one transaction, the same advisory lock, the same version bookkeeping, so
    ``migrate()`` later sees those versions as applied. With ``transaction=False`` the
    ``BEGIN``/``COMMIT`` pair is left out, for tools that wrap each migration themselves.
    """
    q = queries_for(settings)
    lock_key = settings.advisory_key("migrate")
    parts = [
        f"-- pgqueue schema for {quote_ident(settings.schema)}, prefix {settings.prefix!r}",
        *(["BEGIN;"] if transaction else []),
        f"SELECT pg_advisory_xact_lock({lock_key});",
        q.schema_create + ";",
        q.migration_table_create + ";",
    ]
    for m in migrations_for(settings):
        if m.version <= from_version:
            continue
        parts.append(f"-- migration {m.version}: {m.name}")
        parts.append(m.sql.strip())
        parts.append(_migration_record(settings, m) + ";")
    if transaction:
        parts.append("COMMIT;")
    return "\n".join(parts) + "\n"


def migrations_statements(settings: Settings, *, from_version: int = 0) -> list[str]:
    """Return what ``migrations_script(..., transaction=False)`` runs, one statement per item.

    For tools that take one statement at a time: SQLAlchemy's asyncpg dialect prepares every
    statement, and a prepared statement holds a single command, so neither ``exec_driver_sql``
    nor Alembic's ``op.execute`` can run the whole script there. Run the items in order, in one
    transaction. They end without a semicolon.
    """
    q = queries_for(settings)
    statements = [
        f"SELECT pg_advisory_xact_lock({settings.advisory_key('migrate')})",
        q.schema_create,
        q.migration_table_create,
    ]
    for m in migrations_for(settings):
        if m.version > from_version:
            statements += split_statements(m.sql)
            statements.append(_migration_record(settings, m))
    return statements


def _migration_record(settings: Settings, migration: Migration) -> str:
    return (
        f"INSERT INTO {queries_for(settings).table('migrations')} (version, name) "
        f"VALUES ({migration.version}, '{migration.name}') ON CONFLICT (version) DO NOTHING"
    )


# What can hold a semicolon that does not end a statement: comments, quoted strings and
# identifiers, dollar-quoted bodies. (Not E'' strings with backslash escapes: pgqueue's SQL
# has none.)
_SQL_TOKEN_RE = re.compile(
    r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|(\$[A-Za-z_]\w*\$|\$\$).*?\1|;",
    re.S,
)
_COMMENT_RE = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)


def split_statements(sql: str) -> list[str]:
    """Split a SQL script into its statements, without their semicolons.

    Semicolons inside comments, quotes and dollar-quoted bodies do not split. Comments between
    statements stay with the statement that follows; a part that is only comments is dropped.
    """
    statements = []
    start = 0
    for match in _SQL_TOKEN_RE.finditer(sql):
        if match.group() == ";":
            statements.append(sql[start : match.start()])
            start = match.end()
    statements.append(sql[start:])
    return [s.strip() for s in statements if _COMMENT_RE.sub("", s).strip()]
