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

BEGIN;

ALTER TABLE pgfence.jobs ADD COLUMN timeout interval;
-- Stored as a length of time only (no months or days parts, see enqueue), so the
-- deadline does not depend on the session's time zone: 1 ms .. 30 days.
ALTER TABLE pgfence.jobs ADD CONSTRAINT jobs_timeout_valid CHECK (
    timeout BETWEEN interval '1 millisecond' AND interval '30 days'
    AND extract(month FROM timeout) = 0 AND extract(day FROM timeout) = 0);
-- A lease never outlives its attempt's deadline.
ALTER TABLE pgfence.jobs ADD CONSTRAINT jobs_lease_within_timeout CHECK (
    timeout IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= reserved_at + timeout);
COMMENT ON COLUMN pgfence.jobs.timeout IS
  'Run timeout of each attempt (NULL: none): its lease ends at reserved_at + timeout at the latest, and the reclaim then ends it as timed_out.';

ALTER TABLE pgfence.attempts DROP CONSTRAINT attempts_outcome_valid;
ALTER TABLE pgfence.attempts ADD CONSTRAINT attempts_outcome_valid CHECK (
    outcome IN ('done', 'failed', 'reclaimed', 'released', 'cancelled', 'timed_out'));
COMMENT ON COLUMN pgfence.attempts.outcome IS
  'done | failed (error kept; the job retried or was dead-lettered) | reclaimed (lease expired) | released (given back) | cancelled | timed_out (its lease ended at the run timeout)';

COMMIT;
