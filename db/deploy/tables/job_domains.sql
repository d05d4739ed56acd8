-- Deploy pgfence:tables/job_domains to pg
-- requires: tables/jobs
-- requires: tables/history
-- requires: tables/job_timeouts
-- requires: tables/job_unique_for
--
-- The rules of pgfence.jobs that read one column are its columns' domains, not CHECKs of
-- the table: PostgreSQL parses and plans a table's CHECK constraints again for every
-- INSERT or UPDATE statement, which every single-row enqueue, claim and fail paid, and
-- keeps a domain's checks planned per session (docs/performance.md, "What a row's rules
-- cost each statement"). The rules are the same: the status and policy values, names of
-- 1..128 characters, keys of 1..255, a payload that is a JSON object, counts >= 0,
-- max_attempts >= 1. The five rules that read several columns stay CHECKs.
--
-- The domains are made without their checks, the columns changed to them (a domain
-- without a check over the same type: no rewrite; the partial indexes are built again,
-- the ACCESS EXCLUSIVE lock held 4.4 s per 1,000,000 rows, measured), the checks added
-- NOT VALID (every row passed the CHECKs they replace) and validated each in a
-- transaction of its own (a SHARE lock on pgfence.jobs while it reads the table: writes
-- wait, 0.10-0.22 s per 1,000,000 rows each). The locks are taken by pg_temp.locked
-- (100 ms tries). A column a view reads cannot change type, so pgfence.all_jobs is
-- dropped and made again as it was (its definition, options, comment and grants read
-- from the catalog first); its columns stay text, jsonb and integer (a UNION with the
-- history's columns has the base types), and its jobs branch casts to them (below).

\ir ../../include/lock_retry.sql
\ir ../../include/keep_view.sql

BEGIN;

CREATE DOMAIN pgfence.job_status AS text;
CREATE DOMAIN pgfence.recovery_policy AS text;
CREATE DOMAIN pgfence.job_name AS text;
CREATE DOMAIN pgfence.idempotency_key AS text;
CREATE DOMAIN pgfence.job_payload AS jsonb;
CREATE DOMAIN pgfence.job_count AS integer;
CREATE DOMAIN pgfence.max_attempts AS integer;
ALTER DOMAIN pgfence.job_status OWNER TO pgfence_owner;
ALTER DOMAIN pgfence.recovery_policy OWNER TO pgfence_owner;
ALTER DOMAIN pgfence.job_name OWNER TO pgfence_owner;
ALTER DOMAIN pgfence.idempotency_key OWNER TO pgfence_owner;
ALTER DOMAIN pgfence.job_payload OWNER TO pgfence_owner;
ALTER DOMAIN pgfence.job_count OWNER TO pgfence_owner;
ALTER DOMAIN pgfence.max_attempts OWNER TO pgfence_owner;
COMMENT ON DOMAIN pgfence.job_status IS
  'A job''s status: queued, processing, done, failed, manual_review or cancelled.';
COMMENT ON DOMAIN pgfence.recovery_policy IS 'What an expired lease does to its job: auto or manual.';
COMMENT ON DOMAIN pgfence.job_name IS 'A queue or kind: 1 to 128 characters.';
COMMENT ON DOMAIN pgfence.idempotency_key IS 'An idempotency key: 1 to 255 characters.';
COMMENT ON DOMAIN pgfence.job_payload IS 'A job''s payload: a JSON object.';
COMMENT ON DOMAIN pgfence.job_count IS 'A count of attempts or reclaims: 0 or more.';
COMMENT ON DOMAIN pgfence.max_attempts IS 'A job''s attempt limit: 1 or more.';

SELECT pg_temp.keep_view('pgfence.all_jobs');
DROP VIEW pgfence.all_jobs;
SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.jobs'
    '    DROP CONSTRAINT jobs_status_valid, DROP CONSTRAINT jobs_recovery_policy_valid,'
    '    DROP CONSTRAINT jobs_queue_length, DROP CONSTRAINT jobs_kind_length,'
    '    DROP CONSTRAINT jobs_idempotency_key_length, DROP CONSTRAINT jobs_payload_object,'
    '    DROP CONSTRAINT jobs_attempts_nonnegative, DROP CONSTRAINT jobs_max_attempts_positive,'
    '    ALTER COLUMN status TYPE pgfence.job_status,'
    '    ALTER COLUMN recovery_policy TYPE pgfence.recovery_policy,'
    '    ALTER COLUMN queue TYPE pgfence.job_name, ALTER COLUMN kind TYPE pgfence.job_name,'
    '    ALTER COLUMN idempotency_key TYPE pgfence.idempotency_key,'
    '    ALTER COLUMN payload TYPE pgfence.job_payload,'
    '    ALTER COLUMN attempts TYPE pgfence.job_count, ALTER COLUMN reclaim_count TYPE pgfence.job_count,'
    '    ALTER COLUMN max_attempts TYPE pgfence.max_attempts']);
ALTER DOMAIN pgfence.job_status ADD CONSTRAINT job_status_valid CHECK (
    VALUE IN ('queued', 'processing', 'done', 'failed', 'manual_review', 'cancelled')) NOT VALID;
ALTER DOMAIN pgfence.recovery_policy ADD CONSTRAINT recovery_policy_valid CHECK (VALUE IN ('auto', 'manual')) NOT VALID;
ALTER DOMAIN pgfence.job_name ADD CONSTRAINT job_name_length CHECK (char_length(VALUE) BETWEEN 1 AND 128) NOT VALID;
ALTER DOMAIN pgfence.idempotency_key ADD CONSTRAINT idempotency_key_length CHECK (
    char_length(VALUE) BETWEEN 1 AND 255) NOT VALID;
ALTER DOMAIN pgfence.job_payload ADD CONSTRAINT job_payload_object CHECK (jsonb_typeof(VALUE) = 'object') NOT VALID;
ALTER DOMAIN pgfence.job_count ADD CONSTRAINT job_count_nonnegative CHECK (VALUE >= 0) NOT VALID;
ALTER DOMAIN pgfence.max_attempts ADD CONSTRAINT max_attempts_positive CHECK (VALUE >= 1) NOT VALID;
SELECT pg_temp.restore_view('pgfence.all_jobs');
-- Its jobs branch casts the domain columns to their base types. A UNION ALL branch whose
-- column has another type than the union's keeps PostgreSQL from pushing a condition on
-- that column into the branches: the dashboard's inbox (status = 'manual_review' over
-- 1,000,000 jobs) read every job of both tables, 46 ms -> 3.9 s, until this. (CREATE OR
-- REPLACE: the grants, owner and comment just restored stay.)
CREATE OR REPLACE VIEW pgfence.all_jobs WITH (security_invoker = true) AS
SELECT j.id, j.queue::text, j.kind::text, j.payload::jsonb, j.status::text, j.priority, j.attempts::integer,
       j.max_attempts::integer, j.available_at, j.recovery_policy::text, j.idempotency_key::text, j.attempt_token,
       j.reserved_by, j.reserved_at, j.heartbeat_at, j.lease_expires_at, j.reclaim_count::integer, j.last_error,
       j.result, j.created_at, j.updated_at, j.finished_at, j.enqueued_by
  FROM pgfence.jobs j
UNION ALL
SELECT h.id, h.queue, h.kind, h.payload, 'done'::text, h.priority, h.attempts, h.max_attempts, h.available_at,
       h.recovery_policy, h.idempotency_key, h.attempt_token, h.reserved_by, h.reserved_at, h.heartbeat_at,
       NULL::timestamptz, h.reclaim_count, h.last_error, h.result, h.created_at, h.finished_at, h.finished_at,
       h.enqueued_by
  FROM pgfence.finished_jobs h;

COMMIT;

-- Each domain's check validated in a transaction of its own, so writes wait for one
-- scan at a time.
BEGIN;
SELECT pg_temp.locked(ARRAY['ALTER DOMAIN pgfence.job_status VALIDATE CONSTRAINT job_status_valid']);
COMMIT;
BEGIN;
SELECT pg_temp.locked(ARRAY['ALTER DOMAIN pgfence.recovery_policy VALIDATE CONSTRAINT recovery_policy_valid']);
COMMIT;
BEGIN;
SELECT pg_temp.locked(ARRAY['ALTER DOMAIN pgfence.job_name VALIDATE CONSTRAINT job_name_length']);
COMMIT;
BEGIN;
SELECT pg_temp.locked(ARRAY['ALTER DOMAIN pgfence.idempotency_key VALIDATE CONSTRAINT idempotency_key_length']);
COMMIT;
BEGIN;
SELECT pg_temp.locked(ARRAY['ALTER DOMAIN pgfence.job_payload VALIDATE CONSTRAINT job_payload_object']);
COMMIT;
BEGIN;
SELECT pg_temp.locked(ARRAY['ALTER DOMAIN pgfence.job_count VALIDATE CONSTRAINT job_count_nonnegative']);
COMMIT;
BEGIN;
SELECT pg_temp.locked(ARRAY['ALTER DOMAIN pgfence.max_attempts VALIDATE CONSTRAINT max_attempts_positive']);
COMMIT;
