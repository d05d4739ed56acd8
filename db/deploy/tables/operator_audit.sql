-- Deploy pgfence:tables/operator_audit to pg
-- requires: tables/jobs
--
-- Every operator action, one row per call (a bulk action is one row with every job id
-- it acted on): who (the database role, which the database vouches for, and the
-- console's user, which is only what the caller says), when, what, the jobs and the
-- note. Written only by the operator functions (pgfence._audit); kept for its own
-- retention (operator_audit_settings.retain, default 90 days, longer than any job's
-- default retention), deleted by purge_audit, which purge_finished calls.

BEGIN;

CREATE TABLE pgfence.operator_audit (
    id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    db_role  text        NOT NULL,
    login    text        NOT NULL,
    actor    text,
    action   text        NOT NULL,
    queues   text[]      NOT NULL DEFAULT '{}',
    job_ids  bigint[]    NOT NULL DEFAULT '{}',
    count    integer     NOT NULL DEFAULT 0,
    note     text,
    detail   jsonb,
    CONSTRAINT operator_audit_count CHECK (count = cardinality(job_ids))
);
CREATE INDEX operator_audit_at_idx ON pgfence.operator_audit (at);
-- (audit_of(job_id): the rows whose job_ids contain it)
CREATE INDEX operator_audit_job_ids_idx ON pgfence.operator_audit USING gin (job_ids);
COMMENT ON TABLE pgfence.operator_audit IS
$$Operator actions (requeue, cancel, mark_done, their bulk forms, ...): when, db_role (the calling role, SET ROLE
respected: what the database vouches for), login (session_user), actor (pgfence.actor setting: the console's
user, informational), action, queues, the job ids acted on, how many, the note and details. Kept
operator_audit_settings.retain (default 90 days), deleted by purge_audit (called by purge_finished).$$;
COMMENT ON COLUMN pgfence.operator_audit.db_role IS
  'The calling role as the database knows it (SET ROLE respected, as enqueued_by and rejections.caller).';
COMMENT ON COLUMN pgfence.operator_audit.actor IS
  'current_setting(''pgfence.actor'') when the action ran: the console user, as the caller says (informational).';

CREATE TABLE pgfence.operator_audit_settings (
    one    boolean  PRIMARY KEY DEFAULT true CHECK (one),
    retain interval NOT NULL DEFAULT '90 days'
);
INSERT INTO pgfence.operator_audit_settings DEFAULT VALUES;
COMMENT ON TABLE pgfence.operator_audit_settings IS
  'One row: how long operator_audit rows are kept (set_audit_retention; default 90 days).';

ALTER TABLE pgfence.operator_audit OWNER TO pgfence_owner;
ALTER TABLE pgfence.operator_audit_settings OWNER TO pgfence_owner;
REVOKE ALL ON TABLE pgfence.operator_audit, pgfence.operator_audit_settings FROM PUBLIC;
GRANT SELECT ON TABLE pgfence.operator_audit, pgfence.operator_audit_settings TO pgfence_operator;
-- (pgfence_viewer's grant: in the change viewer, which creates it.)

COMMIT;
