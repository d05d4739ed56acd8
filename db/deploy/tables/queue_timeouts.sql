-- Deploy pgfence:tables/queue_timeouts to pg
-- requires: schema
--
-- A queue's default run timeout (functions/queue_timeouts writes it). enqueue reads it
-- when no timeout is passed and stores the result on the job, so claim reads nothing
-- more: a queue without a row has no default. Not in pgfence.queue_controls, whose mere
-- rows send claims down their slower controlled path. Keyed by queue (the
-- distribution key; docs/sql.md, "Keys for scale-out").

BEGIN;

CREATE TABLE IF NOT EXISTS pgfence.queue_timeouts (
    queue   text        PRIMARY KEY,
    timeout interval    NOT NULL,
    set_at  timestamptz NOT NULL,
    set_by  text        NOT NULL,
    CONSTRAINT queue_timeouts_timeout_valid CHECK (
        timeout BETWEEN interval '1 millisecond' AND interval '30 days'
        AND extract(month FROM timeout) = 0 AND extract(day FROM timeout) = 0)
);

COMMENT ON TABLE pgfence.queue_timeouts IS
$$The default run timeout of a queue's jobs (set_queue_timeout): enqueue stores it on a job enqueued without a
timeout of its own. A queue without a row: no default.$$;
COMMENT ON COLUMN pgfence.queue_timeouts.timeout IS 'The default run timeout (a length of time: 1 ms .. 30 days).';
COMMENT ON COLUMN pgfence.queue_timeouts.set_at IS 'When it was set.';
COMMENT ON COLUMN pgfence.queue_timeouts.set_by IS 'The role that set it (SET ROLE respected).';

ALTER TABLE pgfence.queue_timeouts OWNER TO pgfence_owner;
REVOKE ALL ON TABLE pgfence.queue_timeouts FROM PUBLIC;
GRANT SELECT ON TABLE pgfence.queue_timeouts TO pgfence_operator;

COMMIT;
