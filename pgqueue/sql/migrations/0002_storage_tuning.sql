-- pgqueue schema, version 2: storage settings for tables that churn.
--
-- A job row is inserted, updated when claimed and again when it ends, and deleted by retention
-- a day later: a queue table turns over its whole content all the time. PostgreSQL's defaults
-- (vacuum when a fifth of a table is dead) let dead rows and index entries pile up between
-- vacuums, and the claim walks past them. These settings make autovacuum visit the jobs table
-- early and without throttling, and leave room on each page so that an updated row version
-- usually lands on the page of the old one.

ALTER TABLE {{schema}}.{{jobs}} SET (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- One row per running process, rewritten by every heartbeat: with free space on its page the
-- update is a HOT update (heartbeat_at is in no index), which needs no index maintenance.
ALTER TABLE {{schema}}.{{instances}} SET (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 100
);
