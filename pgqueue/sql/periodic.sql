-- Named statements of periodic jobs (pgqueue/periodic.py, the runtime's scheduler, the cron
-- admin calls). Same rules as queries.sql.

-- name: cron_entry_declare
-- A worker starting with periodic entries declares each: $1 name, $2 schedule, $3 time zone,
-- $4 kind, $5 queue, $6 the declaration's fingerprint, $7 the instance, and the job's $8
-- payload, $9 priority, $10 max_attempts, $11 options. The newest declaration
-- wins: it replaces the row, and workers still running an older one stop evaluating the entry.
-- Returns the fingerprint it replaced (NULL: a new entry, which never backfills), the last
-- tick acted on, and when the entry was last resumed.
WITH old AS (
    SELECT e.definition, e.resumed_at FROM {{schema}}.{{cron_entries}} e WHERE e.name = $1
), last AS (
    -- an operator's trigger or a worker's start is not a tick of the schedule: missed ticks
    -- are counted from the last scheduled one
    SELECT max(t.tick) AS tick FROM {{schema}}.{{cron_ticks}} t
    WHERE t.name = $1 AND t.how NOT IN ('manual', 'start')
), declared AS (
    INSERT INTO {{schema}}.{{cron_entries}} AS e (
        name, schedule, timezone, kind, queue, definition, declared_by, job_payload,
        job_priority, job_max_attempts, job_options
    ) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11::jsonb)
    ON CONFLICT (name) DO UPDATE
    SET schedule = EXCLUDED.schedule, timezone = EXCLUDED.timezone, kind = EXCLUDED.kind,
        queue = EXCLUDED.queue, definition = EXCLUDED.definition,
        declared_by = EXCLUDED.declared_by, declared_at = now(), seen_at = now(),
        job_payload = EXCLUDED.job_payload, job_priority = EXCLUDED.job_priority,
        job_max_attempts = EXCLUDED.job_max_attempts, job_options = EXCLUDED.job_options
    RETURNING e.name
)
SELECT (SELECT definition FROM old), (SELECT tick FROM last), (SELECT resumed_at FROM old),
    (SELECT count(*) FROM declared);

-- name: cron_tick_enqueue
-- Act on tick $2 (UTC) of entry $1: record it in the ledger and, in the same statement, insert
-- its job. $3 how ('scheduled', 'late', 'backfill', 'start', 'manual'); $4 the fingerprint of
-- the declaration the caller evaluates (NULL: an operator's trigger, which skips the checks);
-- $5 skip the tick while the entry's last job is pending or running; the job: $6 kind, $7 queue,
-- $8 payload, $9 priority, $10 max_attempts, $11 its delay after the tick in seconds (jitter),
-- $12 options, $13 the wake-up channel, $14 the jobs table (for its id sequence).
-- The verdict: 'go' (recorded, or someone else recorded it: see the count), 'skip' (recorded
-- as skipped), 'early' (not due by the database's clock: try again), 'paused', 'superseded'
-- (a newer declaration wins) or 'unknown' (no such entry). Exactly one statement can record a
-- tick: the ledger's primary key makes every other attempt a no-op, whoever runs it.
WITH entry AS (
    SELECT e.paused_at, e.resumed_at, e.definition
    FROM {{schema}}.{{cron_entries}} e
    WHERE e.name = $1
), verdict AS (
    SELECT CASE
        WHEN $4::text IS NULL THEN 'go'
        WHEN $2::timestamptz > now() THEN 'early'
        WHEN NOT EXISTS (SELECT 1 FROM entry) THEN 'unknown'
        WHEN (SELECT definition FROM entry) <> $4::text THEN 'superseded'
        WHEN (SELECT paused_at FROM entry) IS NOT NULL THEN 'paused'
        WHEN $2::timestamptz < coalesce((SELECT resumed_at FROM entry), '-infinity') THEN 'paused'
        WHEN $5::boolean AND EXISTS (
            SELECT 1
            FROM (
                SELECT t.job_id FROM {{schema}}.{{cron_ticks}} t
                WHERE t.name = $1 AND t.job_id IS NOT NULL
                ORDER BY t.tick DESC
                LIMIT 1
            ) prev
            JOIN {{schema}}.{{jobs}} j ON j.id = prev.job_id
            WHERE j.status IN ('pending', 'processing')
        ) THEN 'skip'
        ELSE 'go' END AS v
), tick AS (
    INSERT INTO {{schema}}.{{cron_ticks}} (name, tick, job_id, how)
    SELECT $1, $2::timestamptz,
        CASE WHEN v.v = 'go' THEN nextval(pg_get_serial_sequence($14::text, 'id')) END,
        CASE WHEN v.v = 'go' THEN $3::text ELSE 'skipped' END
    FROM verdict v
    WHERE v.v IN ('go', 'skip')
    ON CONFLICT (name, tick) DO NOTHING
    RETURNING job_id
), ins AS (
    INSERT INTO {{schema}}.{{jobs}} (
        id, kind, queue, payload, priority, max_attempts, scheduled_for, options
    )
    SELECT tick.job_id, $6, $7, $8::jsonb, $9, $10,
        $2::timestamptz + $11::float8 * interval '1 second', $12::jsonb
    FROM tick
    WHERE tick.job_id IS NOT NULL
    RETURNING id, queue
)
SELECT (SELECT v FROM verdict), (SELECT count(*) FROM tick), (SELECT id FROM ins),
    (SELECT pg_notify($13, 'q:' || queue) FROM ins)::text;

-- name: cron_entry_touch
-- The scheduler of a worker says it still evaluates entries $1 with fingerprints $2 (an entry
-- nobody evaluates for a while is shown as retired). Returns the names still declared as it
-- knows them: one missing was declared again, differently, by a newer worker.
UPDATE {{schema}}.{{cron_entries}} AS e
SET seen_at = now()
FROM unnest($1::text[], $2::text[]) AS d(name, definition)
WHERE e.name = d.name AND e.definition = d.definition
RETURNING e.name;

-- name: cron_entry_reclaim
-- A worker whose declaration of entry $1 was superseded takes the entry back when the worker
-- with the newer declaration has not evaluated it for $2 seconds (it was stopped: a canary, a
-- rollback), or when the entry is declared as this worker knows it ($3) again (another worker
-- of this version took it back first). Returns the name when the entry is this worker's again.
UPDATE {{schema}}.{{cron_entries}}
SET seen_at = now()
WHERE name = $1 AND (seen_at < now() - $2::float8 * interval '1 second' OR definition = $3)
RETURNING name;

-- name: cron_entry_list
-- Every entry, with its last tick (and that tick's job) and its last finished run (the
-- columns of a cron_tick_history row).
SELECT e.name, e.schedule, e.timezone, e.kind, e.queue, e.paused_at, e.declared_at, e.seen_at,
    extract(epoch FROM now() - e.seen_at)::float8, e.created_at,
    last.tick, last.how, last.job_id, j.status,
    done.tick, done.how, done.job_id, done.enqueued_at, done.status, done.attempts,
    done.finished_at, done.last_error
FROM {{schema}}.{{cron_entries}} e
LEFT JOIN LATERAL (
    SELECT t.tick, t.how, t.job_id FROM {{schema}}.{{cron_ticks}} t
    WHERE t.name = e.name
    ORDER BY t.tick DESC
    LIMIT 1
) last ON true
LEFT JOIN {{schema}}.{{jobs}} j ON j.id = last.job_id
LEFT JOIN LATERAL (
    SELECT t.tick, t.how, t.job_id, t.enqueued_at, f.status, f.attempts, f.finished_at,
        f.last_error
    FROM {{schema}}.{{cron_ticks}} t
    JOIN {{schema}}.{{jobs}} f ON f.id = t.job_id
    WHERE t.name = e.name AND f.status IN ('completed', 'failed', 'cancelled')
    ORDER BY t.tick DESC
    LIMIT 1
) done ON true
ORDER BY e.name;

-- name: cron_entry_pause
-- Pause entries $1: their ticks are not enqueued (nor recorded) until resumed.
UPDATE {{schema}}.{{cron_entries}}
SET paused_at = coalesce(paused_at, now())
WHERE name = ANY($1::text[])
RETURNING name;

-- name: cron_entry_resume
-- Resume entries $1: ticks from now on are enqueued; those that fell while paused are not.
UPDATE {{schema}}.{{cron_entries}}
SET paused_at = NULL, resumed_at = now()
WHERE name = ANY($1::text[]) AND paused_at IS NOT NULL
RETURNING name;

-- name: cron_tick_history
-- The ticks of entry $1 before tick $2 (NULL: the newest), newest first, at most $3, each with
-- its job as it is now (gone once retention removed it).
SELECT t.tick, t.how, t.job_id, t.enqueued_at, j.status, j.attempts, j.finished_at,
    j.last_error
FROM {{schema}}.{{cron_ticks}} t
LEFT JOIN {{schema}}.{{jobs}} j ON j.id = t.job_id
WHERE t.name = $1 AND ($2::timestamptz IS NULL OR t.tick < $2::timestamptz)
ORDER BY t.tick DESC
LIMIT $3;

-- name: cron_tick_cleanup
-- The leader removes up to $2 ticks older than $1 seconds, keeping each entry's newest tick
-- (from which a restarted scheduler counts its missed ticks).
DELETE FROM {{schema}}.{{cron_ticks}} AS t
WHERE (t.name, t.tick) IN (
    SELECT c.name, c.tick FROM {{schema}}.{{cron_ticks}} c
    WHERE c.tick < now() - $1::float8 * interval '1 second'
        AND c.tick < (SELECT max(x.tick) FROM {{schema}}.{{cron_ticks}} x WHERE x.name = c.name)
    LIMIT $2
)
RETURNING t.name;

-- name: cron_entry_trigger
-- An operator's "run it now": enqueue entry $1's job (as its newest declaration has it) for a
-- tick at this instant, recorded as 'manual', whether the entry is paused or its last job
-- still runs. Wakes the queue on channel $2. Returns the job's id (no row: no such entry).
WITH entry AS (
    SELECT e.* FROM {{schema}}.{{cron_entries}} e WHERE e.name = $1
), tick AS (
    INSERT INTO {{schema}}.{{cron_ticks}} (name, tick, job_id, how)
    SELECT e.name, clock_timestamp(), nextval(pg_get_serial_sequence($3::text, 'id')), 'manual'
    FROM entry e
    RETURNING tick, job_id
), ins AS (
    INSERT INTO {{schema}}.{{jobs}} (
        id, kind, queue, payload, priority, max_attempts, options
    )
    SELECT tick.job_id, e.kind, e.queue, e.job_payload, e.job_priority, e.job_max_attempts,
        e.job_options || jsonb_build_object(
            'periodic', jsonb_build_object('name', e.name, 'tick', tick.tick)
        )
    FROM tick, entry e
    RETURNING id, queue
)
SELECT ins.id, pg_notify($2, 'q:' || ins.queue)::text FROM ins;
