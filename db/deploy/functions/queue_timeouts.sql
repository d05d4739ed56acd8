-- Deploy pgfence:functions/queue_timeouts to pg
-- requires: tables/queue_timeouts
-- requires: functions/_checks
--
-- A queue's default run timeout: set_queue_timeout (operator) and queue_timeouts().
-- enqueue applies it to the jobs enqueued afterwards without a timeout of their own;
-- jobs already enqueued keep theirs. The checks of a timeout argument (_timeout_ok,
-- _check_timeout) and its stored form (_timeout_length) live here, with the table's
-- own bounds.

BEGIN;

-- A run timeout: 1 ms .. 30 days, its parts (months, days, time) of one sign.
-- Inlined into enqueue's fast path, like _name_ok. NULL is valid (no timeout).
CREATE OR REPLACE FUNCTION pgfence._timeout_ok(value interval) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT value IS NULL OR (value BETWEEN interval '1 millisecond' AND interval '30 days'
                             AND pgfence._interval_signs_agree(value))
$$;
COMMENT ON FUNCTION pgfence._timeout_ok(interval) IS
  'Private: true for NULL or a valid run timeout (1 millisecond .. 30 days, parts of one sign), never NULL.';

CREATE OR REPLACE FUNCTION pgfence._check_timeout(arg text, value interval) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pgfence._timeout_ok(value) THEN
        PERFORM pgfence._check_interval(arg, value, interval '1 millisecond', interval '30 days',
            '1 millisecond..30 days', 'pass NULL for no run timeout, or one between 1 millisecond and 30 days, e.g. ''5 minutes''');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_timeout(text, interval) IS
  'Private: check a run timeout (NULL, or 1 millisecond .. 30 days), naming arg.';

-- The stored form of a valid timeout: the same length of time with no months or days
-- parts (a month counts 30 days, a day 24 hours), so that reserved_at + timeout does
-- not depend on the session's time zone.
CREATE OR REPLACE FUNCTION pgfence._timeout_length(value interval) RETURNS interval
LANGUAGE sql IMMUTABLE AS $$
    SELECT make_interval(secs => extract(epoch FROM value))
$$;
COMMENT ON FUNCTION pgfence._timeout_length(interval) IS
  'Private: a timeout as a plain length of time (no months or days parts), as stored.';

-- Operator: the default run timeout of a queue's jobs (NULL: none).
CREATE OR REPLACE FUNCTION pgfence.set_queue_timeout(queue text, timeout interval) RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
    PERFORM pgfence._check_name('queue', queue);
    PERFORM pgfence._check_timeout('timeout', timeout);
    IF timeout IS NULL THEN
        DELETE FROM pgfence.queue_timeouts t WHERE t.queue = queue;
        RETURN;
    END IF;
    INSERT INTO pgfence.queue_timeouts AS t (queue, timeout, set_at, set_by)
    VALUES (queue, pgfence._timeout_length(timeout), clock_timestamp(), pgfence._invoker())
    ON CONFLICT ON CONSTRAINT queue_timeouts_pkey DO UPDATE
        SET timeout = excluded.timeout, set_at = excluded.set_at, set_by = excluded.set_by;
END $$;
COMMENT ON FUNCTION pgfence.set_queue_timeout(text, interval) IS
$$Operator: the run timeout (1 ms..30 days; NULL removes it) of queue's jobs enqueued from now on without a
timeout of their own (enqueue stores it on the job; jobs already enqueued keep theirs). Recorded in
pgfence.queue_timeouts (set_at, set_by). Errors: 22004, 22023.$$;

-- The queues with a default run timeout.
CREATE OR REPLACE FUNCTION pgfence.queue_timeouts()
RETURNS TABLE(queue text, timeout interval, set_at timestamptz, set_by text)
LANGUAGE sql STABLE AS $$
    SELECT t.queue, t.timeout, t.set_at, t.set_by FROM pgfence.queue_timeouts t ORDER BY t.queue
$$;
COMMENT ON FUNCTION pgfence.queue_timeouts() IS
  'Operator: the queues with a default run timeout (pgfence.queue_timeouts), by name.';

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('set_queue_timeout', '{pgfence_operator}'),
    ('queue_timeouts',    '{pgfence_operator}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
