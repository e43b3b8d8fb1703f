-- Named queries used by the pgqueue core. Each starts with a "-- name: <name>" line.
-- Parameters are PostgreSQL's native $1, $2, ...; every driver adapter accepts that form.
-- Double-brace placeholders are replaced by validated, quoted identifiers.

-- name: migration_lock
-- Serialises concurrent migrate() calls; released when the transaction ends.
SELECT pg_advisory_xact_lock($1);

-- name: schema_create
CREATE SCHEMA IF NOT EXISTS {{schema}};

-- name: schema_tables_drop
-- uninstall(): pgqueue's own tables (their indexes, sequences and trigger go with them; the
-- trigger function is schema_function_drop). Nothing else in the schema is touched.
DROP TABLE IF EXISTS {{schema}}.{{jobs}}, {{schema}}.{{unique_locks}}, {{schema}}.{{instances}},
    {{schema}}.{{queues}}, {{schema}}.{{cron_entries}}, {{schema}}.{{cron_ticks}},
    {{schema}}.{{migrations}} CASCADE;

-- name: schema_function_drop
DROP FUNCTION IF EXISTS {{schema}}.{{unique_release}}();

-- name: schema_drop_if_empty
-- uninstall(), after schema_tables_drop, for a schema other than public: RESTRICT fails (2BP01)
-- when anything else lives there, and then the schema stays.
DROP SCHEMA IF EXISTS {{schema}} RESTRICT;

-- name: migration_table_create
CREATE TABLE IF NOT EXISTS {{schema}}.{{migrations}} (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: migration_applied_list
SELECT version FROM {{schema}}.{{migrations}} ORDER BY version;

-- name: migration_record
INSERT INTO {{schema}}.{{migrations}} (version, name) VALUES ($1, $2)
ON CONFLICT (version) DO NOTHING;

-- name: migration_table_exists
SELECT to_regclass($1) IS NOT NULL;

-- name: migration_current_version
SELECT max(version) FROM {{schema}}.{{migrations}};

-- name: job_insert
-- $10 is the wake-up channel. The notification is sent once per statement (and delivered only
-- on commit), whatever the number of jobs; workers of that queue wake and claim.
WITH ins AS (
    INSERT INTO {{schema}}.{{jobs}} (
        kind, queue, payload, priority, max_attempts, scheduled_for, key, options
    ) VALUES (
        $1, $2, $3::jsonb, $4, $5,
        coalesce($6::timestamptz, now() + coalesce($7::float8, 0) * interval '1 second'),
        $8, $9::jsonb
    )
    RETURNING id, scheduled_for, queue
)
SELECT ins.id, ins.scheduled_for, pg_notify($10, 'q:' || ins.queue)::text
FROM ins;

-- name: job_insert_keyed
-- A job with a caller-chosen id ($8) and/or a unique key ($11, held for $12 seconds): no row
-- when the id is taken. The unique lock is taken by unique_lock_take in the same transaction.
WITH ins AS (
    INSERT INTO {{schema}}.{{jobs}} (
        kind, queue, payload, priority, max_attempts, scheduled_for, key, options, unique_key,
        unique_ttl
    ) VALUES (
        $1, $2, $3::jsonb, $4, $5,
        coalesce($6::timestamptz, now() + coalesce($7::float8, 0) * interval '1 second'),
        $8, $9::jsonb, $11, $12::float8
    )
    ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING
    RETURNING id, scheduled_for, queue
)
SELECT ins.id, ins.scheduled_for, pg_notify($10, 'q:' || ins.queue)::text
FROM ins;

-- name: unique_lock_take
-- Lock unique key $1 for job $2 until $3 seconds after the job is due (a due time in the past
-- means due now, so the ttl counts from now); an expired lock is taken over. No row: another
-- job holds it (a concurrent holder is waited for, then re-checked).
INSERT INTO {{schema}}.{{unique_locks}} AS u (unique_key, job_id, expires_at)
SELECT $1, j.id, greatest(j.scheduled_for, now()) + $3::float8 * interval '1 second'
FROM {{schema}}.{{jobs}} j
WHERE j.id = $2
ON CONFLICT (unique_key) DO UPDATE
SET job_id = EXCLUDED.job_id, expires_at = EXCLUDED.expires_at
WHERE u.expires_at <= now()
RETURNING job_id;

-- name: job_by_key
SELECT id, kind, queue, scheduled_for, key FROM {{schema}}.{{jobs}} WHERE key = $1;

-- name: job_by_unique_key
SELECT j.id, j.kind, j.queue, j.scheduled_for, j.key
FROM {{schema}}.{{unique_locks}} u
JOIN {{schema}}.{{jobs}} j ON j.id = u.job_id
WHERE u.unique_key = $1;

-- name: job_insert_many
-- One statement for a whole chunk: each column travels as one array parameter, so the number of
-- bind parameters does not grow with the number of jobs. $10 is the wake-up channel: one
-- notification per distinct queue, sent once for the statement.
WITH ins AS (
    INSERT INTO {{schema}}.{{jobs}} (
        kind, queue, payload, priority, max_attempts, scheduled_for, key, options
    )
    SELECT
        t.kind, t.queue, t.payload::jsonb, t.priority, t.max_attempts,
        coalesce(t.run_at, now() + coalesce(t.run_in, 0) * interval '1 second'),
        t.key, t.options::jsonb
    FROM unnest(
        $1::text[], $2::text[], $3::text[], $4::smallint[], $5::integer[],
        $6::timestamptz[], $7::float8[], $8::text[], $9::text[]
    ) WITH ORDINALITY AS t(kind, queue, payload, priority, max_attempts, run_at, run_in, key, options, ord)
    ORDER BY t.ord
    RETURNING id, scheduled_for, queue
), woken AS (
    SELECT count(pg_notify($10, 'q:' || q.queue)) AS n FROM (SELECT DISTINCT queue FROM ins) q
)
SELECT ins.id, ins.scheduled_for, woken.n FROM ins, woken;

-- name: job_reserve_ids
-- Ids (as one array, in increasing order) and the database clock for a bulk COPY of $2 jobs
-- into table $1. OFFSET 0 keeps the sequence lookup from being repeated for every id.
SELECT array_agg(nextval(s.seq) ORDER BY g), now()
FROM (SELECT pg_get_serial_sequence($1, 'id')::regclass AS seq OFFSET 0) s,
    generate_series(1, $2) g;

-- name: job_notify_queues
-- After a bulk COPY: one wake-up per queue ($2) on channel $1.
SELECT count(pg_notify($1, 'q:' || q)) FROM unnest($2::text[]) AS q;

-- name: job_claim
-- Claim up to $3 due jobs of queue $1 whose kind this process runs ($2: the kinds joined by
-- commas, which a kind never holds; a text costs a driver less to send than an array), in claim
-- order, and stamp them with this instance ($4), a lease token ($5) and the attempt they start.
-- When fewer than $3 were due, one more row (id NULL) says in how many seconds the next
-- scheduled job falls due (NULL: none), so an idle worker knows how long it may sleep without
-- another round trip. The sub-select sees the statement's snapshot, where the rows claimed
-- here are still pending but already due, hence "scheduled_for > now()".
-- The claim commits without waiting for its WAL to reach disk (synchronous_commit off for this
-- one transaction): that halves its cost. If PostgreSQL crashes before the WAL is flushed, the
-- claim is lost and the job is pending again, to run again, as at-least-once allows. Nothing
-- else is lost: enqueues and outcomes commit durably, and a durable commit flushes every
-- earlier one, so a recorded outcome never outlives its claim.
-- Only a registered instance claims: one that the leader presumed dead (it stalled past
-- rescue_after) claims nothing until its heartbeat registers it again, or the jobs it took
-- would look abandoned and be rescued while it runs them.
-- A paused queue (queue_pause) gives nothing, and no next due time: its workers sleep until
-- queue_resume wakes them. Read here, in the claim, the pause holds from the next claim of
-- every worker, with nothing cached that could be stale.
WITH durability AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true)
), next AS (
    SELECT j.id FROM {{schema}}.{{jobs}} j, durability
    WHERE j.status = 'pending' AND j.queue = $1 AND j.scheduled_for <= now()
        AND j.kind = ANY(string_to_array($2::text, ','))
        AND EXISTS (SELECT 1 FROM {{schema}}.{{instances}} i WHERE i.instance_id = $4)
        AND NOT EXISTS (
            SELECT 1 FROM {{schema}}.{{queues}} p WHERE p.name = $1 AND p.paused_at IS NOT NULL
        )
    ORDER BY j.priority DESC, j.scheduled_for, j.id
    LIMIT $3
    FOR UPDATE OF j SKIP LOCKED
), claimed AS (
    UPDATE {{schema}}.{{jobs}} AS j
    SET status = 'processing', attempts = j.attempts + 1, instance_id = $4, lease_token = $5,
        worker_id = $6, locked_at = now()
    -- An id array rather than a join: the statement is prepared, and a generic plan guesses
    -- that LIMIT $3 means 10 % of the table, which made a join hash the whole table.
    WHERE j.id = ANY(ARRAY(SELECT id FROM next))
    RETURNING j.id, j.kind, j.payload::text AS payload, j.attempts, j.max_attempts,
        j.scheduled_for, j.options::text AS options, j.priority, j.key
)
SELECT id, kind, payload, attempts, max_attempts, scheduled_for, options, priority, key,
    NULL::float8 AS next_due
FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, (
    SELECT extract(epoch FROM min(f.scheduled_for) - now())::float8
    FROM {{schema}}.{{jobs}} f
    WHERE f.status = 'pending' AND f.queue = $1 AND f.scheduled_for > now()
        AND f.kind = ANY(string_to_array($2::text, ','))
        AND NOT EXISTS (
            SELECT 1 FROM {{schema}}.{{queues}} p WHERE p.name = $1 AND p.paused_at IS NOT NULL
        )
)
WHERE (SELECT count(*) FROM claimed) < $3;

-- name: job_finish_many
-- Record how a batch of jobs ended, in one statement (the runtime collects outcomes and
-- flushes them together). $1 is a JSON array with an object per job: id, lease, action, status
-- for an 'error' ('pending' to retry, 'failed', 'cancelled'), delay in seconds (retry,
-- snooze), message (the error's), error (the error history entry, a JSON object as text; the
-- last 10 are kept), duration (how long process() ran, in seconds; absent when it did not end:
-- the stored value stays). One JSON text rather than eight arrays: psycopg builds array
-- parameters in Python, which cost more than the statement (~60 µs for one outcome).
-- The history entry gets the instance that ran the attempt and when it claimed the job.
-- Actions: 'complete'; 'error' (retry, fail or cancel, with the error recorded); 'snooze'
-- (Retry(in_=...): run again after the delay, the attempt not counted); 'release' (shutdown
-- cut the job off: pending again at once without charging the attempt, or cancelled if a
-- cancel was requested meanwhile).
-- Every write after the claim names the job and its lease, so an owner that lost the job
-- (rescued, cancelled, released) cannot overwrite what happened since: such a job is left
-- alone and missing from the returned ids.
WITH o AS MATERIALIZED (
    SELECT * FROM json_to_recordset($1::json) AS o(
        id bigint, lease uuid, action text, status text, delay float8, message text, error text,
        duration float8
    )
)
UPDATE {{schema}}.{{jobs}} AS j
SET status = CASE o.action
        WHEN 'complete' THEN 'completed'
        WHEN 'snooze' THEN 'pending'
        WHEN 'release' THEN
            CASE WHEN j.cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END
        ELSE o.status END,
    attempts = CASE
        WHEN o.action = 'snooze' OR (o.action = 'release' AND j.cancel_requested_at IS NULL)
        THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
    scheduled_for = CASE
        WHEN o.action = 'snooze' OR (o.action = 'error' AND o.status = 'pending')
        THEN now() + o.delay * interval '1 second' ELSE j.scheduled_for END,
    finished_at = CASE
        WHEN o.action = 'complete' THEN now()
        WHEN o.action = 'error' AND o.status <> 'pending' THEN now()
        WHEN o.action = 'release' AND j.cancel_requested_at IS NOT NULL THEN now()
        END,
    last_error = CASE WHEN o.action = 'error' THEN o.message ELSE j.last_error END,
    last_error_at = CASE WHEN o.action = 'error' THEN now() ELSE j.last_error_at END,
    errors = CASE WHEN o.action = 'error' THEN (
        SELECT coalesce(jsonb_agg(e.value ORDER BY e.ord), '[]'::jsonb)
        FROM (
            SELECT value, ord
            FROM jsonb_array_elements(j.errors || jsonb_build_array(
                o.error::jsonb
                || jsonb_build_object('instance_id', j.instance_id, 'claimed_at', j.locked_at)
            ))
                WITH ORDINALITY AS h(value, ord)
            ORDER BY ord DESC
            LIMIT 10
        ) e
    ) ELSE j.errors END,
    duration = coalesce(o.duration, j.duration),
    lease_token = NULL,
    instance_id = CASE WHEN o.action = 'release' THEN NULL ELSE j.instance_id END,
    worker_id = CASE WHEN o.action = 'release' THEN NULL ELSE j.worker_id END,
    locked_at = CASE WHEN o.action = 'release' THEN NULL ELSE j.locked_at END
FROM o
-- Rows are found by primary key (an id array, as in job_claim), whatever the plan guesses about
-- the number of outcomes. The lease alone proves ownership: a lease token is set by the claim
-- and cleared by every statement that moves a job out of 'processing' (this one, job_rescue). A
-- status test here would let the planner scan every running job for each outcome instead.
WHERE j.id = ANY(ARRAY(SELECT id FROM o)) AND j.id = o.id AND j.lease_token = o.lease
RETURNING j.id;

-- name: job_release_unsure_claims
-- A claim whose reply never came (the connection died on the way) may have committed all the
-- same, leaving jobs 'processing' under this live instance ($1) that it is not running: no
-- rescue would ever free them. Hand back whatever the claims with leases $2 took, as a shutdown
-- does (pending again without charging the attempt, or cancelled if that was asked meanwhile).
-- The processing index on instance_id finds them.
UPDATE {{schema}}.{{jobs}} AS j
SET status = CASE WHEN j.cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END,
    attempts = CASE WHEN j.cancel_requested_at IS NULL
        THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
    finished_at = CASE WHEN j.cancel_requested_at IS NULL THEN NULL ELSE now() END,
    lease_token = NULL,
    instance_id = NULL,
    worker_id = NULL,
    locked_at = NULL
WHERE j.status = 'processing' AND j.instance_id = $1 AND j.lease_token = ANY($2::uuid[])
RETURNING j.id;

-- fragment: job_columns
-- Every column a JobInfo reads (store_codec.job_info decodes them in this order).
j.id, j.kind, j.queue, j.payload::text, j.status, j.priority, j.attempts, j.max_attempts,
j.created_at, j.scheduled_for, j.finished_at, j.last_error, j.errors::text, j.key, j.duration,
j.instance_id, j.worker_id, j.locked_at, j.options::text, j.unique_key, j.cancel_requested_at,
j.last_error_at

-- name: job_get
SELECT {{> job_columns}}
FROM {{schema}}.{{jobs}} j
WHERE j.id = $1;

-- name: job_status_counts
SELECT status, count(*) FROM {{schema}}.{{jobs}} GROUP BY status;

-- name: instance_register
-- $5: the kinds this instance runs (the unknown-kind check of other instances reads them).
INSERT INTO {{schema}}.{{instances}} (instance_id, hostname, pid, queues, kinds)
VALUES ($1, $2, $3, $4::jsonb, $5::text[])
ON CONFLICT (instance_id) DO UPDATE
SET heartbeat_at = now(), queues = EXCLUDED.queues, kinds = EXCLUDED.kinds;

-- name: instance_heartbeat
-- Refresh our heartbeat (re-creating the row if a leader removed it while we were stalled) and
-- return the ids of our running jobs that someone asked to cancel.
WITH beat AS (
    INSERT INTO {{schema}}.{{instances}} (instance_id, hostname, pid, queues, kinds)
    VALUES ($1, $2, $3, $4::jsonb, $5::text[])
    ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = now()
    RETURNING instance_id
)
SELECT j.id FROM {{schema}}.{{jobs}} j
WHERE j.instance_id = $1 AND j.status = 'processing' AND j.cancel_requested_at IS NOT NULL
    AND EXISTS (SELECT 1 FROM beat);

-- name: instance_unregister
DELETE FROM {{schema}}.{{instances}} WHERE instance_id = $1;

-- name: instance_resign
UPDATE {{schema}}.{{instances}} SET is_leader = false WHERE instance_id = $1;

-- name: instance_set_leader
UPDATE {{schema}}.{{instances}} SET is_leader = (instance_id = $1)
WHERE is_leader OR instance_id = $1;

-- name: instance_lead_lock
-- Taken before instance_lead in the same transaction: it serialises the candidates for the
-- lease, and its own statement, so instance_lead's snapshot sees the last winner's commit. A
-- transaction-level lock works through a transaction pooler, where a session lock does not.
SELECT pg_advisory_xact_lock($1);

-- name: instance_lead
-- The leader's lease, for a runtime with no session to hold the leader's advisory lock on
-- (poll_only: behind a transaction pooler with no direct URL). The lease is the is_leader mark
-- of an instance whose heartbeat is fresh. This instance ($1) takes or keeps it unless another
-- instance holds it with a heartbeat newer than $2 seconds; returns whether it holds it now.
WITH taken AS (
    UPDATE {{schema}}.{{instances}} SET is_leader = (instance_id = $1)
    WHERE (is_leader OR instance_id = $1)
        AND NOT EXISTS (
            SELECT 1 FROM {{schema}}.{{instances}} o
            WHERE o.is_leader AND o.instance_id <> $1
                AND o.heartbeat_at > now() - $2::float8 * interval '1 second')
    RETURNING instance_id, is_leader
)
SELECT EXISTS (SELECT 1 FROM taken WHERE instance_id = $1 AND is_leader);

-- name: instance_remove_stale
-- Instances whose heartbeat is older than $1 seconds are presumed dead, except the leader's own
-- ($2): it is running this statement, so it is alive. Its heartbeat can still be stale (a
-- network outage longer than rescue_after that the leader's connection came back from first);
-- presuming itself dead would rescue the jobs it is running and run them a second time, while
-- its next beat is moments away.
DELETE FROM {{schema}}.{{instances}}
WHERE heartbeat_at < now() - $1::float8 * interval '1 second' AND instance_id <> $2
RETURNING instance_id;

-- name: job_rescue
-- Jobs held by instances that no longer exist go back to pending, or to failed when they have
-- used their last attempt. Bounded by $1 rows per call. A rescued job keeps its due time, and
-- so its place at the head of its queue: it has waited longest, and behind a backlog it would
-- otherwise wait for the whole backlog again. Idle workers of the queues of jobs back to pending
-- are woken on channel $2 (PostgreSQL sends identical notifications of one transaction once).
-- The lost attempt goes into the error history (the last 10 kept), as a failed one does.
WITH stuck AS (
    SELECT j.id FROM {{schema}}.{{jobs}} j
    WHERE j.status = 'processing'
        AND NOT EXISTS (
            SELECT 1 FROM {{schema}}.{{instances}} i WHERE i.instance_id = j.instance_id
        )
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), rescued AS (
    UPDATE {{schema}}.{{jobs}} AS j
    SET status = CASE
            WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN j.attempts >= j.max_attempts THEN 'failed'
            ELSE 'pending' END,
        finished_at = CASE
            WHEN j.cancel_requested_at IS NOT NULL OR j.attempts >= j.max_attempts THEN now() END,
        lease_token = NULL,
        last_error = 'the worker running this job stopped heartbeating (instance '
            || coalesce(j.instance_id::text, '?') || '); rescued',
        last_error_at = now(),
        errors = (
            SELECT coalesce(jsonb_agg(e.value ORDER BY e.ord), '[]'::jsonb)
            FROM (
                SELECT value, ord
                FROM jsonb_array_elements(j.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', j.attempts, 'at', now(),
                    'error', 'the worker running this job stopped heartbeating; rescued',
                    'traceback', '', 'instance_id', j.instance_id, 'claimed_at', j.locked_at,
                    'started_at', j.locked_at
                ))) WITH ORDINALITY AS h(value, ord)
                ORDER BY ord DESC
                LIMIT 10
            ) e
        )
    FROM stuck
    WHERE j.id = stuck.id
    RETURNING j.id, j.status, j.queue
)
SELECT id, status, CASE WHEN status = 'pending' THEN pg_notify($2, 'q:' || queue) END::text
FROM rescued;

-- name: job_cleanup
-- Remove up to $3 finished jobs, oldest first: completed ones older than $1 seconds, failed or
-- cancelled ones older than $2 seconds.
-- The rows are one range of jobs_finished_idx (its predicate, and finished_at older than the
-- shorter retention), read in finished_at order until $3 of them pass the per-status filter.
-- With the two retentions OR-ed, PostgreSQL read and sorted every row past retention on each
-- call (the row locks rule out a top-N sort): 25 ms with 10,000 such rows, 100-400 ms with
-- 200,000, so a cleanup that had fallen behind fell further behind. Now finding 1,000 rows
-- takes about 2 ms however many are past retention. The filter is a CASE, not an OR, which the
-- planner could turn back into two index ranges to merge and sort. The price: the rows between
-- the two retentions that the longer one keeps (by default failed and cancelled jobs 1 to 7
-- days old) are read from the table and passed over on every call, about 1 ms per 1,000 of
-- them (the OR-ed form read them too).
-- An id array rather than IN (subquery), as in job_claim: a generic plan takes LIMIT $3 for a
-- tenth of the table, and hash-joined the whole table to the ids.
DELETE FROM {{schema}}.{{jobs}}
WHERE id = ANY(ARRAY(
    SELECT id FROM {{schema}}.{{jobs}}
    WHERE status IN ('completed', 'failed', 'cancelled')
        AND finished_at < now() - least($1::float8, $2::float8) * interval '1 second'
        AND CASE status
            WHEN 'completed' THEN finished_at < now() - $1::float8 * interval '1 second'
            ELSE finished_at < now() - $2::float8 * interval '1 second'
        END
    ORDER BY finished_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
))
RETURNING id;

-- name: unique_lock_expire
DELETE FROM {{schema}}.{{unique_locks}}
WHERE unique_key IN (
    SELECT unique_key FROM {{schema}}.{{unique_locks}} WHERE expires_at < now() LIMIT $1
);

-- name: job_unknown_kinds
-- Due jobs of queues $1 whose kind no live instance serving that queue runs: they wait until a
-- worker that knows the kind starts. $2 are this instance's kinds (skipped at once). An
-- instance row without kinds (written by an older pgqueue) counts as running every kind.
SELECT j.queue, j.kind, count(*)
FROM {{schema}}.{{jobs}} j
WHERE j.status = 'pending' AND j.queue = ANY($1::text[]) AND j.scheduled_for <= now()
    AND j.kind <> ALL($2::text[])
    AND NOT EXISTS (
        SELECT 1 FROM {{schema}}.{{instances}} i
        WHERE i.queues ? j.queue AND (i.kinds IS NULL OR j.kind = ANY(i.kinds))
    )
GROUP BY j.queue, j.kind
ORDER BY j.queue, j.kind;

-- name: job_claim_by_ids
-- pgqueue.testing's inline mode: claim the pending jobs $1 whose kind this process runs ($5),
-- whatever their due time and their queue's pause, for instance $2 under lease $3 (worker $4),
-- as job_claim does. Each row also names the job's queue (job_claim claims from one queue).
UPDATE {{schema}}.{{jobs}} AS j
SET status = 'processing', attempts = j.attempts + 1, instance_id = $2, lease_token = $3,
    worker_id = $4, locked_at = now()
WHERE j.id = ANY($1::bigint[]) AND j.status = 'pending' AND j.kind = ANY($5::text[])
RETURNING j.id, j.kind, j.payload::text AS payload, j.attempts, j.max_attempts,
    j.scheduled_for, j.options::text AS options, j.priority, j.key, j.queue;

-- name: job_make_due
-- pgqueue.testing's drain(with_scheduled=True): make the scheduled (future) pending jobs of
-- queues $1 (NULL: every queue) whose kind this process runs ($2) due now. They all move
-- earlier by the same amount, so that the last one falls due now: among themselves they keep
-- their order. A paused queue's jobs stay as they are. Returns the ids moved.
WITH future AS (
    SELECT j.id, j.scheduled_for FROM {{schema}}.{{jobs}} j
    WHERE j.status = 'pending' AND j.scheduled_for > now()
        AND ($1::text[] IS NULL OR j.queue = ANY($1::text[]))
        AND j.kind = ANY($2::text[])
        AND NOT EXISTS (
            SELECT 1 FROM {{schema}}.{{queues}} p WHERE p.name = j.queue AND p.paused_at IS NOT NULL
        )
), shift AS (
    SELECT max(f.scheduled_for) - now() AS by FROM future f
)
UPDATE {{schema}}.{{jobs}} AS j
SET scheduled_for = j.scheduled_for - shift.by
FROM future, shift
WHERE j.id = future.id
RETURNING j.id;
