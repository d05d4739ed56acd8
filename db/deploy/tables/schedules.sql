-- Deploy pgfence:tables/schedules to pg
-- requires: tables/jobs
-- requires: schema
--
-- Schedules: jobs enqueued by pgfence itself at the slots of a cron expression or every
-- fixed interval (functions/schedules writes both tables; fire_schedules, run by the
-- sweeper's passes, enqueues the due slots).
--   * pgfence.schedules: one row per schedule: its cron expression (parsed once by
--     schedule() into the arrays of allowed values) or its interval, the options of the
--     jobs it enqueues, its time zone and catch-up rule, who created it and paused it,
--     and when it fires next (next_fire_at is always after every slot fired).
--   * pgfence.schedule_slots: the ledger, one row per slot fired, (schedule, slot) unique,
--     written in the transaction of the slot's enqueue: a slot is enqueued once, whatever
--     the sweepers running at once or a crash between the enqueue and the bookkeeping.
--     Kept to the newest 1000 rows per schedule (older slots are behind next_fire_at and
--     are never looked at again).
-- Both are small operator tables, not keyed by queue: on a cluster they are reference
-- tables (docs/sql.md, "Keys for scale-out").

BEGIN;

CREATE TABLE pgfence.schedules (
    name            text        PRIMARY KEY,
    cron            text,
    every           interval,
    cron_minutes    integer[],
    cron_hours      integer[],
    cron_days       integer[],
    cron_months     integer[],
    cron_weekdays   integer[],
    cron_days_any   boolean,
    cron_weekdays_any boolean,
    kind            text        NOT NULL,
    payload         jsonb       NOT NULL DEFAULT '{}',
    queue           text        NOT NULL DEFAULT 'default',
    priority        integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL DEFAULT 3,
    recovery_policy text        NOT NULL DEFAULT 'auto',
    time_zone       text        NOT NULL DEFAULT 'UTC',
    catch_up        text        NOT NULL DEFAULT 'latest',
    slot_key        text,
    paused_at       timestamptz,
    paused_by       text,
    created_at      timestamptz NOT NULL,
    created_by      text        NOT NULL,
    next_fire_at    timestamptz NOT NULL,
    last_fire_at    timestamptz,
    last_slot       timestamptz,
    last_job_id     bigint,
    last_error      text,
    last_error_at   timestamptz,
    CONSTRAINT schedules_cron_or_every CHECK ((cron IS NULL) <> (every IS NULL)),
    CONSTRAINT schedules_cron_parsed CHECK ((cron IS NULL) = (cron_minutes IS NULL) AND (cron IS NULL) = (cron_hours IS NULL)
        AND (cron IS NULL) = (cron_days IS NULL) AND (cron IS NULL) = (cron_months IS NULL)
        AND (cron IS NULL) = (cron_weekdays IS NULL) AND (cron IS NULL) = (cron_days_any IS NULL)
        AND (cron IS NULL) = (cron_weekdays_any IS NULL)),
    CONSTRAINT schedules_catch_up CHECK (catch_up IN ('all', 'latest', 'none')),
    CONSTRAINT schedules_recovery_policy CHECK (recovery_policy IN ('auto', 'manual')),
    CONSTRAINT schedules_paused_by CHECK ((paused_at IS NULL) = (paused_by IS NULL))
);

-- fire_schedules' pick: the due, unpaused schedules, oldest slot first.
CREATE INDEX schedules_due_idx ON pgfence.schedules (next_fire_at) WHERE paused_at IS NULL;

COMMENT ON TABLE pgfence.schedules IS
$$Schedules: pgfence enqueues a job (kind, payload, queue, priority, max_attempts, recovery_policy) at each slot of
cron (5 fields, in time_zone) or every interval (aligned to the Unix epoch). Written by schedule, unschedule,
pause_schedule and resume_schedule (operators); fire_schedules (the sweeper's passes) enqueues the due slots.$$;
COMMENT ON COLUMN pgfence.schedules.cron IS
  'The cron expression as given (NULL for an every schedule); cron_* hold its parsed fields.';
COMMENT ON COLUMN pgfence.schedules.every IS
  'The fixed interval of an every schedule (1 second..366 days, whole seconds, no months); slots at multiples of it since 1970-01-01 00:00 UTC.';
COMMENT ON COLUMN pgfence.schedules.cron_days_any IS
  'The day-of-month field starts with * (Vixie cron: only when both day fields are restricted does a day match either).';
COMMENT ON COLUMN pgfence.schedules.cron_weekdays_any IS
  'The day-of-week field starts with *.';
COMMENT ON COLUMN pgfence.schedules.time_zone IS
  'The zone (a pg_timezone_names name) cron slots are wall-clock times of.';
COMMENT ON COLUMN pgfence.schedules.catch_up IS
  'Slots missed (sweeper down): all (each, the newest 100 at most), latest (only the newest), none (only a slot at most 1 minute late).';
COMMENT ON COLUMN pgfence.schedules.slot_key IS
  'NULL (default): jobs get payload as given; else each job''s payload also holds its slot (ISO 8601, UTC) under this key.';
COMMENT ON COLUMN pgfence.schedules.created_by IS
  'The role that created (or last replaced) the schedule: the enqueued_by of its jobs, so row-level security shows them to that role.';
COMMENT ON COLUMN pgfence.schedules.next_fire_at IS
  'The next slot to fire; always after every slot fired (firing moves it forward; replace and resume set it to the next slot after now).';
COMMENT ON COLUMN pgfence.schedules.last_slot IS
  'The last slot fired.';
COMMENT ON COLUMN pgfence.schedules.last_fire_at IS
  'When the last slot was fired (by the database clock).';
COMMENT ON COLUMN pgfence.schedules.last_job_id IS
  'The job the last slot enqueued.';
COMMENT ON COLUMN pgfence.schedules.last_error IS
  'Why the last fire of this schedule failed (its job could not be enqueued; retried every pass), until a slot fires.';
COMMENT ON COLUMN pgfence.schedules.last_error_at IS
  'When last_error happened.';

CREATE TABLE pgfence.schedule_slots (
    schedule text        NOT NULL REFERENCES pgfence.schedules (name) ON DELETE CASCADE,
    slot     timestamptz NOT NULL,
    job_id   bigint      NOT NULL,
    fired_at timestamptz NOT NULL,
    PRIMARY KEY (schedule, slot)
);

COMMENT ON TABLE pgfence.schedule_slots IS
$$The ledger of fired slots: one row per (schedule, slot), written in the transaction that enqueued the slot's job
(job_id), so a slot is enqueued exactly once. fire_schedules keeps the newest 1000 rows per schedule; a row
deleted with its schedule by unschedule.$$;

ALTER TABLE pgfence.schedules OWNER TO pgfence_owner;
ALTER TABLE pgfence.schedule_slots OWNER TO pgfence_owner;
REVOKE ALL ON TABLE pgfence.schedules, pgfence.schedule_slots FROM PUBLIC;
GRANT SELECT ON TABLE pgfence.schedules, pgfence.schedule_slots TO pgfence_operator;

COMMIT;
