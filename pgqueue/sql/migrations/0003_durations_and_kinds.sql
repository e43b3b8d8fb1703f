-- pgqueue schema, version 3: what an operator needs to see.
--
-- jobs.duration: how long the last attempt's process() ran, in seconds (each failed attempt's
-- duration is also in its entry of the errors history).
-- instances.kinds: the job kinds each running process registers, so that workers can warn about
-- due jobs whose kind no running process knows (they would otherwise wait silently). NULL, as
-- written by older pgqueue versions, counts as every kind.

ALTER TABLE {{schema}}.{{jobs}} ADD COLUMN IF NOT EXISTS duration double precision;

ALTER TABLE {{schema}}.{{instances}} ADD COLUMN IF NOT EXISTS kinds text[];
