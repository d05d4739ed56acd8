-- Deploy pgfence:tables/job_timeouts to pg
-- requires: tables/jobs
-- requires: tables/attempts
-- requires: tables/job_queue_keys
--
-- A run timeout per job, distinct from the lease: pgfence.jobs.timeout (NULL: none),
-- fixed at enqueue (the argument, else the queue's default of pgfence.queue_timeouts).
-- An attempt's deadline is reserved_at + timeout: claim and heartbeat never set a lease
-- past it, so the reclaim that ends an expired lease ends a timed-out attempt too, and
-- records it with the outcome timed_out (functions/_rules). No deadline column: the
-- deadline follows from the claim time, which claim alone writes.
-- (Its own change, apart from other changes to attempts_outcome_valid, so that a merge
-- of another outcome is one line of the constraint.)

\ir ../../include/lock_retry.sql

-- pgfence.jobs and pgfence.attempts are hot: their ACCESS EXCLUSIVE locks are taken by
-- pg_temp.locked (100 ms tries, so no enqueue, claim or complete queues behind a
-- request that waits for a long transaction), and the constraints are added NOT VALID
-- (no scan under that lock), then validated in transactions of their own.
-- jobs.timeout is stored as a length of time only (no months or days parts, see
-- enqueue), so the deadline does not depend on the session's time zone: 1 ms .. 30
-- days; jobs_lease_within_timeout: a lease never outlives its attempt's deadline.
-- The 1 ms .. 30 days rule is the domain pgfence.run_timeout's, not a CHECK of the
-- table: PostgreSQL parses and plans a table's CHECK constraints again for every
-- INSERT or UPDATE statement (the single-row enqueue, claim and fail pay it each time:
-- this rule's expression alone cost about 17 us a statement, docs/performance.md),
-- while a domain's are kept planned per session. The domain is made without its
-- check, the column added (a column of a domain with a check would rewrite the
-- table), then the check added NOT VALID: every row holds NULL, which it passes.
BEGIN;

CREATE DOMAIN pgfence.run_timeout AS interval;
ALTER DOMAIN pgfence.run_timeout OWNER TO pgfence_owner;
COMMENT ON DOMAIN pgfence.run_timeout IS
  'A run timeout: a length of time of 1 ms to 30 days, without months or days parts.';
SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.jobs ADD COLUMN timeout pgfence.run_timeout, '
    'ADD CONSTRAINT jobs_lease_within_timeout CHECK ('
    '    timeout IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= reserved_at + timeout) NOT VALID',
    'ALTER DOMAIN pgfence.run_timeout ADD CONSTRAINT run_timeout_valid CHECK ('
    '    VALUE BETWEEN interval ''1 millisecond'' AND interval ''30 days'''
    '    AND extract(month FROM VALUE) = 0 AND extract(day FROM VALUE) = 0) NOT VALID',
    'ALTER TABLE pgfence.attempts DROP CONSTRAINT attempts_outcome_valid, '
    'ADD CONSTRAINT attempts_outcome_valid CHECK ('
    'outcome IN (''done'', ''failed'', ''reclaimed'', ''released'', ''cancelled'', ''timed_out'')) NOT VALID']);
COMMENT ON COLUMN pgfence.jobs.timeout IS
  'Run timeout of each attempt (NULL: none): its lease ends at reserved_at + timeout at the latest, and the reclaim then ends it as timed_out.';
COMMENT ON COLUMN pgfence.attempts.outcome IS
  'done | failed (error kept; the job retried or was dead-lettered) | reclaimed (lease expired) | released (given back) | cancelled | timed_out (its lease ended at the run timeout)';

COMMIT;

-- (SHARE UPDATE EXCLUSIVE: reads and writes go on.)
BEGIN;

ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_lease_within_timeout;
ALTER TABLE pgfence.attempts VALIDATE CONSTRAINT attempts_outcome_valid;

COMMIT;

-- (A domain's check is validated under a SHARE lock of pgfence.jobs: writes wait for
-- the scan, 0.12 s per 1,000,000 rows measured; the lock taken by pg_temp.locked.)
BEGIN;

SELECT pg_temp.locked(ARRAY['ALTER DOMAIN pgfence.run_timeout VALIDATE CONSTRAINT run_timeout_valid']);

COMMIT;
