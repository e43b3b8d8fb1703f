-- Named queries used by the pgqueue core. Each starts with a "-- name: <name>" line.
-- Parameters are PostgreSQL's native $1, $2, ...; every driver adapter accepts that form.
-- Double-brace placeholders are replaced by validated, quoted identifiers.

-- name: migration_lock
-- Serialises concurrent migrate() calls; released when the transaction ends.
SELECT pg_advisory_xact_lock($1);

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
INSERT INTO {{schema}}.{{jobs}} (
    kind, queue, payload, priority, max_attempts, scheduled_for, key, options
) VALUES (
    $1, $2, $3::jsonb, $4, $5,
    coalesce($6::timestamptz, now() + coalesce($7::float8, 0) * interval '1 second'),
    $8, $9::jsonb
)
RETURNING id, scheduled_for;

-- name: job_insert_many
-- One statement for a whole chunk: each column travels as one array parameter, so the number of
-- bind parameters does not grow with the number of jobs.
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
RETURNING id, scheduled_for;
