-- Deploy pgfence:functions/history_counts to pg
-- requires: tables/history_counts
-- requires: functions/metrics
-- requires: functions/stats
-- requires: functions/purge_plans
-- requires: functions/history
-- requires: functions/complete
-- requires: functions/mark_done
--
-- metrics() and stats() no longer count the whole history on every call. They counted
-- every row of pgfence.finished_jobs per queue (and the outcomes of the earlier attempts
-- in it) on each call: 0.3 s per 1,000,000 rows, growing with the history (a day at
-- 20,000 jobs/s is 1.7 billion rows). Now the purge keeps per-partition counts of the
-- rows finished before a watermark (pgfence.history_counts, up to
-- history_count_state.counted_to), and the readers count only the rows past it through
-- the BRIN index on finished_at: the last 10-20 s of completions, whatever the history
-- holds. Counts are kept per partition, so that a dropped or truncated partition's
-- counts stop counting with it in the same snapshot (its rows go to metric_totals in
-- the drop's transaction, as before); no completion writes anything more (it takes its
-- transaction id before its finished_at: see below).
--
-- The watermark moves only past rows that can no longer appear. A completion takes its
-- finished_at from the clock when its call begins, and its transaction may commit much
-- later (a worker completing inside its own transaction, or a completion waiting for a
-- lock on the history before it writes). So complete_many and _mark_done, the two
-- writers of the history, now take their transaction id before they read the clock
-- (and this change makes them again with that one line changed): every row finished
-- before a time t then belongs to a transaction whose id was assigned before t. Each
-- purge takes t, then a fresh transaction id g (a subtransaction's: assigned after t),
-- and makes (t, g) the candidate; a later purge that finds every transaction id up to g
-- ended (its snapshot's xmin is past g) counts the rows finished before t (partitions
-- already counted: those between the old watermark and t) and makes t the watermark.
-- An open transaction that has written, anywhere in the cluster (prepared ones
-- included), holds the watermark back meanwhile: the readers count more rows past it,
-- never a wrong number. Right after this change is deployed, completions already
-- running run the complete_many from before (the clock first): no candidate is made
-- until no other session of the database holds a snapshot from before the deployment
-- committed (pg_stat_activity.backend_xmin); a gate copied from another cluster (its
-- transaction ids ahead of this one's) is dropped and made again. The watermark never moves back (a clock stepped back is not
-- followed until it passes the watermark again); rows written into the history by other
-- means (an INSERT by hand, logical replication, the clock stepped back) with a
-- finished_at already behind the watermark are counted only when their partition is
-- dropped (metric_totals gets them), and rows deleted by hand from a partition stay in
-- its counts until then.
--
-- A partition is counted from its first rows once (history_count_marks: its oid and
-- relfilenode; a TRUNCATE or a rewrite gives it a new relfilenode, and it is counted
-- again): new partitions when they are made, still empty; after this change is deployed,
-- the existing ones one a pass (more while a pass has spent under 0.2 s). Until then
-- the readers count an uncounted partition's rows themselves, and they always count the
-- default partition's (its rows are moved and deleted one by one).

BEGIN;

-- (Completions whose statement began before this script committed run the complete_many
-- from before, which read the clock before taking a transaction id: no candidate is
-- made until none of them can still be running. A new candidate is made after.)
UPDATE pgfence.history_count_state SET deploy_xid = pg_current_xact_id(), cand_t = NULL, cand_gate = NULL;

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
-- and TimeZone the text can name a zone abbreviation that reads back otherwise. Made
-- without looking the partition up, 0 for its relation: a scrape waiting for a DROP
-- reads the partitions of its snapshot, as it reads metric_totals.)
CREATE OR REPLACE FUNCTION pgfence._history_parts()
RETURNS TABLE(part oid, filenode oid, lower_bound timestamptz, upper_bound timestamptz, counted boolean)
LANGUAGE sql STABLE SET datestyle = 'ISO, YMD' SET timezone = 'UTC' AS $$
    SELECT c.oid, c.relfilenode, b[1]::timestamptz, b[2]::timestamptz, m.part IS NOT NULL
      FROM pg_catalog.pg_inherits i
      JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
      CROSS JOIN LATERAL regexp_match(pg_catalog.pg_get_expr(c.relpartbound, 0),
                                      E'^FOR VALUES FROM \\(''([^'']+)''\\) TO \\(''([^'']+)''\\)') b
      LEFT JOIN pgfence.history_count_marks m
             ON m.part = c.oid AND m.filenode = c.relfilenode AND m.lower_bound = b[1]::timestamptz
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
    v_gate xid;
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
    -- A gate no transaction of this cluster has had (the table was copied from another
    -- cluster: pg_dump, logical replication) would never pass: dropped, a new one is made.
    IF s.cand_gate >= pg_snapshot_xmax(pg_current_snapshot()) THEN
        s.cand_t := NULL;
        s.cand_gate := NULL;
    END IF;
    -- The candidate, once every transaction up to its gate has ended (this statement's
    -- snapshot says so; the counting statements take later ones). Never backwards.
    IF s.cand_t IS NOT NULL AND pg_snapshot_xmin(pg_current_snapshot()) > s.cand_gate THEN
        IF s.cand_t > s.counted_to THEN
            PERFORM pgfence._count_history_rows(s.counted_to, s.cand_t);
            s.counted_to := s.cand_t;
        END IF;
        s.cand_t := NULL;
        s.cand_gate := NULL;
    END IF;
    -- Partitions not counted yet: each from its first row up to the watermark (none
    -- while there is none), oldest first, at least one a call and more while this call
    -- has spent under 0.2 s. (Its counts and mark are made again: a partition
    -- truncated or rewritten since the first DELETE above has them still.)
    IF s.counted_to > '-infinity' THEN
        FOR v_part IN SELECT * FROM pgfence._history_parts() x WHERE NOT x.counted ORDER BY x.lower_bound LOOP
            EXIT WHEN v_parts > 0 AND clock_timestamp() - v_start > interval '0.2 seconds';
            DELETE FROM pgfence.history_counts k WHERE k.part = v_part.part;
            DELETE FROM pgfence.history_count_marks m WHERE m.part = v_part.part;
            INSERT INTO pgfence.history_counts AS k (part, metric, queue, label, n)
            SELECT v_part.part, c.metric, c.queue, c.label, c.n FROM (
                SELECT 'jobs_done' AS metric, h.queue, '' AS label, count(*) AS n
                  FROM pgfence.finished_jobs h
                 WHERE h.purge_at >= v_part.lower_bound AND h.purge_at < v_part.upper_bound
                   AND h.finished_at < s.counted_to
                 GROUP BY h.queue
                UNION ALL
                SELECT 'attempts_ended', h.queue, e.a->>'outcome', count(*)
                  FROM pgfence.finished_jobs h CROSS JOIN LATERAL jsonb_array_elements(h.earlier_attempts) e(a)
                 WHERE h.purge_at >= v_part.lower_bound AND h.purge_at < v_part.upper_bound
                   AND h.finished_at < s.counted_to AND h.earlier_attempts IS NOT NULL
                 GROUP BY h.queue, e.a->>'outcome') c;
            INSERT INTO pgfence.history_count_marks (part, filenode, lower_bound)
            VALUES (v_part.part, v_part.filenode, v_part.lower_bound);
            v_parts := v_parts + 1;
        END LOOP;
    END IF;
    -- Until no statement begun before this change was deployed can still run (no other
    -- session of this database holds a snapshot from then: backend_xmin, which every role
    -- sees), a completion of the complete_many from before may be waiting with its
    -- finished_at read and no transaction id yet: no candidate. Once: then forgotten.
    IF s.deploy_xid IS NOT NULL THEN
        PERFORM pg_stat_clear_snapshot();
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity a
                        WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
                          AND a.backend_xmin IS NOT NULL
                          AND pgfence._xid8_near(a.backend_xmin, pg_snapshot_xmax(pg_current_snapshot()))
                              <= s.deploy_xid) THEN
            s.deploy_xid := NULL;
        END IF;
    END IF;
    -- The next candidate: the time, then a transaction id assigned after it (a
    -- subtransaction's, which the block's handler makes it: the calling transaction's own
    -- id may be older; the handler never runs).
    IF s.cand_t IS NULL AND s.deploy_xid IS NULL THEN
        v_t := clock_timestamp();
        BEGIN
            UPDATE pgfence.history_count_state SET counted_at = v_start RETURNING xmin INTO v_gate;
        EXCEPTION WHEN lock_not_available THEN
            RAISE;
        END;
        IF v_t > s.counted_to THEN
            s.cand_t := v_t;
            s.cand_gate := pgfence._xid8_near(v_gate, pg_current_xact_id());
        END IF;
    END IF;
    UPDATE pgfence.history_count_state
       SET counted_to = s.counted_to, cand_t = s.cand_t, cand_gate = s.cand_gate, deploy_xid = s.deploy_xid,
           counted_at = v_start;
    RETURN s.counted_to;
END $$;
COMMENT ON FUNCTION pgfence._count_history() IS
$$Private: one step of the history's counts (history_counts up to history_count_state.counted_to), run by
purge_finished: the watermark moves to a time once every transaction whose id was assigned before it has
ended (the next call at the soonest; complete_many and _mark_done take their id before their finished_at);
partitions not counted yet are counted (at least one a call). Returns the watermark.$$;

-- The two writers of the history take their transaction id before their finished_at
-- (the watermark's rule above); nothing else of them changes.
CREATE OR REPLACE FUNCTION pgfence.complete_many(
    job_ids        bigint[],
    attempt_tokens uuid[],
    results        jsonb[] DEFAULT NULL
) RETURNS TABLE(id bigint, accepted boolean, status text, detail text)
LANGUAGE plpgsql
-- Generic plans: every input row is looked up by primary key (LATERAL ... OFFSET 0),
-- so the plan never depends on the values, and replanning on every call (the
-- custom-plan default, several partial indexes to prove) cost more than the work.
SET plan_cache_mode = force_generic_plan
-- Rows are reached by primary key, never by reading pgfence.jobs (docs/performance.md,
-- "No sequential scans"), and no JIT (with sequential scans off, a statement that can
-- only scan sequentially is costed 10^10).
SET enable_seqscan = off
SET jit = off AS $$
#variable_conflict use_column
DECLARE
    n integer := pgfence._check_batch(job_ids, attempt_tokens);
    -- (this transaction's id first, then the clock: no row of the history is finished
    -- before its transaction had an id; functions/history_counts counts on it)
    v_now timestamptz := CASE WHEN pg_current_xact_id() IS NOT NULL THEN clock_timestamp() END;
    v_count integer;
    v_acc boolean[];
    v_bad integer;
    v_keep interval;
BEGIN
    IF NOT pgfence._array_ok(results) THEN
        PERFORM pgfence._check_array('results', results);
    END IF;
    IF cardinality(results) <> n THEN
        PERFORM pgfence._raise_invalid('results length', cardinality(results)::text,
            format('job_ids has %s elements', n), 'pass NULL, or one result (or NULL) per job id');
    END IF;
    IF results IS NOT NULL THEN
        SELECT min(t.ord) INTO v_bad FROM unnest(results) WITH ORDINALITY t(r, ord) WHERE NOT pgfence._result_ok(t.r);
        IF v_bad IS NOT NULL THEN
            PERFORM pgfence._check_result(format('results[%s]', v_bad), results[v_bad]);
        END IF;
    END IF;
    -- target reads each finishing attempt (its lease, for the history); rows are
    -- deleted in id order (a fixed lock order: no deadlock against a concurrent
    -- heartbeat_many of the same jobs). When a row was refused, the answer is read
    -- back afterwards (pgfence.all_jobs: a done job is in the history, with the
    -- finishing token).
    SELECT r.retain_done INTO v_keep FROM pgfence.retention r WHERE r.queue = '';
    WITH target AS (
        SELECT j.id, j.attempt_token, j.lease_expires_at, i.result, 'processing'::text AS held,
               pgfence._utc_plus(v_now, coalesce(q.retain_done, v_keep)) AS purge_at
          FROM unnest(job_ids, attempt_tokens, results) AS i(id, token, result)
          CROSS JOIN LATERAL (SELECT * FROM pgfence.jobs x WHERE x.id = i.id AND x.attempt_token = i.token OFFSET 0) j
          LEFT JOIN pgfence.retention q ON q.queue = j.queue
         WHERE j.status = 'processing'
           AND (j.timeout IS NULL OR v_now < j.reserved_at + j.timeout)
         ORDER BY j.id
    ), gone AS (
        DELETE FROM pgfence.jobs j
         USING target t
         WHERE j.id = t.id AND j.status = t.held AND j.attempt_token = t.attempt_token
        -- (j.status = <column> rather than = 'processing': the literal would let the
        -- planner drive the join from the partial index jobs_reclaim_idx, whose row
        -- estimate is tiny, and rescan the input for every processing row.)
        RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempts, j.max_attempts, j.available_at,
                  j.recovery_policy, j.idempotency_key, j.attempt_token, j.reserved_by, j.reserved_at,
                  j.heartbeat_at, t.lease_expires_at, j.reclaim_count, j.last_error, t.result, j.created_at,
                  j.enqueued_by, t.purge_at, j.unique_for
    ), earlier AS (
        DELETE FROM pgfence.attempts a
         USING gone g
         WHERE a.job_id = g.id
        RETURNING a.*
    ), earlier_by_job AS (
        SELECT e.job_id, jsonb_agg(to_jsonb(e) - 'job_id' ORDER BY e.ended_at, e.attempt) AS attempts
          FROM earlier e GROUP BY e.job_id
    ), keys AS (
        -- (unique_for: no key held once done when created_at + unique_for has passed,
        -- 0 among them; else held until then, and at most until the purge)
        INSERT INTO pgfence.held_keys AS k (queue, idempotency_key, job_id, purge_at, held_until)
        SELECT g.queue, g.idempotency_key, g.id, g.purge_at, g.created_at + g.unique_for
          FROM gone g
         WHERE g.idempotency_key IS NOT NULL
           AND (g.unique_for IS NULL OR g.created_at + g.unique_for > v_now)
        ON CONFLICT ON CONSTRAINT held_keys_pkey
            DO UPDATE SET job_id = excluded.job_id, purge_at = excluded.purge_at, held_until = excluded.held_until
    )
    INSERT INTO pgfence.finished_jobs (id, queue, kind, payload, priority, attempts, max_attempts, available_at,
                                       recovery_policy, idempotency_key, attempt_token, reserved_by, reserved_at,
                                       heartbeat_at, lease_expires_at, reclaim_count, last_error, result,
                                       created_at, finished_at, enqueued_by, earlier_attempts, purge_at)
    SELECT g.id, g.queue, g.kind, g.payload, g.priority, g.attempts, g.max_attempts, g.available_at,
           g.recovery_policy, g.idempotency_key, g.attempt_token, g.reserved_by, g.reserved_at,
           g.heartbeat_at, g.lease_expires_at, g.reclaim_count, g.last_error, g.result,
           g.created_at, v_now, g.enqueued_by, e.attempts, g.purge_at
      FROM gone g LEFT JOIN earlier_by_job e ON e.job_id = g.id;
    GET DIAGNOSTICS v_count = ROW_COUNT;

    IF v_count = n THEN
        -- All accepted (duplicate ids are refused up front): every row is done and
        -- there is nothing to look up. The common case.
        RETURN QUERY SELECT i.id, true, 'done'::text, NULL::text
                       FROM unnest(job_ids) WITH ORDINALITY AS i(id, ord) ORDER BY i.ord;
        RETURN;
    END IF;
    -- Some were refused (or already done by this token: accepted, idempotent). An
    -- attempt refused because its run timeout passed ends now, as timed_out.
    PERFORM pgfence._end_timed_out(job_ids, attempt_tokens);
    v_acc := pgfence._accepted(job_ids, attempt_tokens, 'done');
    PERFORM pgfence._record_rejections(job_ids, attempt_tokens, v_acc, 'complete');
    RETURN QUERY
    SELECT a.id, a.accepted, a.status, a.detail FROM pgfence._batch_answer(job_ids, attempt_tokens, v_acc) a;
END $$;

CREATE OR REPLACE FUNCTION pgfence._mark_done(job_id bigint, result jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    j pgfence.jobs;
    -- (this transaction's id first, then the clock: no row of the history is finished
    -- before its transaction had an id; functions/history_counts counts on it)
    v_now timestamptz := CASE WHEN pg_current_xact_id() IS NOT NULL THEN clock_timestamp() END;
    v_keep interval;
BEGIN
    SELECT * INTO j FROM pgfence.jobs x WHERE x.id = _mark_done.job_id FOR UPDATE;
    IF NOT FOUND AND EXISTS (SELECT FROM pgfence.finished_jobs h WHERE h.id = _mark_done.job_id) THEN
        PERFORM pgfence._raise_transition(_mark_done.job_id, 'mark_done', 'done', 'manual_review');
    ELSIF NOT FOUND THEN
        PERFORM pgfence._raise_fence(_mark_done.job_id, NULL, NULL);
    ELSIF j.status <> 'manual_review' THEN
        PERFORM pgfence._raise_transition(_mark_done.job_id, 'mark_done', j.status, 'manual_review');
    END IF;
    SELECT coalesce(q.retain_done, d.retain_done) INTO v_keep
      FROM pgfence.retention d LEFT JOIN pgfence.retention q ON q.queue = j.queue
     WHERE d.queue = '';
    WITH gone AS (
        DELETE FROM pgfence.jobs x WHERE x.id = j.id AND x.queue = j.queue AND x.status = 'manual_review'
        RETURNING x.*
    ), earlier AS (
        DELETE FROM pgfence.attempts a USING gone g WHERE a.job_id = g.id RETURNING a.*
    ), earlier_by_job AS (
        SELECT e.job_id, jsonb_agg(to_jsonb(e) - 'job_id' ORDER BY e.ended_at, e.attempt) AS attempts
          FROM earlier e GROUP BY e.job_id
    ), keys AS (
        -- (unique_for as complete applies it: no key held once done when created_at +
        -- unique_for has passed, 0 among them; else held until then, at most until the purge)
        INSERT INTO pgfence.held_keys AS k (queue, idempotency_key, job_id, purge_at, held_until)
        SELECT g.queue, g.idempotency_key, g.id, pgfence._utc_plus(v_now, v_keep), g.created_at + g.unique_for
          FROM gone g
         WHERE g.idempotency_key IS NOT NULL
           AND (g.unique_for IS NULL OR g.created_at + g.unique_for > v_now)
        ON CONFLICT ON CONSTRAINT held_keys_pkey
            DO UPDATE SET job_id = excluded.job_id, purge_at = excluded.purge_at, held_until = excluded.held_until
    )
    INSERT INTO pgfence.finished_jobs (id, queue, kind, payload, priority, attempts, max_attempts, available_at,
                                       recovery_policy, idempotency_key, attempt_token, reserved_by, reserved_at,
                                       heartbeat_at, lease_expires_at, reclaim_count, last_error, result,
                                       created_at, finished_at, enqueued_by, earlier_attempts, purge_at)
    SELECT g.id, g.queue, g.kind, g.payload, g.priority, g.attempts, g.max_attempts, g.available_at,
           g.recovery_policy, g.idempotency_key, NULL, NULL, NULL,
           NULL, NULL, g.reclaim_count, g.last_error, _mark_done.result,
           g.created_at, v_now, g.enqueued_by, e.attempts, pgfence._utc_plus(v_now, v_keep)
      FROM gone g LEFT JOIN earlier_by_job e ON e.job_id = g.id;
    RETURN j.queue;
END $$;

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
    -- past its watermark (a scrape reads the last 10-20 s of completions, not the history).
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
last 10-20 s of completions while the sweeper runs): an operator query for a scrape every 15-60 s.$$;


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
    -- reads take no lock a completion or the drop below waits for. A step that fails
    -- (waiting for a lock: a DDL on the history) is given up for this pass, logged, and
    -- the purge goes on: the readers count what it would have.
    BEGIN
        PERFORM pgfence._count_history();
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'pgfence: the history''s counts wait for the next purge: % (SQLSTATE %)',
            pgfence._printable(SQLERRM), SQLSTATE;
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
