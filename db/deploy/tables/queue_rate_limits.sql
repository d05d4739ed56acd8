-- Deploy pgfence:tables/queue_rate_limits to pg
-- requires: tables/queue_controls
--
-- A rate limit per queue, on its row of pgfence.queue_controls: at most max_claims jobs
-- claimed per claims_per, as a token bucket (functions/queue_controls): rate_tokens
-- claims are available as of rate_refilled_at; the bucket refills at max_claims per
-- claims_per, up to max_claims (the burst after an idle spell). A row may now hold only a
-- rate limit (queue_controls_some).

\ir ../../include/lock_retry.sql

BEGIN;

-- (ACCESS EXCLUSIVE on a table every claim reads: taken with lock_timeout 100 ms and
-- retried, pg_temp.locked, so claims wait at most 100 ms behind a try. The columns have
-- no default, so adding them rewrites nothing; the checks read the table's few rows.)
SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.queue_controls '
    'ADD COLUMN max_claims integer CONSTRAINT queue_controls_max_claims CHECK (max_claims BETWEEN 1 AND 1000000), '
    'ADD COLUMN claims_per interval CONSTRAINT queue_controls_claims_per '
    '    CHECK (claims_per BETWEEN interval ''1 millisecond'' AND interval ''1 day''), '
    'ADD COLUMN rate_tokens double precision, '
    'ADD COLUMN rate_refilled_at timestamptz, '
    'ADD COLUMN rate_limited_at timestamptz, '
    'ADD COLUMN rate_limited_by text, '
    'ADD CONSTRAINT queue_controls_rate_whole CHECK ('
    '    (max_claims IS NULL) = (claims_per IS NULL) AND (max_claims IS NULL) = (rate_tokens IS NULL) '
    '    AND (max_claims IS NULL) = (rate_refilled_at IS NULL)), '
    'DROP CONSTRAINT queue_controls_some, '
    'ADD CONSTRAINT queue_controls_some '
    '    CHECK (paused_at IS NOT NULL OR max_running IS NOT NULL OR max_claims IS NOT NULL)']);

COMMENT ON TABLE pgfence.queue_controls IS
$$Queues that are paused (claim takes nothing from them), capped (at most max_running of their jobs processing
at once) or rate-limited (at most max_claims claimed per claims_per, a token bucket). Written by pause_queue,
resume_queue, set_queue_limit and set_queue_rate_limit; a queue without a row runs unlimited.$$;
COMMENT ON COLUMN pgfence.queue_controls.max_claims IS
  'At most this many of the queue''s jobs claimed per claims_per (set_queue_rate_limit); also the bucket''s size (the burst); NULL: no rate limit.';
COMMENT ON COLUMN pgfence.queue_controls.claims_per IS
  'The interval of the rate limit (1 millisecond .. 1 day).';
COMMENT ON COLUMN pgfence.queue_controls.rate_tokens IS
  'Claims available as of rate_refilled_at (the bucket; claim refills it at max_claims per claims_per, up to max_claims, and takes what it claimed).';
COMMENT ON COLUMN pgfence.queue_controls.rate_refilled_at IS
  'When claim last refilled and debited the bucket (the database clock).';
COMMENT ON COLUMN pgfence.queue_controls.rate_limited_at IS
  'When the rate limit was last set.';
COMMENT ON COLUMN pgfence.queue_controls.rate_limited_by IS
  'The role that last set the rate limit.';

COMMIT;
