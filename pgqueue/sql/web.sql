-- Named statements of the web dashboard (pgqueue/web): the limits of its reading transactions,
-- the overview's charts and the cheap reading that tells its live view something changed. Same
-- rules as queries.sql: parameters are $1, $2, ...; double-brace placeholders are validated,
-- quoted identifiers.

-- name: session_read_limits
-- The first statement of each of the dashboard's reading transactions: every later statement
-- of it is cancelled after $1 milliseconds (statement_timeout), and the transaction is read
-- only. Both last until the transaction ends (set_config's third argument: SET LOCAL).
SELECT set_config('statement_timeout', $1::text, true),
    set_config('transaction_read_only', 'on', true);

-- name: job_finished_per_minute
-- The overview's charts: jobs that finished in each of the last $1 minutes (the current
-- minute last, minutes with none included), as completed, failed and cancelled counts.
-- jobs_finished_idx finds the minutes' jobs by finished_at (its
-- predicate is the status test below); the statement costs what the jobs finished in those
-- minutes weigh, however many older ones the table holds.
WITH counted AS (
    SELECT date_trunc('minute', j.finished_at) AS minute,
        count(*) FILTER (WHERE j.status = 'completed') AS completed,
        count(*) FILTER (WHERE j.status = 'failed') AS failed,
        count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled
    FROM {{schema}}.{{jobs}} j
    WHERE j.status IN ('completed', 'failed', 'cancelled')
        AND j.finished_at >= date_trunc('minute', now()) - make_interval(mins => $1::int - 1)
    GROUP BY 1
)
SELECT m.minute, coalesce(c.completed, 0), coalesce(c.failed, 0), coalesce(c.cancelled, 0)
FROM generate_series(
    date_trunc('minute', now()) - make_interval(mins => $1::int - 1),
    date_trunc('minute', now()),
    interval '1 minute'
) AS m (minute)
LEFT JOIN counted c ON c.minute = m.minute
ORDER BY m.minute;

-- name: web_activity
-- What the live view polls (every few seconds, while a browser watches), and what each page
-- notes as it is read, to tell that something changed: the newest job's id (primary key), the
-- newest finish (jobs_finished_idx), how many jobs run (jobs_processing_idx), the newest pause
-- or resume of a queue and of a periodic entry, and the worker processes (how many, the newest
-- start, the leader). Each part reads one end of an index or a small table: cheap however large
-- the jobs table is. Heartbeats are left out: they change every few seconds.
SELECT (SELECT max(j.id) FROM {{schema}}.{{jobs}} j),
    (SELECT max(j.finished_at) FROM {{schema}}.{{jobs}} j
        WHERE j.status IN ('completed', 'failed', 'cancelled')),
    (SELECT count(*) FROM {{schema}}.{{jobs}} j WHERE j.status = 'processing'),
    (SELECT max(q.updated_at) FROM {{schema}}.{{queues}} q),
    (SELECT max(greatest(e.paused_at, e.resumed_at)) FROM {{schema}}.{{cron_entries}} e),
    (SELECT count(*) FROM {{schema}}.{{instances}} i),
    (SELECT max(i.started_at) FROM {{schema}}.{{instances}} i),
    (SELECT max(i.instance_id::text) FROM {{schema}}.{{instances}} i WHERE i.is_leader);
