"""The admin benchmark's database: a year of history in a minute, by ``INSERT ... SELECT``.

``fill`` migrates a fresh database with pgqueue's own ``migrate()``, then writes the rows the
way pgqueue leaves them: finished jobs (about 97 % completed, 2 % failed with an error history
and tracebacks, 1 % cancelled) over the last week, oldest first, so that ids and times grow
together as they do in a live table; then pending jobs, about 80 % due now (a backlog) and 20 %
scheduled up to two days ahead, some of them waiting for a retry. Jobs are spread over five
queues and nine kinds, unevenly; payloads are 150-250 bytes of JSON with ids, an e-mail address,
a template name and a request id. ``setseed`` makes every run write the same rows.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

import pgqueue

# (queue, kind, weight in 100): the emails queue is the busiest, media the quietest.
KINDS = (
    ("emails", "emails.send", 28),
    ("emails", "emails.digest", 7),
    ("webhooks", "webhooks.deliver", 20),
    ("default", "reports.build", 12),
    ("default", "cache.warm", 18),
    ("billing", "billing.charge", 7),
    ("billing", "billing.refund", 3),
    ("media", "media.thumbnail", 4),
    ("media", "media.transcode", 1),
)
QUEUES = tuple(dict.fromkeys(q for q, _, _ in KINDS))
FAILED_SHARE = 0.02
CANCELLED_SHARE = 0.01
SCHEDULED_SHARE = 0.20  # of the pending jobs: due later
RETRYING_SHARE = 0.05  # of the pending jobs: waiting for their next attempt
USERS = 50_000  # payload user_id is 1..USERS

ERRORS = (
    "ConnectionError: timed out talking to smtp.example.com:587",
    "HTTPError: 503 Service Unavailable from https://hooks.example.net/ingest",
    "ValueError: invoice 2024-118734 has no billing address",
    "KeyError: 'template'",
    "TimeoutError: timed out after 300s",
)

# One statement per part; {jobs} is the quoted table, %(n)s and %(offset)s bound by psycopg.
_PICK = """
    WITH kinds AS (
        SELECT * FROM unnest(%(queues)s::text[], %(kinds)s::text[]) WITH ORDINALITY
            AS k(queue, kind, i)
    ), picks AS (
        -- one entry per percent of weight: the row's kind is a uniform pick among them
        SELECT array_agg(i ORDER BY i) AS a
        FROM kinds, LATERAL generate_series(1, (%(weights)s::int[])[i])
    ), rows AS (
        SELECT g, random() AS r_kind, random() AS r_status, random() AS r_time,
            random() AS r_user
        FROM generate_series(1, %(n)s) AS g
    )
"""

_FINISHED = (
    _PICK
    + """
INSERT INTO {jobs} (kind, queue, payload, status, priority, attempts, max_attempts, created_at,
    scheduled_for, instance_id, worker_id, locked_at, last_error, last_error_at, errors,
    duration, finished_at)
SELECT k.kind, k.queue, p.payload, s.status, 0, s.attempts, 5, t.created,
    t.created, w.instance, w.worker, t.created + interval '20 ms',
    e.last_error, CASE WHEN s.status = 'failed' THEN t.finished END, e.errors,
    CASE WHEN s.status = 'cancelled' THEN NULL ELSE t.duration END, t.finished
FROM rows r CROSS JOIN picks
JOIN LATERAL (SELECT picks.a[1 + floor(r.r_kind * cardinality(picks.a))::int] AS i) c ON true
JOIN kinds k ON k.i = c.i
CROSS JOIN LATERAL (
    SELECT CASE WHEN r.r_status < %(failed)s THEN 'failed'
        WHEN r.r_status < %(failed)s + %(cancelled)s THEN 'cancelled'
        ELSE 'completed' END AS status,
    CASE WHEN r.r_status < %(failed)s THEN 5
        WHEN r.r_status < %(failed)s + %(cancelled)s THEN 0
        WHEN r.r_status > 0.95 THEN 2 ELSE 1 END AS attempts
) s
CROSS JOIN LATERAL (
    -- a week, oldest first; a job runs for 5 ms to 2 s
    SELECT now() - interval '7 days' + (r.g::float8 / %(n)s) * interval '7 days' AS created,
        0.005 + r.r_time * r.r_time * 2 AS duration
) t0
CROSS JOIN LATERAL (
    SELECT t0.created, t0.duration,
        t0.created + interval '20 ms' + t0.duration * interval '1 second' AS finished
) t
CROSS JOIN LATERAL (
    SELECT CASE WHEN s.status = 'cancelled' THEN NULL
        ELSE ('00000000-0000-4000-8000-0000000000' || lpad((r.g %% 8)::text, 2, '0'))::uuid
        END AS instance,
    CASE WHEN s.status = 'cancelled' THEN NULL
        ELSE 'worker-' || (r.g %% 4) || ':' || (1000 + r.g %% 8) || ':' || k.queue END AS worker
) w
CROSS JOIN LATERAL (
    SELECT jsonb_build_object(
        'user_id', 1 + floor(r.r_user * %(users)s)::int,
        'email', 'user' || (1 + floor(r.r_user * %(users)s)::int) || '@example.com',
        'template', (ARRAY['welcome', 'reset', 'invoice', 'digest'])[1 + r.g %% 4],
        'locale', (ARRAY['en-GB', 'de-DE', 'fr-FR'])[1 + r.g %% 3],
        'request_id', md5(r.g::text),
        'amount_cents', (r.g %% 10000) * 7
    ) AS payload
) p
CROSS JOIN LATERAL (
    SELECT CASE s.status
        WHEN 'failed' THEN (%(errors)s::text[])[1 + r.g %% 5]
        WHEN 'cancelled' THEN 'cancelled before it ran'
        WHEN 'completed' THEN CASE WHEN s.attempts = 2 THEN (%(errors)s::text[])[1 + r.g %% 5] END
        END AS last_error,
    CASE WHEN s.status = 'failed' OR s.attempts = 2 THEN (
        SELECT jsonb_agg(jsonb_build_object(
            'attempt', a, 'at', t.finished - (s.attempts - a) * interval '30 s',
            'started_at', t.created + (a - 1) * interval '30 s', 'duration', t.duration,
            'error', (%(errors)s::text[])[1 + r.g %% 5],
            'traceback', 'Traceback (most recent call last):' || repeat(
                E'\\n  File "/srv/app/jobs/' || split_part(k.kind, '.', 1)
                || '.py", line ' || (40 + a) || E', in process\\n    await self.deliver()', 6)
                || E'\\n' || (%(errors)s::text[])[1 + r.g %% 5]
        ) ORDER BY a) FROM generate_series(1, CASE WHEN s.status = 'failed' THEN 5 ELSE 1 END) a
    ) ELSE '[]'::jsonb END AS errors
) e
ORDER BY r.g
"""
)

_PENDING = (
    _PICK
    + """
INSERT INTO {jobs} (kind, queue, payload, status, priority, attempts, max_attempts, created_at,
    scheduled_for, last_error, last_error_at, errors)
SELECT k.kind, k.queue, jsonb_build_object(
        'user_id', 1 + floor(r.r_user * %(users)s)::int,
        'email', 'user' || (1 + floor(r.r_user * %(users)s)::int) || '@example.com',
        'template', (ARRAY['welcome', 'reset', 'invoice', 'digest'])[1 + r.g %% 4],
        'locale', (ARRAY['en-GB', 'de-DE', 'fr-FR'])[1 + r.g %% 3],
        'request_id', md5((-r.g)::text),
        'amount_cents', (r.g %% 10000) * 7),
    'pending', CASE WHEN r.g %% 10 = 0 THEN 10 ELSE 0 END,
    CASE WHEN retrying THEN 1 + r.g %% 3 ELSE 0 END, 5,
    now() - interval '1 hour' + (r.g::float8 / %(n)s) * interval '1 hour',
    CASE WHEN retrying OR r.r_status < %(scheduled)s
        -- due later: a retry's backoff, or a job scheduled up to two days ahead
        THEN now() + r.r_time * CASE WHEN retrying THEN interval '10 min' ELSE interval '2 days' END
        ELSE now() - interval '1 hour' + (r.g::float8 / %(n)s) * interval '1 hour' END,
    CASE WHEN retrying THEN (%(errors)s::text[])[1 + r.g %% 5] END,
    CASE WHEN retrying THEN now() - interval '1 min' END,
    CASE WHEN retrying THEN jsonb_build_array(jsonb_build_object(
        'attempt', 1, 'at', now() - interval '1 min', 'error', (%(errors)s::text[])[1 + r.g %% 5],
        'traceback', 'Traceback (most recent call last): ...')) ELSE '[]'::jsonb END
FROM rows r CROSS JOIN picks
JOIN LATERAL (SELECT picks.a[1 + floor(r.r_kind * cardinality(picks.a))::int] AS i) c ON true
JOIN kinds k ON k.i = c.i
CROSS JOIN LATERAL (
    SELECT r.r_status > 1 - %(retrying)s AS retrying
) x
ORDER BY r.g
"""
)


def fill(dsn: str, finished: int, pending: int) -> dict[str, Any]:
    """Migrate the (empty) database at ``dsn`` and write the jobs; return what it holds."""
    with pgqueue.Client.connect(dsn, driver="psycopg") as client:
        client.migrate()
        jobs = client.settings.schema + "." + client.settings.prefix + "jobs"
    params = {
        "queues": [q for q, _, _ in KINDS],
        "kinds": [k for _, k, _ in KINDS],
        "weights": [w for _, _, w in KINDS],
        "failed": FAILED_SHARE,
        "cancelled": CANCELLED_SHARE,
        "scheduled": SCHEDULED_SHARE,
        "retrying": RETRYING_SHARE,
        "users": USERS,
        "errors": list(ERRORS),
    }
    t0 = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT setseed(0.14)")
        conn.execute(_FINISHED.format(jobs=jobs).encode(), {**params, "n": finished})
        conn.execute(_PENDING.format(jobs=jobs).encode(), {**params, "n": pending})
        inserted = time.monotonic() - t0
        conn.execute(f"VACUUM ANALYZE {jobs}".encode())
        by_status: dict[str, int] = dict(
            conn.execute(f"SELECT status, count(*) FROM {jobs} GROUP BY 1 ORDER BY 1".encode())
        )
        by_queue = {
            f"{q}/{s}": n
            for q, s, n in conn.execute(
                f"SELECT queue, status, count(*) FROM {jobs} GROUP BY 1, 2 ORDER BY 1, 2".encode()
            )
        }
        later = f"SELECT count(*) FROM {jobs} WHERE status = 'pending' AND scheduled_for > now()"
        (due_later,) = conn.execute(later.encode()).fetchone()  # type: ignore[misc]
        (table, total) = conn.execute(  # type: ignore[misc]
            f"SELECT pg_size_pretty(pg_table_size('{jobs}')), "
            f"pg_size_pretty(pg_total_relation_size('{jobs}'))".encode()
        ).fetchone()
        indexes: dict[str, str] = dict(
            conn.execute(
                "SELECT indexrelname, pg_size_pretty(pg_relation_size(indexrelid)) "
                "FROM pg_stat_user_indexes WHERE relname = %s ORDER BY 1",
                (client.settings.prefix + "jobs",),
            )
        )
    return {
        "jobs_by_status": by_status,
        "jobs_by_queue_and_status": by_queue,
        "pending_due_later": due_later,
        "table_size": table,
        "total_size_with_indexes": total,
        "index_sizes": indexes,
        "insert_seconds": round(inserted, 1),
        "build_seconds": round(time.monotonic() - t0, 1),
    }
