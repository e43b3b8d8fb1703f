-- pgqueue schema, version 5: periodic jobs (pgqueue/periodic.py, docs/periodic.md).
--
-- cron_entries: one row per periodic entry any worker declared, by name: its schedule and a
-- fingerprint of the newest declaration (the process that started last wins when two deploys
-- disagree), when a worker last evaluated it (an entry no worker has evaluated for a while is
-- retired: removed from the code), and whether an operator paused it.
-- cron_ticks: the tick ledger, one row per (entry, tick in UTC) that was acted on, inserted in
-- the same statement as the tick's job. Its primary key is the exactly-once guarantee: every
-- worker may try a tick, one insert wins, and the others change nothing.

CREATE TABLE IF NOT EXISTS {{schema}}.{{cron_entries}} (
    name         text        PRIMARY KEY,
    schedule     text        NOT NULL,
    timezone     text        NOT NULL,
    kind         text        NOT NULL,
    queue        text        NOT NULL,
    definition   text        NOT NULL,
    -- the job each tick enqueues, as the newest declaration has it (what a trigger enqueues)
    job_payload  jsonb       NOT NULL DEFAULT '{}'::jsonb,
    job_priority smallint    NOT NULL DEFAULT 0,
    job_max_attempts integer NOT NULL DEFAULT 25,
    job_options  jsonb       NOT NULL DEFAULT '{}'::jsonb,
    declared_by  uuid,
    declared_at  timestamptz NOT NULL DEFAULT now(),
    seen_at      timestamptz NOT NULL DEFAULT now(),
    paused_at    timestamptz,
    resumed_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS {{schema}}.{{cron_ticks}} (
    name         text        NOT NULL,
    tick         timestamptz NOT NULL,
    -- the job enqueued for the tick (NULL: skipped, its previous job still pending or running)
    job_id       bigint,
    -- 'scheduled', 'late' (a missed tick within its grace), 'backfill', 'manual' (triggered),
    -- 'start' (run_on_start) or 'skipped'
    how          text        NOT NULL,
    enqueued_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, tick)
);
