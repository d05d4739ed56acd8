-- Deploy pgfence:tables/job_row_rules to pg
-- requires: tables/job_domains
--
-- The five rules of pgfence.jobs that read several columns are one CHECK that calls
-- pgfence._job_row_rules, not five CHECKs whose 6,600 characters of stored tree every
-- INSERT and UPDATE statement parsed and planned again (docs/performance.md, "What a
-- row's rules cost each statement"): the call's tree is short, and PL/pgSQL plans the
-- function's expression once per session. The rules are the same, and a row that
-- breaks one still gets 23514 naming it (the CHECK of the old name; the first in the
-- order of their names, as before, when it breaks several).
--
-- The CHECK is added NOT VALID and the old ones dropped under pg_temp.locked (no scan:
-- the ACCESS EXCLUSIVE lock is held for an instant), then validated apart (SHARE UPDATE
-- EXCLUSIVE: reads and writes go on).

\ir ../../include/lock_retry.sql

BEGIN;

-- The operators are qualified: the function runs wherever pgfence.jobs is written, and
-- a look-alike operator in a schema a caller's search_path puts before pg_catalog must
-- never be the one it calls. STABLE, not IMMUTABLE: timestamptz + interval depends on
-- the time zone (as it did in the CHECK). The rules are tried in the order of their
-- names, the order in which PostgreSQL tried the five CHECKs, so a row that breaks
-- several is refused naming the same rule as before.
CREATE FUNCTION pgfence._job_row_rules(id bigint, status text, attempts integer, attempt_token uuid,
                                       reserved_by text, reserved_at timestamptz, heartbeat_at timestamptz,
                                       lease_expires_at timestamptz, finished_at timestamptz, timeout interval)
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    broken text;
BEGIN
    -- NOT (rule) is NULL, so passes, where the rule is NULL: as a CHECK.
    broken := CASE
        -- finished_at marks the terminal states, and only them.
        WHEN NOT ((status OPERATOR(pg_catalog.=) 'done' OR status OPERATOR(pg_catalog.=) 'failed'
                   OR status OPERATOR(pg_catalog.=) 'cancelled') OPERATOR(pg_catalog.=) (finished_at IS NOT NULL))
            THEN 'jobs_finished_at_terminal'
        -- Only a processing row has a lease.
        WHEN NOT ((status OPERATOR(pg_catalog.=) 'processing') OPERATOR(pg_catalog.=) (lease_expires_at IS NOT NULL))
            THEN 'jobs_lease_only_when_processing'
        -- A lease never outlives its attempt's run timeout.
        WHEN NOT (timeout IS NULL OR lease_expires_at IS NULL
                  OR lease_expires_at OPERATOR(pg_catalog.<=) (reserved_at OPERATOR(pg_catalog.+) timeout))
            THEN 'jobs_lease_within_timeout'
        -- A processing row always carries its fence and its lease.
        WHEN NOT (status OPERATOR(pg_catalog.<>) 'processing'
                  OR (attempt_token IS NOT NULL AND lease_expires_at IS NOT NULL AND reserved_by IS NOT NULL
                      AND reserved_at IS NOT NULL AND attempts OPERATOR(pg_catalog.>=) 1))
            THEN 'jobs_processing_has_lease'
        -- A queued row belongs to nobody.
        WHEN NOT (status OPERATOR(pg_catalog.<>) 'queued'
                  OR (attempt_token IS NULL AND lease_expires_at IS NULL AND reserved_by IS NULL
                      AND reserved_at IS NULL AND heartbeat_at IS NULL))
            THEN 'jobs_queued_has_no_lease'
    END;
    IF broken IS NULL THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION 'new row for relation "jobs" violates check constraint "%"', broken
        USING ERRCODE = 'check_violation', CONSTRAINT = broken, TABLE = 'jobs', SCHEMA = 'pgfence',
              DETAIL = pg_catalog.format(
                  'job %s: status %s, attempts %s, attempt_token %s, reserved_by %s, reserved_at %s, heartbeat_at %s, '
                  'lease_expires_at %s, finished_at %s, timeout %s', id, status, attempts,
                  CASE WHEN attempt_token IS NULL THEN 'NULL' ELSE 'set' END,
                  CASE WHEN reserved_by IS NULL THEN 'NULL' ELSE 'set' END,
                  coalesce(reserved_at::text, 'NULL'), coalesce(heartbeat_at::text, 'NULL'),
                  coalesce(lease_expires_at::text, 'NULL'), coalesce(finished_at::text, 'NULL'),
                  coalesce(timeout::text, 'NULL'));
END $$;
ALTER FUNCTION pgfence._job_row_rules(bigint, text, integer, uuid, text, timestamptz, timestamptz, timestamptz,
                                      timestamptz, interval) OWNER TO pgfence_owner;
COMMENT ON FUNCTION pgfence._job_row_rules(bigint, text, integer, uuid, text, timestamptz, timestamptz, timestamptz,
                                           timestamptz, interval) IS
$$Private: the rules of a pgfence.jobs row that read several columns (its CHECK jobs_row_rules): finished_at is set
exactly in done, failed and cancelled; only a processing row has a lease; a lease ends by reserved_at + timeout; a
processing row has its token, lease, worker, reserved_at and attempts >= 1; a queued row has none of token, lease,
worker, reserved_at, heartbeat. true, or 23514 naming the first rule (in the order of their names) the row breaks.$$;
-- (Before the lock: nothing of this waits behind the table.)
SELECT pgfence._apply_privileges();

SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.jobs'
    '    DROP CONSTRAINT jobs_processing_has_lease, DROP CONSTRAINT jobs_queued_has_no_lease,'
    '    DROP CONSTRAINT jobs_lease_only_when_processing, DROP CONSTRAINT jobs_finished_at_terminal,'
    '    DROP CONSTRAINT jobs_lease_within_timeout,'
    '    ADD CONSTRAINT jobs_row_rules CHECK (pgfence._job_row_rules(id, status, attempts, attempt_token,'
    '        reserved_by, reserved_at, heartbeat_at, lease_expires_at, finished_at, timeout)) NOT VALID']);
COMMENT ON CONSTRAINT jobs_row_rules ON pgfence.jobs IS
  'The rules that read several columns, in pgfence._job_row_rules (23514 names the rule a row breaks).';

COMMIT;

-- (SHARE UPDATE EXCLUSIVE: reads and writes go on.)
BEGIN;

ALTER TABLE pgfence.jobs VALIDATE CONSTRAINT jobs_row_rules;

COMMIT;
