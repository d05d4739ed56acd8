-- Deploy pgfence:tables/queue_controls to pg
-- requires: tables/jobs
-- requires: schema
--
-- Flow control per queue: a row for each queue that is paused or has a concurrency cap
-- (functions/queue_controls writes it; claim reads it). No row: the queue runs
-- unlimited, and while the table is empty claim takes its plain path. Keyed by queue
-- (the distribution key; docs/sql.md, "Keys for scale-out").

BEGIN;

CREATE TABLE IF NOT EXISTS pgfence.queue_controls (
    queue       text        PRIMARY KEY,
    paused_at   timestamptz,
    paused_by   text,
    max_running integer     CHECK (max_running BETWEEN 1 AND 1000000),
    limited_at  timestamptz,
    limited_by  text,
    CONSTRAINT queue_controls_some CHECK (paused_at IS NOT NULL OR max_running IS NOT NULL),
    CONSTRAINT queue_controls_paused_by CHECK ((paused_at IS NULL) = (paused_by IS NULL))
);

COMMENT ON TABLE pgfence.queue_controls IS
$$Queues that are paused (claim takes nothing from them) or capped (at most max_running of their jobs processing
at once). Written by pause_queue, resume_queue and set_queue_limit; a queue without a row runs unlimited.$$;
COMMENT ON COLUMN pgfence.queue_controls.paused_at IS
  'Since when the queue is paused (pause_queue); NULL: claims take from it.';
COMMENT ON COLUMN pgfence.queue_controls.paused_by IS
  'The role that paused the queue (SET ROLE respected).';
COMMENT ON COLUMN pgfence.queue_controls.max_running IS
  'At most this many of the queue''s jobs processing at once, across all workers (set_queue_limit); NULL: no cap.';
COMMENT ON COLUMN pgfence.queue_controls.limited_at IS
  'When max_running was last set.';
COMMENT ON COLUMN pgfence.queue_controls.limited_by IS
  'The role that last set max_running.';

ALTER TABLE pgfence.queue_controls OWNER TO pgfence_owner;
REVOKE ALL ON TABLE pgfence.queue_controls FROM PUBLIC;
GRANT SELECT ON TABLE pgfence.queue_controls TO pgfence_operator;

COMMIT;
