-- pgqueue schema, version 4: what the admin API and the `pgqueue jobs|queues|stats` commands read.
--
-- queues: one row per queue an operator paused (or paused once). A worker claims nothing from a
-- queue whose row has paused_at set; the claim statement reads it, so a pause holds on every
-- worker from its next claim, and survives restarts.
-- jobs.unique_ttl: the ttl a unique job was enqueued with, so that a retried one can take its
-- lock again for as long.
-- Two partial indexes for the operator's queries (see docs/schema.md for the plans):
-- jobs_pending_idx replaces jobs_due_idx with the kind included, so that counting pending jobs
-- by queue and kind reads the index alone; jobs_ended_idx lists failed and cancelled jobs
-- newest first and counts them, however many completed jobs the table holds. Neither grows
-- with completed jobs. Building them reads the whole jobs table and locks writes to it for
-- as long as that takes (about 0.6 s per million rows on a small machine).

CREATE TABLE IF NOT EXISTS {{schema}}.{{queues}} (
    name        text        PRIMARY KEY,
    paused_at   timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE {{schema}}.{{jobs}} ADD COLUMN IF NOT EXISTS unique_ttl double precision;

CREATE INDEX IF NOT EXISTS {{jobs_pending_idx}}
    ON {{schema}}.{{jobs}} (queue, scheduled_for) INCLUDE (kind)
    WHERE status = 'pending';

DROP INDEX IF EXISTS {{schema}}.{{jobs_due_idx}};

CREATE INDEX IF NOT EXISTS {{jobs_ended_idx}}
    ON {{schema}}.{{jobs}} (status, id) INCLUDE (queue, kind)
    WHERE status IN ('failed', 'cancelled');
