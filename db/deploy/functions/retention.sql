-- Deploy pgfence:functions/retention to pg (reworked after @v0.7.0)
-- requires: functions/retention@v0.7.0
-- requires: functions/history
-- requires: tables/rejections_cap
-- requires: tables/metric_totals
-- requires: functions/audit
--
-- purge_finished and set_retention. The purge deletes a job's count of refused calls
-- not stored too, and waits at most 5 s for a lock. Changed after @v0.5.0: done jobs
-- are in the history (pgfence.finished_jobs), whose expired partitions are dropped
-- whole: the purge runs the partition maintenance (_maintain_history), deletes the
-- held idempotency keys whose history is gone, and, after a partition went, the
-- rejections of jobs that no longer exist anywhere. failed and cancelled jobs (and done
-- ones an older version left in pgfence.jobs) are still deleted row by row.
-- Changed after @v0.7.0: what the purge deletes (done jobs an older version left in
-- pgfence.jobs, attempts by outcome, stored rejections and the count of those not
-- stored) is added to pgfence.metric_totals in the same statement, so the counters of
-- pgfence.metrics() never go backwards; and it purges the operator audit past its own
-- retention (purge_audit).

BEGIN;

-- Delete jobs of pgfence.jobs the caller has locked FOR UPDATE, with their attempts,
-- rejections and count of rejections not stored, adding what goes to
-- pgfence.metric_totals (the metrics' counters never go backwards); returns how many.
-- Used by purge_finished (retention) and purge_many (an operator's fenced delete).
CREATE OR REPLACE FUNCTION pgfence._forget_jobs(job_ids bigint[]) RETURNS bigint
LANGUAGE sql AS $$
    WITH del AS (
        DELETE FROM pgfence.jobs j WHERE j.id = ANY (_forget_jobs.job_ids) RETURNING j.id, j.queue, j.status
    ), del_attempts AS (
        DELETE FROM pgfence.attempts a USING del WHERE a.job_id = del.id RETURNING a.queue, a.outcome
    ), del_rejections AS (
        DELETE FROM pgfence.rejections r USING del WHERE r.job_id = del.id RETURNING r.queue
    ), del_overflow AS (
        DELETE FROM pgfence.rejection_overflow o USING del WHERE o.job_id = del.id RETURNING o.queue, o.not_stored
    ), totals AS (
        INSERT INTO pgfence.metric_totals AS t (metric, queue, label, value)
        SELECT c.metric, c.queue, c.label, sum(c.n)::bigint FROM (
            SELECT 'jobs_done'::text AS metric, del.queue, ''::text AS label, 1::bigint AS n
              FROM del WHERE del.status = 'done'
            UNION ALL SELECT 'attempts_ended', a.queue, a.outcome, 1 FROM del_attempts a
            UNION ALL SELECT 'rejections', r.queue, '', 1 FROM del_rejections r
            UNION ALL SELECT 'rejections', o.queue, '', o.not_stored FROM del_overflow o) c
         GROUP BY c.metric, c.queue, c.label
        ON CONFLICT ON CONSTRAINT metric_totals_pkey DO UPDATE SET value = t.value + excluded.value
    )
    SELECT count(*) FROM del
$$;
COMMENT ON FUNCTION pgfence._forget_jobs(bigint[]) IS
  'Private: delete jobs the caller holds locked, with their attempts and rejections, their counts added to pgfence.metric_totals; returns how many.';

-- Delete up to max_jobs finished jobs (done, cancelled, failed) whose retention
-- has passed, oldest first, with their attempts and rejections; returns how many.
-- The background sweeper calls it every 10 s so the hot table stays small.
CREATE OR REPLACE FUNCTION pgfence.purge_finished(max_jobs integer DEFAULT 1000) RETURNS bigint
LANGUAGE plpgsql
-- The jobs are taken SKIP LOCKED, and a refusal being recorded holds its job (FOR KEY
-- SHARE, see functions/_fence), so nothing here should wait on another session; if
-- something does, it fails after 5 s (the sweeper logs it and goes on) instead of
-- stalling the sweeper, which holds its status row meanwhile. (A worker that kept a
-- transaction open after a refused call on a job with 100 stored rejections once held
-- the purge, and with it every sweeper run, for as long as it liked.)
SET lock_timeout = '5s' AS $$
DECLARE
    v_cutoff timestamptz;
    v_count bigint;
    v_orphans bigint;
BEGIN
    PERFORM pgfence._check_range('max_jobs', max_jobs, 1, 10000);
    -- (the partition maintenance below decides what to drop from what its statements
    -- see: a snapshot older than the call would show a partition as empty whose rows
    -- committed since, and it would be dropped with them)
    PERFORM pgfence._check_isolation('purge_finished');
    -- Idempotency keys of done jobs whose retention has passed (those of a dropped
    -- partition went with it). The past purge_at is asked of the row deleted too: a key
    -- row that a completion took over (a new job with that key, a new purge_at) while
    -- this waited for it is read again after the wait, and only the outer condition
    -- is (the subquery's answer stands): without it, the key of a job just done, kept
    -- for its retention, was freed, and an enqueue with it made a second job.
    DELETE FROM pgfence.held_keys k
     WHERE (k.queue, k.idempotency_key) IN (SELECT x.queue, x.idempotency_key FROM pgfence.held_keys x
                                             WHERE x.purge_at <= clock_timestamp() LIMIT max_jobs)
       AND k.purge_at <= clock_timestamp();
    IF (SELECT s.cleanup_due FROM pgfence.history_settings s) THEN
        -- Rejections of done jobs whose history went with its partition (a done job's
        -- refusals are kept while its history is), up to 10,000 jobs' worth a call.
        WITH orphans AS (
            SELECT DISTINCT r.job_id FROM pgfence.rejections r
             WHERE NOT EXISTS (SELECT FROM pgfence.jobs j WHERE j.id = r.job_id)
               AND NOT EXISTS (SELECT FROM pgfence.finished_jobs h WHERE h.id = r.job_id)
             LIMIT 10000
        ), del_rejections AS (
            DELETE FROM pgfence.rejections r USING orphans o WHERE r.job_id = o.job_id RETURNING r.queue
        ), del_overflow AS (
            DELETE FROM pgfence.rejection_overflow o
             WHERE NOT EXISTS (SELECT FROM pgfence.jobs j WHERE j.id = o.job_id)
               AND NOT EXISTS (SELECT FROM pgfence.finished_jobs h WHERE h.id = o.job_id)
            RETURNING o.queue, o.not_stored
        ), totals AS (
            INSERT INTO pgfence.metric_totals AS t (metric, queue, label, value)
            SELECT 'rejections', c.queue, '', sum(c.n)::bigint FROM (
                SELECT r.queue, 1::bigint AS n FROM del_rejections r
                UNION ALL SELECT o.queue, o.not_stored FROM del_overflow o) c
             GROUP BY c.queue
            ON CONFLICT ON CONSTRAINT metric_totals_pkey DO UPDATE SET value = t.value + excluded.value
        )
        SELECT count(*) INTO v_orphans FROM orphans;
        IF v_orphans < 10000 THEN
            UPDATE pgfence.history_settings SET cleanup_due = false;
        END IF;
    END IF;
    -- Nothing younger than the shortest retention can go: bound the index scan.
    -- (Retentions counted in UTC, as complete counts a done job's: _utc_plus.)
    SELECT pgfence._utc_plus(clock_timestamp(), -min(least(r.retain_done, r.retain_failed))) INTO v_cutoff
      FROM pgfence.retention r;
    SELECT pgfence._forget_jobs(ARRAY(
        SELECT j.id
          FROM pgfence.jobs j
          JOIN pgfence.retention d ON d.queue = ''
          LEFT JOIN pgfence.retention q ON q.queue = j.queue
         WHERE j.status IN ('done', 'failed', 'cancelled')
           AND j.finished_at < v_cutoff
           AND j.finished_at < pgfence._utc_plus(clock_timestamp(),
                   -CASE WHEN j.status = 'failed' THEN coalesce(q.retain_failed, d.retain_failed)
                         ELSE coalesce(q.retain_done, d.retain_done) END)
         ORDER BY j.finished_at
         LIMIT max_jobs
           FOR UPDATE OF j SKIP LOCKED)) INTO v_count;
    -- The operator audit past its own retention (operator_audit_settings).
    PERFORM pgfence.purge_audit(10000);
    -- The history's partitions last: a DROP holds pgfence.finished_jobs ACCESS EXCLUSIVE
    -- until this transaction ends (every completion waits for it), so nothing comes
    -- after it but the commit.
    PERFORM pgfence._maintain_history();
    RETURN v_count;
END $$;

COMMENT ON FUNCTION pgfence.purge_finished(integer) IS
$$Delete up to max_jobs (1..10000) failed and cancelled jobs whose retention has passed (pgfence.retention:
per queue, default cancelled 1 day, failed 7 days), oldest first, with their attempts and rejections (and the
count of rejections not stored); returns how many. Done jobs are in the history (pgfence.finished_jobs),
partitioned by purge_at (finished_at + the queue's retain_done): the purge also runs the partition
maintenance (_maintain_history, last: expired partitions dropped with their jobs' idempotency keys, new ones
made ahead), after freeing up to max_jobs keys of done jobs past retention (pgfence.held_keys) and deleting the
rejections of jobs whose history was dropped. What it deletes is added to pgfence.metric_totals (metrics()
counters never go backwards), and it purges operator audit rows past their retention (purge_audit). The
background sweeper runs it every 10 s. A deleted job's idempotency key is free again. Needs READ COMMITTED.
Errors: 22004, 22023, PF004.$$;

-- Set the retention of finished jobs for one queue (NULL = the default for all
-- queues without their own row).
CREATE OR REPLACE FUNCTION pgfence.set_retention(queue text, retain_done interval, retain_failed interval)
RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
    IF queue IS NOT NULL THEN
        PERFORM pgfence._check_name('queue', queue);
    END IF;
    -- At most 100 years: a retention reaching past the earliest timestamp PostgreSQL
    -- stores (from about 6,800 years) made every purge fail, and with it the sweeper.
    PERFORM pgfence._check_interval('retain_done', retain_done, interval '0', interval '100 years', '0..100 years',
        'pass how long done and cancelled jobs are kept, e.g. ''1 day'' (at most ''100 years'')');
    PERFORM pgfence._check_interval('retain_failed', retain_failed, interval '0', interval '100 years', '0..100 years',
        'pass how long failed (dead-lettered) jobs are kept, e.g. ''7 days'' (at most ''100 years'')');
    -- Done jobs are kept in history partitions made ahead up to the longest retain_done:
    -- at most 900 partition widths (see set_history_partition_width).
    IF retain_done / 900 > (SELECT s.partition_width FROM pgfence.history_settings s) THEN
        PERFORM pgfence._raise_invalid('retain_done', retain_done::text,
            format('more than 900 history partitions of %s', (SELECT s.partition_width FROM pgfence.history_settings s)),
            'widen the history partitions first (pgfence.set_history_partition_width), or keep done jobs shorter');
    END IF;
    INSERT INTO pgfence.retention AS r (queue, retain_done, retain_failed)
    VALUES (coalesce(queue, ''), retain_done, retain_failed)
    ON CONFLICT ON CONSTRAINT retention_pkey
        DO UPDATE SET retain_done = excluded.retain_done, retain_failed = excluded.retain_failed;
END $$;

COMMENT ON FUNCTION pgfence.set_retention(text, interval, interval) IS
$$Operator: keep finished jobs of queue (NULL = the default) for retain_done (done, cancelled) and
retain_failed (failed) before purge_finished deletes them; each 0..100 years, and retain_done at most 900 history
partition widths (set_history_partition_width; default width 1 hour: 37.5 days). Errors: 22004, 22023.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES ('purge_finished', '{pgfence_operator}'),
                                                        ('set_retention', '{pgfence_operator}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
