-- Named statements of the admin API (pgqueue/_async/admin.py): listing jobs, acting on them by
-- id or by filter, pausing queues, statistics and live workers. Same rules as queries.sql:
-- parameters are $1, $2, ...; double-brace placeholders are validated, quoted identifiers.

-- fragment: job_filter
-- The filter of list_jobs and of every bulk action, as $1-$11, each NULL for "any": $1
-- statuses, $2 queues, $3 kinds, $4 a JSON object the arguments contain (jsonb @>), $5 ids,
-- $6/$7 created at or after/before, $8/$9 due at or after/before, $10/$11 finished at or
-- after/before. One statement for every combination: PostgreSQL plans each call with the
-- values it is given (a custom plan), so a NULL filter costs nothing and a status or queue
-- still reaches its index. A list of one status, queue or kind becomes an equality (the CASE
-- folds away in a custom plan): PostgreSQL 15 uses an index for `status = ANY('{failed}')` but
-- not for its order, and scanned the primary key backwards through the pending backlog to
-- find a page of failed jobs; `status = 'failed'` reads jobs_ended_idx in id order and stops
-- after the page (docs/schema.md, "Admin queries and their indexes").
($1::text[] IS NULL OR CASE WHEN cardinality($1::text[]) = 1 THEN j.status = ($1::text[])[1]
    ELSE j.status = ANY($1::text[]) END)
AND ($2::text[] IS NULL OR CASE WHEN cardinality($2::text[]) = 1 THEN j.queue = ($2::text[])[1]
    ELSE j.queue = ANY($2::text[]) END)
AND ($3::text[] IS NULL OR CASE WHEN cardinality($3::text[]) = 1 THEN j.kind = ($3::text[])[1]
    ELSE j.kind = ANY($3::text[]) END)
AND ($4::jsonb IS NULL OR j.payload @> $4::jsonb)
AND ($5::bigint[] IS NULL OR j.id = ANY($5::bigint[]))
AND ($6::timestamptz IS NULL OR j.created_at >= $6::timestamptz)
AND ($7::timestamptz IS NULL OR j.created_at < $7::timestamptz)
AND ($8::timestamptz IS NULL OR j.scheduled_for >= $8::timestamptz)
AND ($9::timestamptz IS NULL OR j.scheduled_for < $9::timestamptz)
AND ($10::timestamptz IS NULL OR j.finished_at >= $10::timestamptz)
AND ($11::timestamptz IS NULL OR j.finished_at < $11::timestamptz)

-- name: job_list_id_desc
-- One page of list_jobs, newest first: jobs matching the filter with an id below $12 (the
-- cursor; NULL: from the start), at most $14 ($13 is the cursor's due time in the due orders).
SELECT {{> job_columns}}
FROM {{schema}}.{{jobs}} j
WHERE {{> job_filter}}
    AND ($12::bigint IS NULL OR j.id < $12::bigint)
    AND ($13::timestamptz IS NULL OR true)
ORDER BY j.id DESC
LIMIT $14;

-- name: job_list_id_asc
SELECT {{> job_columns}}
FROM {{schema}}.{{jobs}} j
WHERE {{> job_filter}}
    AND ($12::bigint IS NULL OR j.id > $12::bigint)
    AND ($13::timestamptz IS NULL OR true)
ORDER BY j.id
LIMIT $14;

-- name: job_list_due_asc
-- Soonest due first; the cursor is the last row's (due time $13, id $12).
SELECT {{> job_columns}}
FROM {{schema}}.{{jobs}} j
WHERE {{> job_filter}}
    AND ($13::timestamptz IS NULL OR (j.scheduled_for, j.id) > ($13::timestamptz, $12::bigint))
ORDER BY j.scheduled_for, j.id
LIMIT $14;

-- name: job_list_due_desc
SELECT {{> job_columns}}
FROM {{schema}}.{{jobs}} j
WHERE {{> job_filter}}
    AND ($13::timestamptz IS NULL OR (j.scheduled_for, j.id) < ($13::timestamptz, $12::bigint))
ORDER BY j.scheduled_for DESC, j.id DESC
LIMIT $14;

-- name: job_filter_ids
-- One batch of a bulk action: the ids of up to $14 jobs matching the filter whose status is in
-- $13 (the statuses the action applies to), after id $12, in id order. No lock is taken: the
-- action's own statement locks each row and checks its status again.
SELECT j.id
FROM {{schema}}.{{jobs}} j
WHERE {{> job_filter}}
    AND j.status = ANY($13::text[])
    AND j.id > $12::bigint
ORDER BY j.id
LIMIT $14;

-- name: job_filter_count
-- dry_run: how many jobs match the filter in a status in $12.
SELECT count(*)
FROM {{schema}}.{{jobs}} j
WHERE {{> job_filter}}
    AND j.status = ANY($12::text[]);

-- name: job_retry_many
-- Jobs $1 that are in a status of $3 (failed, cancelled, completed or pending: a bulk action
-- by filter passes the statuses it filtered on, read again here under the row lock, so a job
-- that a worker claimed or finished since the ids were read is left alone) run again now:
-- pending and due at once, with one more attempt when they have used their last (as River
-- does), the cancel request and the claim forgotten. A running job is left alone. A job
-- enqueued with unique=ttl takes its lock again for its ttl (one it still holds is kept); when
-- an identical job holds it now, the job is left alone and the holder is reported. Workers of
-- the queues are woken on channel $2. One row per id found: the status it had, whether it was
-- retried, and the job holding its unique lock when that refused it.
WITH target AS (
    SELECT j.id, j.status, j.queue, j.unique_key, j.unique_ttl
    FROM {{schema}}.{{jobs}} j
    WHERE j.id = ANY($1::bigint[])
    ORDER BY j.id
    FOR UPDATE
), retryable AS (
    SELECT * FROM target
    WHERE status IN ('failed', 'cancelled', 'completed', 'pending') AND status = ANY($3::text[])
), locked AS (
    INSERT INTO {{schema}}.{{unique_locks}} AS u (unique_key, job_id, expires_at)
    SELECT DISTINCT ON (r.unique_key)
        r.unique_key, r.id, now() + coalesce(r.unique_ttl, 0) * interval '1 second'
    FROM retryable r
    WHERE r.unique_key IS NOT NULL
    ORDER BY r.unique_key, r.id
    ON CONFLICT (unique_key) DO UPDATE
    SET job_id = EXCLUDED.job_id, expires_at = greatest(u.expires_at, EXCLUDED.expires_at)
    WHERE u.expires_at <= now() OR u.job_id = EXCLUDED.job_id
    RETURNING job_id
), changed AS (
    UPDATE {{schema}}.{{jobs}} AS j
    SET status = 'pending',
        scheduled_for = now(),
        finished_at = NULL,
        max_attempts = CASE WHEN j.attempts >= j.max_attempts
            THEN j.attempts + 1 ELSE j.max_attempts END,
        cancel_requested_at = NULL,
        lease_token = NULL,
        instance_id = NULL,
        worker_id = NULL,
        locked_at = NULL
    FROM retryable r
    WHERE j.id = r.id
        AND (r.unique_key IS NULL OR r.id IN (SELECT job_id FROM locked))
    RETURNING j.id, j.queue
), woken AS (
    SELECT count(pg_notify($2, 'q:' || q.queue)) AS n FROM (SELECT DISTINCT queue FROM changed) q
)
SELECT t.id, t.status, c.id IS NOT NULL,
    (SELECT u.job_id FROM {{schema}}.{{unique_locks}} u WHERE u.unique_key = t.unique_key),
    (SELECT n FROM woken)
FROM target t
LEFT JOIN changed c ON c.id = t.id
ORDER BY t.id;

-- name: job_cancel_many
-- Jobs $1 in a status of $3 (re-read under the row lock, as in job_retry_many): a pending one
-- is cancelled at once; a running one gets cancel_requested_at, and its worker is told through
-- the wake-up channel $2 (and by its next heartbeat). One row per id
-- found: the status it had and whether it changed (a finished job is left alone).
WITH target AS (
    SELECT j.id, j.status
    FROM {{schema}}.{{jobs}} j
    WHERE j.id = ANY($1::bigint[])
    ORDER BY j.id
    FOR UPDATE
), changed AS (
    UPDATE {{schema}}.{{jobs}} AS j
    SET status = CASE WHEN t.status = 'pending' THEN 'cancelled' ELSE j.status END,
        finished_at = CASE WHEN t.status = 'pending' THEN now() ELSE j.finished_at END,
        last_error = CASE WHEN t.status = 'pending' THEN 'cancelled before it ran'
            ELSE j.last_error END,
        last_error_at = CASE WHEN t.status = 'pending' THEN now() ELSE j.last_error_at END,
        cancel_requested_at = coalesce(j.cancel_requested_at, now())
    FROM target t
    WHERE j.id = t.id AND t.status IN ('pending', 'processing') AND t.status = ANY($3::text[])
    RETURNING j.id, t.status AS was
), told AS (
    SELECT count(pg_notify($2, 'c:' || c.id)) AS n FROM changed c WHERE c.was = 'processing'
)
SELECT t.id, t.status, c.id IS NOT NULL, (SELECT n FROM told)
FROM target t
LEFT JOIN changed c ON c.id = t.id
ORDER BY t.id;

-- name: job_delete_many
-- Jobs $1 in a status of $2 (re-read under the row lock, as in job_retry_many), unless
-- running, are deleted (their unique locks go with them, and their job ids are free again). One row per id found: the status it had and whether it was deleted.
WITH target AS (
    SELECT j.id, j.status
    FROM {{schema}}.{{jobs}} j
    WHERE j.id = ANY($1::bigint[])
    ORDER BY j.id
    FOR UPDATE
), deleted AS (
    DELETE FROM {{schema}}.{{jobs}} AS j
    USING target t
    WHERE j.id = t.id AND t.status <> 'processing' AND t.status = ANY($2::text[])
    RETURNING j.id
)
SELECT t.id, t.status, d.id IS NOT NULL
FROM target t
LEFT JOIN deleted d ON d.id = t.id
ORDER BY t.id;

-- name: job_purge
-- Delete up to $4 finished jobs in statuses $3 that finished more than $1 seconds ago, of
-- queues $2 (NULL: every queue), oldest first; return how many. jobs_finished_idx serves it.
DELETE FROM {{schema}}.{{jobs}}
WHERE id IN (
    SELECT j.id FROM {{schema}}.{{jobs}} j
    WHERE j.status IN ('completed', 'failed', 'cancelled')
        AND j.status = ANY($3::text[])
        AND j.finished_at < now() - $1::float8 * interval '1 second'
        AND ($2::text[] IS NULL OR j.queue = ANY($2::text[]))
    ORDER BY j.finished_at
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
RETURNING id;

-- name: job_purge_count
-- purge's dry run: how many jobs job_purge would delete in all.
SELECT count(*) FROM {{schema}}.{{jobs}} j
WHERE j.status IN ('completed', 'failed', 'cancelled')
    AND j.status = ANY($3::text[])
    AND j.finished_at < now() - $1::float8 * interval '1 second'
    AND ($2::text[] IS NULL OR j.queue = ANY($2::text[]));

-- name: job_stats
-- Counts per queue and kind, one row per (queue, kind, what): 'available' (pending and due;
-- with the oldest due time), 'scheduled' (pending, due later), 'processing', 'failed',
-- 'cancelled', and 'completed' only when $2 is true (the one count that grows with the table's
-- history: about 250 ms per million completed jobs). Queues $1 (NULL: all). Each part reads a
-- partial index (jobs_pending_idx, jobs_processing_idx, jobs_ended_idx) without visiting the
-- table, so the statement costs what the unfinished, failed and cancelled jobs weigh, not the
-- completed ones. Pending jobs are grouped by queue and kind only, available and scheduled
-- counted apart in the same pass: grouped by the due test as well, PostgreSQL took each
-- job's due time for a group of its own, and sorted every pending job on disk to group them.
SELECT p.queue, p.kind, w.what, w.n, w.oldest
FROM (
    SELECT j.queue, j.kind,
        count(*) FILTER (WHERE j.scheduled_for <= now()) AS available,
        min(j.scheduled_for) FILTER (WHERE j.scheduled_for <= now()) AS oldest,
        count(*) FILTER (WHERE j.scheduled_for > now()) AS scheduled
    FROM {{schema}}.{{jobs}} j
    WHERE j.status = 'pending' AND ($1::text[] IS NULL OR j.queue = ANY($1::text[]))
    GROUP BY 1, 2
) p
CROSS JOIN LATERAL (
    VALUES ('available', p.available, p.oldest), ('scheduled', p.scheduled, NULL)
) AS w (what, n, oldest)
WHERE w.n > 0
UNION ALL
SELECT j.queue, j.kind, 'processing', count(*), NULL
FROM {{schema}}.{{jobs}} j
WHERE j.status = 'processing' AND ($1::text[] IS NULL OR j.queue = ANY($1::text[]))
GROUP BY 1, 2
UNION ALL
SELECT j.queue, j.kind, j.status, count(*), NULL
FROM {{schema}}.{{jobs}} j
WHERE j.status IN ('failed', 'cancelled') AND ($1::text[] IS NULL OR j.queue = ANY($1::text[]))
GROUP BY 1, 2, 3
UNION ALL
SELECT j.queue, j.kind, 'completed', count(*), NULL
FROM {{schema}}.{{jobs}} j
WHERE $2::boolean AND j.status = 'completed'
    AND ($1::text[] IS NULL OR j.queue = ANY($1::text[]))
GROUP BY 1, 2;

-- name: job_running_list
-- Running jobs, for list_workers: which instance runs what, since when.
SELECT j.id, j.kind, j.queue, j.attempts, j.max_attempts, j.locked_at, j.instance_id,
    j.worker_id, j.cancel_requested_at
FROM {{schema}}.{{jobs}} j
WHERE j.status = 'processing'
ORDER BY j.locked_at, j.id;

-- name: queue_list
-- Every queue with a row (paused now, or once).
SELECT q.name, q.paused_at, q.updated_at FROM {{schema}}.{{queues}} q ORDER BY q.name;

-- name: queue_known_names
-- Every queue that exists now: a row of its own, a worker serving it, or unfinished jobs
-- (jobs_pending_idx and jobs_processing_idx find those without reading finished ones).
SELECT name FROM {{schema}}.{{queues}}
UNION
SELECT jsonb_object_keys(i.queues) FROM {{schema}}.{{instances}} i
UNION
SELECT j.queue FROM {{schema}}.{{jobs}} j WHERE j.status = 'pending'
UNION
SELECT j.queue FROM {{schema}}.{{jobs}} j WHERE j.status = 'processing'
ORDER BY 1;

-- name: queue_pause
-- Pause queues $1 (a queue paused already keeps the time it was paused); their names. The
-- claim statement reads the row: workers take nothing more from these queues.
INSERT INTO {{schema}}.{{queues}} AS q (name, paused_at, updated_at)
SELECT DISTINCT n, now(), now() FROM unnest($1::text[]) AS n
ON CONFLICT (name) DO UPDATE SET paused_at = coalesce(q.paused_at, now()), updated_at = now()
RETURNING q.name;

-- name: queue_resume
-- Resume queues $1 (NULL: every paused queue); the names of those that were paused. Their
-- workers are woken on channel $2 and claim at once.
WITH resumed AS (
    UPDATE {{schema}}.{{queues}} AS q
    SET paused_at = NULL, updated_at = now()
    WHERE q.paused_at IS NOT NULL AND ($1::text[] IS NULL OR q.name = ANY($1::text[]))
    RETURNING q.name
)
SELECT r.name, pg_notify($2, 'q:' || r.name)::text FROM resumed r ORDER BY r.name;

-- name: instance_list
-- Every registered worker process, with how long ago it last heartbeated.
SELECT i.instance_id, i.hostname, i.pid, i.queues::text, i.kinds, i.started_at, i.heartbeat_at,
    extract(epoch FROM now() - i.heartbeat_at)::float8, i.is_leader
FROM {{schema}}.{{instances}} i
ORDER BY i.started_at, i.instance_id;
