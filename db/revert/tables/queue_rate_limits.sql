-- Revert pgfence:tables/queue_rate_limits from pg
--
-- Rows that hold only a rate limit go (the queue runs unlimited, as without the row);
-- the columns and the constraints go back to @v0.7.0.

\ir ../../include/lock_retry.sql

BEGIN;

DELETE FROM pgfence.queue_controls WHERE paused_at IS NULL AND max_running IS NULL;
SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.queue_controls '
    'DROP CONSTRAINT queue_controls_some, '
    'ADD CONSTRAINT queue_controls_some CHECK (paused_at IS NOT NULL OR max_running IS NOT NULL), '
    'DROP COLUMN max_claims, DROP COLUMN claims_per, DROP COLUMN rate_tokens, DROP COLUMN rate_refilled_at, '
    'DROP COLUMN rate_limited_at, DROP COLUMN rate_limited_by']);

COMMENT ON TABLE pgfence.queue_controls IS
$$Queues that are paused (claim takes nothing from them) or capped (at most max_running of their jobs processing
at once). Written by pause_queue, resume_queue and set_queue_limit; a queue without a row runs unlimited.$$;

COMMIT;
