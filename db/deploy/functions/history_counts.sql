-- Deploy pgfence:functions/history_counts to pg
-- requires: functions/metrics
-- requires: functions/stats
-- requires: functions/purge_plans
-- requires: functions/history
--
-- metrics() and stats() no longer count the whole history on every call. They counted
-- every row of pgfence.finished_jobs per queue (and the outcomes of the earlier attempts
-- in it) on each call: 0.3 s per 1,000,000 rows, growing with the history (a day at
-- 20,000 jobs/s is 1.7 billion rows). Now the purge keeps per-partition counts of the
-- rows finished before a watermark (pgfence.history_counts, up to
-- history_count_state.counted_to), and the readers count only the rows past it through
-- the BRIN index on finished_at: the last 20-30 s of completions, whatever the history
-- holds. Counts are kept per partition, so that a dropped or truncated partition's
-- counts stop counting with it in the same snapshot (its rows go to metric_totals in
-- the drop's transaction, as before); no completion writes anything more.
--
-- The watermark moves only past rows that can no longer appear: a completion's
-- finished_at is the clock when its call began, and its transaction may commit later
-- (a worker completing inside its own transaction), so a row finished before a time t
-- may still be invisible after t. _count_history makes sure it is not, in two steps
-- (one per purge pass):
--   1. t is taken, then a fresh transaction id g (a subtransaction's: assigned after t);
--      at a later pass, when no other session of this database holds a snapshot taken
--      before g (every backend_xmin in pg_stat_activity is past g: no statement that
--      began before t is still running), t becomes the candidate, with as its gate a
--      fresh transaction id g' assigned after that look: a completion that began before
--      t and has ended its statement got its transaction id before the look, so below g';
--   2. at a later pass, when every transaction id up to g' has ended (the snapshot's
--      xmin is past it), the rows finished before t are all committed or never will be:
--      they are counted (partitions already counted: the rows between the old watermark
--      and t), and t becomes the watermark.
-- A session holding an old snapshot (a long report, pg_dump) or an old transaction id
-- (idle in transaction after a write) holds the watermark back meanwhile: the readers
-- count more rows past it, never a wrong number. Rows written into the history by other
-- means (an INSERT by hand, logical replication) with a finished_at already behind the
-- watermark are not counted until their partition is dropped (when metric_totals gets
-- them); complete and mark_done never do that.
--
-- A partition is counted from its first rows once (history_count_marks: its oid and
-- relfilenode; a TRUNCATE or a rewrite gives it a new relfilenode, and it is counted
-- again): new partitions when they are made, still empty; after this change is deployed,
-- the existing ones one a pass (more while a pass has spent under 0.2 s). Until then
-- the readers count an uncounted partition's rows themselves, and they always count the
-- default partition's (its rows are moved and deleted one by one).

BEGIN;

CREATE TABLE pgfence.history_counts (
    part   oid    NOT NULL,
    metric text   NOT NULL,
    queue  text   NOT NULL,
    label  text   NOT NULL DEFAULT '',
    n      bigint NOT NULL CHECK (n >= 0),
    CONSTRAINT history_counts_pkey PRIMARY KEY (part, metric, queue, label),
    CONSTRAINT history_counts_metric CHECK (metric IN ('jobs_done', 'attempts_ended'))
);
COMMENT ON TABLE pgfence.history_counts IS
$$Per history partition (part: its pg_class oid), the rows finished before history_count_state.counted_to:
done jobs (jobs_done) and their earlier attempts by outcome (attempts_ended, label = the outcome), per queue.
Valid while history_count_marks holds the partition with its current relfilenode. Written by _count_history
(the purge); read by metrics() and stats() through _history_stored().$$;

CREATE TABLE pgfence.history_count_marks (
    part     oid PRIMARY KEY,
    filenode oid NOT NULL
);
COMMENT ON TABLE pgfence.history_count_marks IS
$$The history partitions history_counts holds counts of, with the relfilenode they had when counted: a
partition truncated or rewritten since (another relfilenode) is counted again, a dropped one is forgotten.$$;

CREATE TABLE pgfence.history_count_state (
    one        boolean     PRIMARY KEY DEFAULT true CHECK (one),
    counted_to timestamptz NOT NULL DEFAULT '-infinity',
    next_t     timestamptz,
    next_gate  xid8,
    cand_t     timestamptz,
    cand_gate  xid8,
    counted_at timestamptz,
    CHECK ((next_t IS NULL) = (next_gate IS NULL) AND (cand_t IS NULL) = (cand_gate IS NULL))
);
INSERT INTO pgfence.history_count_state DEFAULT VALUES;
COMMENT ON TABLE pgfence.history_count_state IS
$$One row: the watermark of history_counts (counted_to: the rows finished before it are counted, in the
partitions history_count_marks holds) and its next steps (next_t, next_gate: a time and a transaction id
assigned after it; cand_t, cand_gate: the next watermark, once every transaction up to cand_gate has ended),
as _count_history leaves them; counted_at: its last run.$$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pgfence_owner') THEN
        ALTER TABLE pgfence.history_counts OWNER TO pgfence_owner;
        ALTER TABLE pgfence.history_count_marks OWNER TO pgfence_owner;
        ALTER TABLE pgfence.history_count_state OWNER TO pgfence_owner;
    END IF;
END $$;
REVOKE ALL ON TABLE pgfence.history_counts, pgfence.history_count_marks, pgfence.history_count_state FROM PUBLIC;

-- The 64-bit id of the 32-bit transaction id x, taken to be within 2^31 of near.
CREATE OR REPLACE FUNCTION pgfence._xid8_near(x xid, near xid8) RETURNS xid8
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT (n - CASE WHEN d >= 2147483648 THEN d - 4294967296 ELSE d END)::text::xid8
      FROM (SELECT near::text::bigint AS n,
                   (near::text::bigint % 4294967296 - x::text::bigint + 4294967296) % 4294967296 AS d) v
$$;
COMMENT ON FUNCTION pgfence._xid8_near(xid, xid8) IS
  'Private: the 64-bit transaction id of x (32 bits), the one within 2^31 of near.';

-- The history's partitions as PostgreSQL has them (pg_inherits; their purge_at ranges
-- from their bounds; the default partition is not one of them), and whether
-- history_counts holds counts of each as it is now. (A bound is read back from its text,
-- written and read in ISO and UTC whatever the session's settings: in another DateStyle
-- and TimeZone the text can name a zone abbreviation that reads back otherwise.)
CREATE OR REPLACE FUNCTION pgfence._history_parts()
RETURNS TABLE(part oid, filenode oid, lower_bound timestamptz, upper_bound timestamptz, counted boolean)
LANGUAGE sql STABLE SET datestyle = 'ISO, YMD' SET timezone = 'UTC' AS $$
    SELECT c.oid, c.relfilenode, b[1]::timestamptz, b[2]::timestamptz, m.part IS NOT NULL
      FROM pg_catalog.pg_inherits i
      JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
      CROSS JOIN LATERAL regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid),
                                      E'^FOR VALUES FROM \\(''([^'']+)''\\) TO \\(''([^'']+)''\\)') b
      LEFT JOIN pgfence.history_count_marks m ON m.part = c.oid AND m.filenode = c.relfilenode
     WHERE i.inhparent = 'pgfence.finished_jobs'::regclass AND b IS NOT NULL
$$;
COMMENT ON FUNCTION pgfence._history_parts() IS
$$Private: the partitions of pgfence.finished_jobs but the default (pg_class oid, relfilenode, purge_at range
from their bounds) and whether history_counts holds their counts (history_count_marks has them with this
relfilenode).$$;

-- What the history stores, counted: done jobs and their earlier attempts per outcome,
-- per queue. The counts history_counts holds, plus the rows they do not: those finished
-- since the watermark (every partition, through the BRIN index on finished_at), the
-- default partition's before it, and those before it in partitions not counted yet (each
-- read alone: its purge_at range, a parameter of the subquery that OFFSET 0 keeps apart,
-- prunes the scan to it when the query runs).
-- (Index scans only, and no JIT: the watermark is known only when the query runs, and
-- a plan that guessed a third of each partition past it read them whole.)
CREATE OR REPLACE FUNCTION pgfence._history_stored()
RETURNS TABLE(metric text, queue text, label text, n bigint)
LANGUAGE sql STABLE SET enable_seqscan = off SET jit = off AS $$
    WITH w AS (SELECT s.counted_to AS t FROM pgfence.history_count_state s),
    parts AS MATERIALIZED (SELECT * FROM pgfence._history_parts()),
    uncounted AS (
        SELECT h.queue, h.earlier_attempts FROM pgfence.finished_jobs h
         WHERE h.finished_at >= (SELECT w.t FROM w)
        UNION ALL
        SELECT d.queue, d.earlier_attempts FROM pgfence.finished_jobs_default d
         WHERE d.finished_at < (SELECT w.t FROM w)
        UNION ALL
        SELECT x.queue, x.earlier_attempts
          FROM parts p CROSS JOIN LATERAL (
               SELECT h.queue, h.earlier_attempts FROM pgfence.finished_jobs h
                WHERE h.purge_at >= p.lower_bound AND h.purge_at < p.upper_bound
                  AND h.finished_at < (SELECT w.t FROM w)
               OFFSET 0) x
         WHERE NOT p.counted
    )
    SELECT c.metric, c.queue, c.label, sum(c.n)::bigint FROM (
        SELECT k.metric, k.queue, k.label, k.n
          FROM pgfence.history_counts k JOIN parts p ON p.part = k.part AND p.counted
        UNION ALL
        SELECT 'jobs_done', u.queue, '', count(*) FROM uncounted u GROUP BY u.queue
        UNION ALL
        SELECT 'attempts_ended', u.queue, e.a->>'outcome', count(*)
          FROM uncounted u CROSS JOIN LATERAL jsonb_array_elements(u.earlier_attempts) e(a)
         WHERE u.earlier_attempts IS NOT NULL
         GROUP BY u.queue, e.a->>'outcome') c
     GROUP BY c.metric, c.queue, c.label
$$;
COMMENT ON FUNCTION pgfence._history_stored() IS
$$Private: the history's rows counted per queue: jobs_done (done jobs stored) and attempts_ended by outcome
(label; the earlier attempts of done jobs). history_counts plus the rows it does not hold (finished since its
watermark, the default partition's, those of partitions not counted yet). Used by metrics() and stats().$$;

-- Add to history_counts the rows finished in [from_t, to_t) of the counted partitions.
CREATE OR REPLACE FUNCTION pgfence._count_history_rows(from_t timestamptz, to_t timestamptz) RETURNS void
LANGUAGE sql AS $$
    WITH rows AS (
        SELECT h.tableoid AS part, h.queue, h.earlier_attempts FROM pgfence.finished_jobs h
         WHERE h.finished_at >= from_t AND h.finished_at < to_t
           AND h.tableoid IN (SELECT p.part FROM pgfence._history_parts() p WHERE p.counted)
    )
    INSERT INTO pgfence.history_counts AS k (part, metric, queue, label, n)
    SELECT r.part, 'jobs_done', r.queue, '', count(*) FROM rows r GROUP BY r.part, r.queue
    UNION ALL
    SELECT r.part, 'attempts_ended', r.queue, e.a->>'outcome', count(*)
      FROM rows r CROSS JOIN LATERAL jsonb_array_elements(r.earlier_attempts) e(a)
     WHERE r.earlier_attempts IS NOT NULL
     GROUP BY r.part, r.queue, e.a->>'outcome'
    ON CONFLICT ON CONSTRAINT history_counts_pkey DO UPDATE SET n = k.n + excluded.n
$$;
COMMENT ON FUNCTION pgfence._count_history_rows(timestamptz, timestamptz) IS
  'Private: add to history_counts the rows of the counted history partitions finished in [from_t, to_t).';

-- One step of the history's counts (see the top of this change), run by every purge.
-- Returns the watermark.
CREATE OR REPLACE FUNCTION pgfence._count_history() RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    s pgfence.history_count_state;
    v_t timestamptz;
    v_oldest xid8;
    v_gate xid;
    v_gate8 xid8;
    v_start timestamptz := clock_timestamp();
    v_parts integer := 0;
    v_part record;
BEGIN
    SELECT * INTO STRICT s FROM pgfence.history_count_state FOR NO KEY UPDATE;
    -- Forget the counts of partitions dropped, truncated or rewritten since.
    DELETE FROM pgfence.history_count_marks m
     WHERE NOT EXISTS (SELECT FROM pgfence._history_parts() p WHERE p.part = m.part AND p.counted);
    DELETE FROM pgfence.history_counts k
     WHERE NOT EXISTS (SELECT FROM pgfence.history_count_marks m WHERE m.part = k.part);
    -- 2. The candidate, once every transaction up to its gate has ended (this statement's
    -- snapshot says so; the counting statements take later ones).
    IF s.cand_t IS NOT NULL AND pg_snapshot_xmin(pg_current_snapshot()) > s.cand_gate THEN
        PERFORM pgfence._count_history_rows(s.counted_to, s.cand_t);
        s.counted_to := s.cand_t;
        s.cand_t := NULL;
        s.cand_gate := NULL;
    END IF;
    -- Partitions not counted yet: each from its first row up to the watermark (none
    -- while there is none), oldest first, at least one a call and more while this call
    -- has spent under 0.2 s.
    IF s.counted_to > '-infinity' THEN
        FOR v_part IN SELECT * FROM pgfence._history_parts() x WHERE NOT x.counted ORDER BY x.lower_bound LOOP
            EXIT WHEN v_parts > 0 AND clock_timestamp() - v_start > interval '0.2 seconds';
            INSERT INTO pgfence.history_counts AS k (part, metric, queue, label, n)
            SELECT v_part.part, c.metric, c.queue, c.label, c.n FROM (
                SELECT 'jobs_done' AS metric, h.queue, '' AS label, count(*) AS n
                  FROM pgfence.finished_jobs h
                 WHERE h.purge_at >= v_part.lower_bound AND h.purge_at < v_part.upper_bound AND h.finished_at < s.counted_to
                 GROUP BY h.queue
                UNION ALL
                SELECT 'attempts_ended', h.queue, e.a->>'outcome', count(*)
                  FROM pgfence.finished_jobs h CROSS JOIN LATERAL jsonb_array_elements(h.earlier_attempts) e(a)
                 WHERE h.purge_at >= v_part.lower_bound AND h.purge_at < v_part.upper_bound AND h.finished_at < s.counted_to
                   AND h.earlier_attempts IS NOT NULL
                 GROUP BY h.queue, e.a->>'outcome') c;
            INSERT INTO pgfence.history_count_marks (part, filenode) VALUES (v_part.part, v_part.filenode);
            v_parts := v_parts + 1;
        END LOOP;
    END IF;
    -- 1. The time, then who still runs a statement begun before the last call's time,
    -- then a transaction id assigned after both.
    v_t := clock_timestamp();
    PERFORM pg_stat_clear_snapshot();
    SELECT min(pgfence._xid8_near(a.backend_xmin, pg_snapshot_xmax(pg_current_snapshot()))) INTO v_oldest
      FROM pg_catalog.pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
       AND a.backend_type <> 'autovacuum worker' AND a.backend_xmin IS NOT NULL;
    -- A subtransaction's id (the block's handler makes it one; the handler never runs):
    -- the calling transaction's own id may have been assigned before the look.
    BEGIN
        UPDATE pgfence.history_count_state SET counted_at = v_start RETURNING xmin INTO v_gate;
        v_gate8 := pgfence._xid8_near(v_gate, pg_current_xact_id());
    EXCEPTION WHEN lock_not_available THEN
        RAISE;
    END;
    IF s.cand_t IS NULL AND s.next_t IS NOT NULL AND (v_oldest IS NULL OR v_oldest > s.next_gate) THEN
        s.cand_t := s.next_t;
        s.cand_gate := v_gate8;
    END IF;
    UPDATE pgfence.history_count_state
       SET counted_to = s.counted_to, next_t = v_t, next_gate = v_gate8,
           cand_t = s.cand_t, cand_gate = s.cand_gate, counted_at = v_start;
    RETURN s.counted_to;
END $$;
COMMENT ON FUNCTION pgfence._count_history() IS
$$Private: one step of the history's counts (history_counts up to history_count_state.counted_to), run by
purge_finished: the watermark moves to a time once no transaction that may still write a row finished before
it is running (two calls later at the soonest); partitions not counted yet are counted (at least one a call).
Returns the watermark.$$;

CREATE OR REPLACE FUNCTION pgfence.metrics()
RETURNS TABLE(name text, type text, help text, labels jsonb, value double precision)
LANGUAGE sql STABLE AS $$
    WITH now AS (SELECT clock_timestamp() AS t),
    live AS (
        SELECT j.queue, j.status, count(*) AS jobs,
               min(j.available_at) FILTER (WHERE j.status = 'queued' AND j.available_at <= (SELECT t FROM now))
                   AS oldest_runnable,
               min(j.updated_at) FILTER (WHERE j.status = 'manual_review') AS oldest_review,
               count(*) FILTER (WHERE j.status = 'processing' AND j.lease_expires_at < (SELECT t FROM now)) AS expired
          FROM pgfence.jobs j GROUP BY j.queue, j.status
    ),
    -- The history as _history_stored counts it: what history_counts holds, and the rows
    -- past its watermark (a scrape reads the last 20-30 s of completions, not the history).
    hist AS MATERIALIZED (SELECT * FROM pgfence._history_stored()),
    done_stored AS (SELECT h.queue, h.n FROM hist h WHERE h.metric = 'jobs_done'),
    earlier_stored AS (SELECT h.queue, h.label AS outcome, h.n FROM hist h WHERE h.metric = 'attempts_ended'),
    -- (the gauges per queue: every queue with jobs stored, 0 where none is in that state)
    queues AS (SELECT l.queue FROM live l UNION SELECT d.queue FROM done_stored d),
    attempts_stored AS (
        SELECT a.queue, a.outcome, count(*) AS n FROM pgfence.attempts a GROUP BY a.queue, a.outcome
        UNION ALL
        SELECT d.queue, 'done', d.n FROM done_stored d
        UNION ALL
        SELECT e.queue, e.outcome, e.n FROM earlier_stored e
    ),
    attempts_total AS (
        SELECT c.queue, c.outcome, sum(c.n) AS n FROM (
            SELECT s.queue, s.outcome, s.n FROM attempts_stored s
            UNION ALL
            SELECT t.queue, t.label, t.value FROM pgfence.metric_totals t WHERE t.metric = 'attempts_ended') c
         GROUP BY c.queue, c.outcome
    ),
    rejections_total AS (
        SELECT c.queue, sum(c.n) AS n FROM (
            SELECT r.queue, count(*) AS n FROM pgfence.rejections r GROUP BY r.queue
            UNION ALL
            SELECT o.queue, sum(o.not_stored) FROM pgfence.rejection_overflow o GROUP BY o.queue
            UNION ALL
            SELECT t.queue, t.value FROM pgfence.metric_totals t WHERE t.metric = 'rejections') c
         GROUP BY c.queue
    ),
    done_total AS (
        SELECT c.queue, sum(c.n) AS n FROM (
            SELECT d.queue, d.n FROM done_stored d
            UNION ALL
            SELECT l.queue, l.jobs FROM live l WHERE l.status = 'done'
            UNION ALL
            SELECT t.queue, t.value FROM pgfence.metric_totals t WHERE t.metric = 'jobs_done') c
         GROUP BY c.queue
    )
    SELECT m.name, m.type, m.help, m.labels, m.value FROM (
        SELECT 'pgfence_jobs' AS name, 'gauge' AS type,
               'Jobs stored, by queue and status (done: in the history, until retention drops them).' AS help,
               jsonb_build_object('queue', s.queue, 'status', s.status) AS labels, sum(s.jobs)::double precision AS value
          FROM (SELECT l.queue, l.status, l.jobs FROM live l UNION ALL SELECT d.queue, 'done', d.n FROM done_stored d) s
         GROUP BY s.queue, s.status
        UNION ALL
        SELECT 'pgfence_oldest_runnable_age_seconds', 'gauge',
               'Age of the oldest queued job whose run_at has come (0 when none waits).',
               jsonb_build_object('queue', q.queue),
               coalesce(extract(epoch FROM (SELECT t FROM now) - min(l.oldest_runnable)), 0)::double precision
          FROM queues q LEFT JOIN live l ON l.queue = q.queue GROUP BY q.queue
        UNION ALL
        SELECT 'pgfence_manual_review_jobs', 'gauge', 'Jobs waiting in manual_review for an operator.',
               jsonb_build_object('queue', q.queue),
               coalesce(sum(l.jobs) FILTER (WHERE l.status = 'manual_review'), 0)::double precision
          FROM queues q LEFT JOIN live l ON l.queue = q.queue GROUP BY q.queue
        UNION ALL
        SELECT 'pgfence_manual_review_oldest_age_seconds', 'gauge',
               'How long the oldest manual_review job has waited (since its last update; 0 when none).',
               jsonb_build_object('queue', q.queue),
               coalesce(extract(epoch FROM (SELECT t FROM now) - min(l.oldest_review)), 0)::double precision
          FROM queues q LEFT JOIN live l ON l.queue = q.queue GROUP BY q.queue
        UNION ALL
        SELECT 'pgfence_expired_leases', 'gauge', 'Processing jobs whose lease has expired, waiting to be reclaimed.',
               jsonb_build_object('queue', q.queue), coalesce(sum(l.expired), 0)::double precision
          FROM queues q LEFT JOIN live l ON l.queue = q.queue GROUP BY q.queue
        UNION ALL
        SELECT 'pgfence_dead_letter_jobs', 'gauge', 'Failed (dead-lettered) jobs kept, until retention purges them.',
               jsonb_build_object('queue', q.queue),
               coalesce(sum(l.jobs) FILTER (WHERE l.status = 'failed'), 0)::double precision
          FROM queues q LEFT JOIN live l ON l.queue = q.queue GROUP BY q.queue
        UNION ALL
        SELECT 'pgfence_attempts_ended_total', 'counter',
               'Attempts ended, by outcome (done, failed, reclaimed, released, cancelled); never decreases.',
               jsonb_build_object('queue', a.queue, 'outcome', a.outcome), a.n::double precision
          FROM attempts_total a
        UNION ALL
        SELECT 'pgfence_reclaims_total', 'counter', 'Attempts whose lease expired and were reclaimed; never decreases.',
               jsonb_build_object('queue', a.queue), a.n::double precision
          FROM attempts_total a WHERE a.outcome = 'reclaimed'
        UNION ALL
        SELECT 'pgfence_rejections_total', 'counter',
               'Fenced calls refused for a stale token (stored and counted beyond the 100 stored); never decreases.',
               jsonb_build_object('queue', r.queue), r.n::double precision
          FROM rejections_total r
        UNION ALL
        SELECT 'pgfence_jobs_done_total', 'counter', 'Jobs completed (or marked done); never decreases.',
               jsonb_build_object('queue', d.queue), d.n::double precision
          FROM done_total d
        UNION ALL
        SELECT 'pgfence_sweeper_last_pass_age_seconds', 'gauge',
               'Seconds since the background sweeper''s last pass (no row: it never ran).',
               '{}'::jsonb, extract(epoch FROM (SELECT t FROM now) - s.last_pass_at)::double precision
          FROM pgfence.sweeper_status s WHERE s.last_pass_at IS NOT NULL
        UNION ALL
        SELECT 'pgfence_sweeper_paused', 'gauge', '1 while an operator has paused the background sweeper.',
               '{}'::jsonb, (s.paused_at IS NOT NULL)::int::double precision
          FROM pgfence.sweeper_status s
    ) m
    ORDER BY m.name, m.labels
$$;
COMMENT ON FUNCTION pgfence.metrics() IS
$$Operators and viewers: the queue's metrics as Prometheus-ready rows (name, type gauge or counter, help, labels as a
JSON object of strings, value): pgfence_jobs{queue,status}, pgfence_oldest_runnable_age_seconds{queue},
pgfence_manual_review_jobs{queue}, pgfence_manual_review_oldest_age_seconds{queue}, pgfence_expired_leases{queue},
pgfence_dead_letter_jobs{queue}, pgfence_attempts_ended_total{queue,outcome}, pgfence_reclaims_total{queue},
pgfence_rejections_total{queue}, pgfence_jobs_done_total{queue}, pgfence_sweeper_last_pass_age_seconds,
pgfence_sweeper_paused. Counters include what retention deleted (pgfence.metric_totals) and never decrease. Reads
the live tables and, of the history, the counts the purge keeps (history_counts) and the rows past them (the
last 20-30 s of completions while the sweeper runs): an operator query for a scrape every 15-60 s.$$;


-- Operator view: jobs per queue and status, the age of the oldest runnable
-- queued job, and how many processing jobs hold an expired lease.
CREATE OR REPLACE FUNCTION pgfence.stats()
RETURNS TABLE(queue text, status text, jobs bigint, oldest_runnable_age interval, expired_leases bigint)
LANGUAGE sql STABLE AS $$
    SELECT s.queue, s.status, sum(s.jobs)::bigint, min(s.oldest), sum(s.expired)::bigint
      FROM (SELECT j.queue, j.status, count(*) AS jobs,
                   clock_timestamp() - min(j.available_at)
                       FILTER (WHERE j.status = 'queued' AND j.available_at <= clock_timestamp()) AS oldest,
                   count(*) FILTER (WHERE j.status = 'processing' AND j.lease_expires_at < clock_timestamp()) AS expired
              FROM pgfence.jobs j
             GROUP BY j.queue, j.status
            UNION ALL
            SELECT h.queue, 'done', h.n, NULL::interval, 0
              FROM pgfence._history_stored() h
             WHERE h.metric = 'jobs_done') s
     GROUP BY s.queue, s.status
     ORDER BY s.queue, s.status
$$;

COMMENT ON FUNCTION pgfence.stats() IS
$$Jobs per (queue, status), with the age of the oldest runnable queued job and the number of processing
jobs whose lease has expired (waiting for the sweep); done jobs are counted in the history
(pgfence.finished_jobs: the counts the purge keeps, history_counts, and the rows past them). Scans
pgfence.jobs: an operator query, not a hot path.$$;


CREATE OR REPLACE FUNCTION pgfence.purge_finished(max_jobs integer DEFAULT 1000) RETURNS bigint
LANGUAGE plpgsql
-- The jobs are taken SKIP LOCKED, and a refusal being recorded holds its job (FOR KEY
-- SHARE, see functions/_fence), so nothing here should wait on another session; if
-- something does, it fails after 5 s (the sweeper logs it and goes on) instead of
-- stalling the sweeper, which holds its status row meanwhile. (A worker that kept a
-- transaction open after a refused call on a job with 100 stored rejections once held
-- the purge, and with it every sweeper run, for as long as it liked.)
-- (enable_seqscan and jit: functions/purge_plans, where they are explained)
SET lock_timeout = '5s' SET enable_seqscan = off SET jit = off AS $$
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
    -- The history's counts (history_counts, for metrics() and stats()): one step. Its
    -- reads take no lock a completion or the drop below waits for; one that waits for
    -- a lock (a DDL on the history) is given up for this pass.
    BEGIN
        PERFORM pgfence._count_history();
    EXCEPTION WHEN lock_not_available THEN
        RAISE WARNING 'pgfence: the history''s counts wait for the next purge: %', pgfence._printable(SQLERRM);
    END;
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
made ahead), after freeing up to max_jobs keys of done jobs past retention (pgfence.held_keys), deleting the
rejections of jobs whose history was dropped and bringing the history's counts for metrics() and stats() up to
date (_count_history). What it deletes is added to pgfence.metric_totals (metrics() counters never go
backwards), and it purges operator audit rows past their retention (purge_audit). The background sweeper runs
it every 10 s. A deleted job's idempotency key is free again. Needs READ COMMITTED. Errors: 22004, 22023,
PF004.$$;

SELECT pgfence._apply_privileges();

COMMIT;
