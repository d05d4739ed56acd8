-- Deploy pgfence:functions/audit to pg
-- requires: tables/operator_audit
-- requires: functions/_checks
--
-- The operator audit: _audit writes one row per operator action (called by requeue,
-- cancel, mark_done and the bulk actions, in their transaction: the row commits with
-- the action or not at all); audit_of reads a job's rows; set_audit_retention and
-- purge_audit keep the table to its own retention (default 90 days).

BEGIN;

-- A note: NULL when not required; else 1..10,000 characters, not only whitespace.
CREATE OR REPLACE FUNCTION pgfence._check_note(note text, required boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF note IS NULL THEN
        IF required THEN
            PERFORM pgfence._raise_null('note', 'say why, e.g. ''charged in the PSP dashboard, ticket 123''');
        END IF;
    ELSIF btrim(note, E' \t\r\n') = '' OR char_length(note) > 10000 THEN
        PERFORM pgfence._raise_invalid('note', note,
            CASE WHEN char_length(note) > 10000 THEN 'longer than 10000 characters' ELSE 'blank' END,
            'pass 1..10000 characters saying why' || CASE WHEN required THEN '' ELSE ', or NULL' END);
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_note(text, boolean) IS
  'Private: check an operator note (22004 when required and NULL, 22023 when blank or over 10,000 characters).';

-- Record one operator action: who (the calling role and the session's login, which the
-- database vouches for; the pgfence.actor setting, which the console sets to its user
-- and which is only what the caller says), when, what, the jobs, the note.
CREATE OR REPLACE FUNCTION pgfence._audit(action text, queues text[], job_ids bigint[], note text,
                                          detail jsonb DEFAULT NULL) RETURNS bigint
LANGUAGE sql AS $$
    INSERT INTO pgfence.operator_audit (db_role, login, actor, action, queues, job_ids, count, note, detail)
    VALUES (pgfence._invoker(), session_user, nullif(left(current_setting('pgfence.actor', true), 200), ''),
            _audit.action, coalesce(_audit.queues, '{}'), coalesce(_audit.job_ids, '{}'),
            coalesce(cardinality(_audit.job_ids), 0), _audit.note, _audit.detail)
    RETURNING id
$$;
COMMENT ON FUNCTION pgfence._audit(text, text[], bigint[], text, jsonb) IS
  'Private: write one pgfence.operator_audit row (db_role = the calling role, login = session_user, actor = the pgfence.actor setting).';

-- Operators and viewers: the audit rows of one job, oldest first (what the console
-- shows on the job's page). A bulk action's row is returned with how many jobs it
-- touched, not their ids.
CREATE OR REPLACE FUNCTION pgfence.audit_of(job_id bigint)
RETURNS TABLE(id bigint, at timestamptz, db_role text, login text, actor text, action text, count integer,
              note text, detail jsonb)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF audit_of.job_id IS NULL THEN
        PERFORM pgfence._raise_null('job_id', 'pass the id of the job whose audit rows to read');
    END IF;
    RETURN QUERY
    SELECT a.id, a.at, a.db_role, a.login, a.actor, a.action, a.count, a.note, a.detail
      FROM pgfence.operator_audit a
     WHERE a.job_ids @> ARRAY[audit_of.job_id]
     ORDER BY a.at, a.id;
END $$;
COMMENT ON FUNCTION pgfence.audit_of(bigint) IS
$$Operators and viewers: the operator audit rows that acted on a job, oldest first (id, at, db_role, login, actor,
action, count of jobs in that action, note, detail). Errors: 22004.$$;

-- Operators: how long audit rows are kept (1 day..100 years; default 90 days).
CREATE OR REPLACE FUNCTION pgfence.set_audit_retention(retain interval) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_old interval;
BEGIN
    PERFORM pgfence._check_interval('retain', retain, interval '1 day', interval '100 years', '1 day..100 years',
        'pass how long operator audit rows are kept, e.g. ''90 days''');
    SELECT s.retain INTO v_old FROM pgfence.operator_audit_settings s FOR NO KEY UPDATE;
    UPDATE pgfence.operator_audit_settings SET retain = set_audit_retention.retain;
    PERFORM pgfence._audit('set_audit_retention', NULL, NULL, NULL,
                           jsonb_build_object('retain', retain::text, 'was', v_old::text));
END $$;
COMMENT ON FUNCTION pgfence.set_audit_retention(interval) IS
$$Operator: keep operator audit rows for retain (1 day..100 years, default 90 days) before purge_audit deletes them;
audited itself. Errors: 22004, 22023.$$;

-- Delete up to max_rows audit rows past their retention, oldest first.
CREATE OR REPLACE FUNCTION pgfence.purge_audit(max_rows integer DEFAULT 10000) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_count bigint;
BEGIN
    PERFORM pgfence._check_range('max_rows', max_rows, 1, 10000);
    DELETE FROM pgfence.operator_audit a
     WHERE a.id = ANY (ARRAY(SELECT x.id FROM pgfence.operator_audit x
                              WHERE x.at < clock_timestamp() - (SELECT s.retain FROM pgfence.operator_audit_settings s)
                              ORDER BY x.at LIMIT max_rows));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END $$;
COMMENT ON FUNCTION pgfence.purge_audit(integer) IS
$$Operator: delete up to max_rows (1..10000) operator audit rows older than their retention (set_audit_retention,
default 90 days), oldest first; returns how many. purge_finished (the sweeper, every 10 s) calls it. Errors:
22004, 22023.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('audit_of',            '{pgfence_operator,pgfence_viewer}'),
    ('set_audit_retention', '{pgfence_operator}'),
    ('purge_audit',         '{pgfence_operator}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
