-- Deploy pgfence:tables/job_unique_for to pg
-- requires: tables/jobs
-- requires: tables/history
--
-- Unique jobs by state and period, built on idempotency keys: how long a job's key is
-- held once the job is done (while it is queued, processing or manual_review the unique
-- index holds it, whatever this says). NULL: as before, while its history is kept (its
-- retention); 0: not at all, the key is free as soon as the job is done; otherwise
-- until created_at + unique_for (and at most its retention). Set at enqueue; complete
-- reads it when it writes pgfence.held_keys, whose held_until says until when the key
-- is held (NULL: until the purge deletes the row after purge_at, as before).

\ir ../../include/lock_retry.sql

-- (pgfence.jobs and pgfence.held_keys locked by pg_temp.locked, the check added NOT
-- VALID and validated apart, as in tables/job_timeouts: no claim queues behind the
-- ALTER. unique_for is a plain length of time, as enqueue stores it: 0 .. 100 years,
-- no months or days parts; '100 years' is stored as 36525 days. The rule is the
-- domain pgfence.unique_for_period's, not a CHECK of the table, for the reason told in
-- tables/job_timeouts: a table's checks are parsed again by every INSERT and UPDATE.)
BEGIN;

CREATE DOMAIN pgfence.unique_for_period AS interval;
ALTER DOMAIN pgfence.unique_for_period OWNER TO pgfence_owner;
COMMENT ON DOMAIN pgfence.unique_for_period IS
  'How long a done job holds its idempotency key: a length of time of 0 to 36525 days, without months or days parts.';
SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.jobs ADD COLUMN unique_for pgfence.unique_for_period',
    'ALTER DOMAIN pgfence.unique_for_period ADD CONSTRAINT unique_for_period_valid CHECK ('
    '    VALUE BETWEEN interval ''0'' AND interval ''36525 days'''
    '    AND extract(month FROM VALUE) = 0 AND extract(day FROM VALUE) = 0) NOT VALID',
    'ALTER TABLE pgfence.held_keys ADD COLUMN held_until timestamptz']);
COMMENT ON COLUMN pgfence.jobs.unique_for IS
  'How long the idempotency key stays held once the job is done: NULL its retention, 0 not at all, else until created_at + unique_for (at most its retention).';
COMMENT ON COLUMN pgfence.held_keys.held_until IS
  'The key is free from then on (the job''s created_at + unique_for); NULL: held until the purge deletes the row.';

COMMIT;

BEGIN;

SELECT pg_temp.locked(ARRAY['ALTER DOMAIN pgfence.unique_for_period VALIDATE CONSTRAINT unique_for_period_valid']);

COMMIT;
