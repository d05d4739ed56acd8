-- Deploy pgfence:tables/history to pg
-- requires: tables/jobs
-- requires: tables/attempts
-- requires: tables/retention
-- requires: tables/rejections_cap
-- requires: functions/_checks
--
-- Finished work leaves the hot table. A done job (nearly all of the volume) is deleted
-- from pgfence.jobs by the complete that finishes it and written, in the same
-- transaction, as one row of pgfence.finished_jobs: the job, its result, its final
-- attempt (token, worker, claim, last heartbeat, lease) and its earlier attempts (moved
-- out of pgfence.attempts into earlier_attempts). Nothing updates or deletes a row of
-- it: retention drops whole partitions (functions/history).
--
-- failed and cancelled jobs stay in pgfence.jobs (they are rare, operators requeue
-- them, and their per-row purge is unchanged).

BEGIN;

-- Partitioned by purge_at = finished_at + the queue's retain_done when the job
-- finished: a partition holds the jobs whose retention ends within its range, so
-- dropping it once its upper bound has passed is retention, per queue, with no
-- per-row DELETE. A job is kept at least its retention and at most one partition
-- width longer. (A retention changed later applies to jobs finished afterwards.)
-- Keys: every unique key of a partitioned table must contain its partition key, and
-- every key of a table to be distributed by queue must contain queue: the primary key
-- is (id, queue, purge_at), id first so that a look-up by id alone uses it.
CREATE TABLE pgfence.finished_jobs (
    id               bigint      NOT NULL,
    queue            text        NOT NULL,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL,
    priority         integer     NOT NULL,
    attempts         integer     NOT NULL,
    max_attempts     integer     NOT NULL,
    available_at     timestamptz NOT NULL,
    recovery_policy  text        NOT NULL,
    idempotency_key  text,
    attempt_token    uuid,
    reserved_by      text,
    reserved_at      timestamptz,
    heartbeat_at     timestamptz,
    lease_expires_at timestamptz,
    reclaim_count    integer     NOT NULL,
    last_error       text,
    result           jsonb,
    created_at       timestamptz NOT NULL,
    finished_at      timestamptz NOT NULL,
    enqueued_by      text        NOT NULL,
    earlier_attempts jsonb,
    purge_at         timestamptz NOT NULL,
    CONSTRAINT finished_jobs_pkey PRIMARY KEY (id, queue, purge_at)
) PARTITION BY RANGE (purge_at);

-- When jobs finished, for reads by time (history_summary, stats): a BRIN index costs
-- next to nothing to keep, rows arriving in finished_at order.
CREATE INDEX finished_jobs_finished_idx ON pgfence.finished_jobs USING brin (finished_at);

-- A completion whose partition does not exist (the sweeper has not run for longer than
-- the partitions it creates ahead, or a retention reaching past them) lands here, so
-- no completion is ever refused for want of a partition. maintain_history empties it:
-- rows whose partition it creates are moved into that partition, rows whose purge_at
-- has passed are deleted (a bounded per-row DELETE: the one place history pays one).
CREATE TABLE pgfence.finished_jobs_default PARTITION OF pgfence.finished_jobs DEFAULT;
-- (Its own index on purge_at: the moves and deletes of the maintenance find their rows.)
CREATE INDEX finished_jobs_default_purge_idx ON pgfence.finished_jobs_default (purge_at);

COMMENT ON TABLE pgfence.finished_jobs IS
$$Done jobs, one row each, written by complete in the transaction that deletes the job from pgfence.jobs:
the job's columns, its result, its final attempt (attempt_token, reserved_by, reserved_at, heartbeat_at,
lease_expires_at; it ended at finished_at) and its earlier attempts (earlier_attempts). Append-only;
partitioned by purge_at (finished_at + the queue's retain_done then), whole partitions dropped by the sweeper
(pgfence.maintain_history). Read through pgfence.all_jobs, pgfence.all_attempts or pgfence.job(id).$$;
COMMENT ON COLUMN pgfence.finished_jobs.earlier_attempts IS
  'The attempts before the final one (failed, reclaimed, released), as pgfence.attempts rows in a JSON array, oldest first; NULL when there were none.';
COMMENT ON COLUMN pgfence.finished_jobs.purge_at IS
  'finished_at + the queue''s retain_done when it finished: the partition key; the row goes with its partition once the partition''s range has passed.';
COMMENT ON COLUMN pgfence.finished_jobs.lease_expires_at IS
  'The lease the final attempt held when it completed.';

-- The idempotency keys of done jobs, held until the purge deletes the row (once
-- purge_at has passed): the unique index on pgfence.jobs holds the keys of live jobs,
-- this table those of done ones. (queue, idempotency_key) is the key, queue first: ready to be
-- distributed by queue.
CREATE TABLE pgfence.held_keys (
    queue           text        NOT NULL,
    idempotency_key text        NOT NULL,
    job_id          bigint      NOT NULL,
    purge_at        timestamptz NOT NULL,
    CONSTRAINT held_keys_pkey PRIMARY KEY (queue, idempotency_key)
);
CREATE INDEX held_keys_purge_idx ON pgfence.held_keys (purge_at);
COMMENT ON TABLE pgfence.held_keys IS
  'Idempotency keys of done jobs (their history is in pgfence.finished_jobs), held until the purge deletes the row once purge_at has passed.';

-- How wide a history partition is, and the partitions maintain_history made.
CREATE TABLE pgfence.history_settings (
    one             boolean  PRIMARY KEY DEFAULT true CHECK (one),
    partition_width interval NOT NULL DEFAULT '1 hour',
    -- set when the maintenance dropped history: the next purge deletes the rejections
    -- of jobs gone from both tables, then clears it
    cleanup_due     boolean  NOT NULL DEFAULT false
);
INSERT INTO pgfence.history_settings DEFAULT VALUES;
COMMENT ON TABLE pgfence.history_settings IS
  'One row: the width of the history partitions maintain_history creates (set_history_partition_width), and whether rejections of dropped history wait to be deleted.';

CREATE TABLE pgfence.history_partitions (
    lower_bound timestamptz PRIMARY KEY,
    upper_bound timestamptz NOT NULL,
    name        text        NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK (upper_bound > lower_bound)
);
COMMENT ON TABLE pgfence.history_partitions IS
  'The partitions of pgfence.finished_jobs that maintain_history created and has not dropped yet: purge_at range and table name.';

-- Every job, live or done, with the columns of pgfence.jobs: what operators' and
-- producers' SQL reads instead of pgfence.jobs when it wants finished jobs too. The
-- caller's rights (security_invoker): row-level security of both tables applies, so a
-- producer sees only its own jobs here too.
CREATE VIEW pgfence.all_jobs WITH (security_invoker = true) AS
SELECT j.id, j.queue, j.kind, j.payload, j.status, j.priority, j.attempts, j.max_attempts, j.available_at,
       j.recovery_policy, j.idempotency_key, j.attempt_token, j.reserved_by, j.reserved_at, j.heartbeat_at,
       j.lease_expires_at, j.reclaim_count, j.last_error, j.result, j.created_at, j.updated_at, j.finished_at,
       j.enqueued_by
  FROM pgfence.jobs j
UNION ALL
SELECT h.id, h.queue, h.kind, h.payload, 'done'::text, h.priority, h.attempts, h.max_attempts, h.available_at,
       h.recovery_policy, h.idempotency_key, h.attempt_token, h.reserved_by, h.reserved_at, h.heartbeat_at,
       NULL::timestamptz, h.reclaim_count, h.last_error, h.result, h.created_at, h.finished_at, h.finished_at,
       h.enqueued_by
  FROM pgfence.finished_jobs h;
COMMENT ON VIEW pgfence.all_jobs IS
$$Every job with the columns of pgfence.jobs: the live, failed and cancelled ones (pgfence.jobs) and the done
ones (pgfence.finished_jobs, status done). Row-level security applies as in the tables (security_invoker).$$;

-- Every ended attempt with the columns of pgfence.attempts (and queue): the attempts of
-- jobs in pgfence.jobs, and those of done jobs, from their one history row.
CREATE VIEW pgfence.all_attempts WITH (security_invoker = true) AS
SELECT a.job_id, a.attempt, a.attempt_token, a.worker, a.claimed_at, a.heartbeat_at, a.lease_expires_at,
       a.ended_at, a.outcome, a.error
  FROM pgfence.attempts a
UNION ALL
SELECT h.id, e.attempt, e.attempt_token, e.worker, e.claimed_at, e.heartbeat_at, e.lease_expires_at,
       e.ended_at, e.outcome, e.error
  FROM pgfence.finished_jobs h
 CROSS JOIN LATERAL jsonb_to_recordset(h.earlier_attempts)
       AS e(attempt integer, attempt_token uuid, worker text, claimed_at timestamptz, heartbeat_at timestamptz,
            lease_expires_at timestamptz, ended_at timestamptz, outcome text, error text)
UNION ALL
SELECT h.id, h.attempts, h.attempt_token, h.reserved_by, h.reserved_at, h.heartbeat_at, h.lease_expires_at,
       h.finished_at, 'done'::text, NULL::text
  FROM pgfence.finished_jobs h;
COMMENT ON VIEW pgfence.all_attempts IS
$$Every ended attempt with the columns of pgfence.attempts: those of jobs in pgfence.jobs, and those of done
jobs (pgfence.finished_jobs: its earlier attempts and the final one, outcome done).$$;

-- Moving done jobs between pgfence.jobs and the history, in batches each committed on
-- its own (so neither direction holds the queue: rows are moved, no table is locked),
-- for the upgrade from a version that kept them in pgfence.jobs (data/finished_jobs) and
-- for the revert to it. Called by the deploying role, outside a transaction block.
-- Done jobs already past their retention are deleted instead of moved (the purge would
-- have deleted them).
CREATE PROCEDURE pgfence._move_done_to_history(batch integer DEFAULT 10000)
LANGUAGE plpgsql AS $$
DECLARE
    v_keep interval;
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pgfence, pg_temp', true);
    LOOP
        SELECT r.retain_done INTO v_keep FROM pgfence.retention r WHERE r.queue = '';
        WITH batch AS (
            SELECT j.id FROM pgfence.jobs j WHERE j.status = 'done' ORDER BY j.finished_at LIMIT batch
        ), gone AS (
            DELETE FROM pgfence.jobs j USING batch b WHERE j.id = b.id AND j.status = 'done'
            RETURNING j.*, j.finished_at + coalesce((SELECT q.retain_done FROM pgfence.retention q
                                                      WHERE q.queue = j.queue), v_keep) AS purge_at
        ), att AS (
            DELETE FROM pgfence.attempts a USING gone g WHERE a.job_id = g.id RETURNING a.*
        ), earlier AS (
            SELECT e.job_id, jsonb_agg(to_jsonb(e) - 'job_id' ORDER BY e.ended_at, e.attempt) AS attempts
              FROM att e JOIN gone g ON g.id = e.job_id
             WHERE NOT (e.outcome = 'done' AND e.attempt_token IS NOT DISTINCT FROM g.attempt_token)
             GROUP BY e.job_id
        ), keys AS (
            INSERT INTO pgfence.held_keys AS k (queue, idempotency_key, job_id, purge_at)
            SELECT g.queue, g.idempotency_key, g.id, g.purge_at FROM gone g
             WHERE g.idempotency_key IS NOT NULL AND g.purge_at > pg_catalog.clock_timestamp()
            ON CONFLICT ON CONSTRAINT held_keys_pkey
                DO UPDATE SET job_id = excluded.job_id, purge_at = excluded.purge_at
        )
        INSERT INTO pgfence.finished_jobs (id, queue, kind, payload, priority, attempts, max_attempts, available_at,
                                           recovery_policy, idempotency_key, attempt_token, reserved_by, reserved_at,
                                           heartbeat_at, lease_expires_at, reclaim_count, last_error, result,
                                           created_at, finished_at, enqueued_by, earlier_attempts, purge_at)
        SELECT g.id, g.queue, g.kind, g.payload, g.priority, g.attempts, g.max_attempts, g.available_at,
               g.recovery_policy, g.idempotency_key, g.attempt_token, g.reserved_by, g.reserved_at,
               g.heartbeat_at, f.lease_expires_at, g.reclaim_count, g.last_error, g.result,
               g.created_at, g.finished_at, g.enqueued_by, e.attempts, g.purge_at
          FROM gone g
          LEFT JOIN earlier e ON e.job_id = g.id
          LEFT JOIN att f ON f.job_id = g.id AND f.outcome = 'done' AND f.attempt_token = g.attempt_token
         WHERE g.purge_at > pg_catalog.clock_timestamp();
        EXIT WHEN NOT EXISTS (SELECT FROM pgfence.jobs j WHERE j.status = 'done');
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pgfence, pg_temp', true);
    END LOOP;
END $$;
COMMENT ON PROCEDURE pgfence._move_done_to_history(integer) IS
  'Private (upgrade): move the done jobs of pgfence.jobs, with their attempts, into pgfence.finished_jobs, batch rows per committed transaction; those past retention are deleted.';

CREATE PROCEDURE pgfence._move_history_to_jobs(batch integer DEFAULT 10000)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pgfence, pg_temp', true);
    LOOP
        WITH batch AS (
            SELECT h.id, h.queue, h.purge_at FROM pgfence.finished_jobs h LIMIT batch
        ), gone AS (
            DELETE FROM pgfence.finished_jobs h USING batch b
             WHERE h.id = b.id AND h.queue = b.queue AND h.purge_at = b.purge_at
            RETURNING h.*
        ), kept AS (
            SELECT * FROM gone g WHERE g.purge_at > pg_catalog.clock_timestamp()
        ), back AS (
            INSERT INTO pgfence.jobs (id, queue, kind, payload, status, priority, attempts, max_attempts,
                                      available_at, recovery_policy, idempotency_key, attempt_token, reserved_by,
                                      reserved_at, heartbeat_at, lease_expires_at, reclaim_count, last_error,
                                      result, created_at, updated_at, finished_at, enqueued_by)
            OVERRIDING SYSTEM VALUE
            SELECT g.id, g.queue, g.kind, g.payload, 'done', g.priority, g.attempts, g.max_attempts,
                   g.available_at, g.recovery_policy, g.idempotency_key, g.attempt_token, g.reserved_by,
                   g.reserved_at, g.heartbeat_at, NULL, g.reclaim_count, g.last_error,
                   g.result, g.created_at, g.finished_at, g.finished_at, g.enqueued_by
              FROM kept g
        ), att AS (
            INSERT INTO pgfence.attempts (job_id, attempt, attempt_token, worker, claimed_at, heartbeat_at,
                                          lease_expires_at, ended_at, outcome, error)
            SELECT g.id, e.attempt, e.attempt_token, e.worker, e.claimed_at, e.heartbeat_at, e.lease_expires_at,
                   e.ended_at, e.outcome, e.error
              FROM kept g
             CROSS JOIN LATERAL jsonb_to_recordset(g.earlier_attempts)
                   AS e(attempt integer, attempt_token uuid, worker text, claimed_at timestamptz,
                        heartbeat_at timestamptz, lease_expires_at timestamptz, ended_at timestamptz,
                        outcome text, error text)
            UNION ALL
            SELECT g.id, g.attempts, g.attempt_token, g.reserved_by, g.reserved_at, g.heartbeat_at,
                   g.lease_expires_at, g.finished_at, 'done', NULL
              FROM kept g WHERE g.attempt_token IS NOT NULL AND g.reserved_by IS NOT NULL AND g.reserved_at IS NOT NULL
        )
        DELETE FROM pgfence.held_keys k USING gone g
         WHERE k.queue = g.queue AND k.idempotency_key = g.idempotency_key AND k.job_id = g.id;
        EXIT WHEN NOT EXISTS (SELECT FROM pgfence.finished_jobs);
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pgfence, pg_temp', true);
    END LOOP;
END $$;
COMMENT ON PROCEDURE pgfence._move_history_to_jobs(integer) IS
  'Private (revert): move the done jobs of pgfence.finished_jobs back into pgfence.jobs with their attempts, batch rows per committed transaction; those past retention are deleted.';

-- Owner and grants, as the privileges change states them for the older tables: the
-- owner writes (through the functions), producers read their own done jobs (row-level
-- security, as on pgfence.jobs), operators read everything.
ALTER TABLE pgfence.finished_jobs OWNER TO pgfence_owner;
ALTER TABLE pgfence.finished_jobs_default OWNER TO pgfence_owner;
ALTER TABLE pgfence.held_keys OWNER TO pgfence_owner;
ALTER TABLE pgfence.history_settings OWNER TO pgfence_owner;
ALTER TABLE pgfence.history_partitions OWNER TO pgfence_owner;
ALTER VIEW pgfence.all_jobs OWNER TO pgfence_owner;
ALTER VIEW pgfence.all_attempts OWNER TO pgfence_owner;
REVOKE ALL ON TABLE pgfence.finished_jobs, pgfence.finished_jobs_default, pgfence.held_keys,
    pgfence.history_settings, pgfence.history_partitions, pgfence.all_jobs, pgfence.all_attempts FROM PUBLIC;
GRANT SELECT ON TABLE pgfence.finished_jobs, pgfence.all_jobs TO pgfence_producer, pgfence_operator;
GRANT SELECT ON TABLE pgfence.held_keys, pgfence.history_settings, pgfence.history_partitions,
    pgfence.all_attempts TO pgfence_operator;
ALTER TABLE pgfence.finished_jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY finished_jobs_producer_reads_own ON pgfence.finished_jobs FOR SELECT TO pgfence_producer
    USING (enqueued_by = current_user);
CREATE POLICY finished_jobs_operator_reads_all ON pgfence.finished_jobs FOR SELECT TO pgfence_operator
    USING (true);

COMMIT;
