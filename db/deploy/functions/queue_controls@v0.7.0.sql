-- Deploy pgfence:functions/queue_controls to pg
-- requires: tables/queue_controls
-- requires: functions/_checks
--
-- Flow control per queue, enforced by claim for every client in every language:
--   * pause_queue / resume_queue: claim takes nothing from a paused queue; jobs already
--     claimed (running, or prefetched by a worker) finish normally; enqueue still works.
--   * set_queue_limit(queue, max_running): claim never lets more than max_running jobs
--     of the queue be processing at once, across all workers; NULL removes the cap.
-- All three are operator actions, recorded in pgfence.queue_controls (who, when).
-- _claim_controlled is claim's pick while any queue has a control.

BEGIN;

-- Operator: pause a queue. Returns true when it paused it, false when it was paused.
CREATE OR REPLACE FUNCTION pgfence.pause_queue(queue text) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_paused boolean;
BEGIN
    PERFORM pgfence._check_name('queue', queue);
    INSERT INTO pgfence.queue_controls AS c (queue, paused_at, paused_by)
    VALUES (queue, clock_timestamp(), pgfence._invoker())
    ON CONFLICT ON CONSTRAINT queue_controls_pkey DO UPDATE
        SET paused_at = excluded.paused_at, paused_by = excluded.paused_by
      WHERE c.paused_at IS NULL
    RETURNING true INTO v_paused;
    RETURN coalesce(v_paused, false);
END $$;
COMMENT ON FUNCTION pgfence.pause_queue(text) IS
$$Operator: claim takes nothing from queue until resume_queue(queue); jobs already claimed finish normally and
enqueue still works. Returns true when it paused the queue, false when it was paused already. Recorded in
pgfence.queue_controls (paused_at, paused_by). Errors: 22004, 22023.$$;

-- Operator: resume a paused queue. Returns true when it was paused.
CREATE OR REPLACE FUNCTION pgfence.resume_queue(queue text) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_row pgfence.queue_controls;
BEGIN
    PERFORM pgfence._check_name('queue', queue);
    -- The row first, locked (a concurrent pause or cap waits, or is waited for, and its
    -- change is what is read), then one change to it.
    SELECT * INTO v_row FROM pgfence.queue_controls c WHERE c.queue = queue FOR NO KEY UPDATE;
    IF NOT FOUND OR v_row.paused_at IS NULL THEN
        RETURN false;
    ELSIF v_row.max_running IS NULL THEN
        DELETE FROM pgfence.queue_controls c WHERE c.queue = queue;
    ELSE
        UPDATE pgfence.queue_controls c SET paused_at = NULL, paused_by = NULL WHERE c.queue = queue;
    END IF;
    RETURN true;
END $$;
COMMENT ON FUNCTION pgfence.resume_queue(text) IS
  'Operator: let claims take from a paused queue again; returns true when it was paused. Errors: 22004, 22023.';

-- Operator: cap the jobs of a queue processing at once (NULL: no cap).
CREATE OR REPLACE FUNCTION pgfence.set_queue_limit(queue text, max_running integer) RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_row pgfence.queue_controls;
BEGIN
    PERFORM pgfence._check_name('queue', queue);
    IF max_running IS NOT NULL THEN
        PERFORM pgfence._check_range('max_running', max_running, 1, 1000000);
        INSERT INTO pgfence.queue_controls AS c (queue, max_running, limited_at, limited_by)
        VALUES (queue, max_running, clock_timestamp(), pgfence._invoker())
        ON CONFLICT ON CONSTRAINT queue_controls_pkey DO UPDATE
            SET max_running = excluded.max_running, limited_at = excluded.limited_at,
                limited_by = excluded.limited_by;
        RETURN;
    END IF;
    -- No cap: the row locked first (as resume_queue), then kept for a pause or deleted.
    SELECT * INTO v_row FROM pgfence.queue_controls c WHERE c.queue = queue FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    ELSIF v_row.paused_at IS NULL THEN
        DELETE FROM pgfence.queue_controls c WHERE c.queue = queue;
    ELSE
        UPDATE pgfence.queue_controls c
           SET max_running = NULL, limited_at = clock_timestamp(), limited_by = pgfence._invoker()
         WHERE c.queue = queue;
    END IF;
END $$;
COMMENT ON FUNCTION pgfence.set_queue_limit(text, integer) IS
$$Operator: claim never lets more than max_running (1..1000000) jobs of queue be processing at once, across all
workers; NULL removes the cap. It binds the claims that start after it commits (one already running may take
its max_jobs). Jobs running beyond a lowered cap finish; claims take again once fewer run. A lease that expired
but is not yet reclaimed counts as running until it is. Errors: 22004, 22023.$$;

-- The queues with a control, and how many of their jobs are processing now.
CREATE OR REPLACE FUNCTION pgfence.queue_limits()
RETURNS TABLE(queue text, paused_at timestamptz, paused_by text, max_running integer, running bigint,
              limited_at timestamptz, limited_by text)
LANGUAGE sql STABLE AS $$
    SELECT c.queue, c.paused_at, c.paused_by, c.max_running,
           (SELECT count(*) FROM pgfence.jobs j WHERE j.status = 'processing' AND j.queue = c.queue),
           c.limited_at, c.limited_by
      FROM pgfence.queue_controls c
     ORDER BY c.queue
$$;
COMMENT ON FUNCTION pgfence.queue_limits() IS
  'Operator: the paused and capped queues (pgfence.queue_controls) with the number of their jobs processing now.';

-- claim's pick while some queue has a control (claim calls it only then): the ids of
-- the jobs locked (FOR NO KEY UPDATE SKIP LOCKED), at most max_jobs, NULL for none.
-- The controls are read once; a queue is either claimed in 1 (no control then) or in 2.
--   1. The asked-for queues without a control, as claim takes them: a list through
--      _claim_from_list; every queue (NULL) through a window of the first
--      4 * max_jobs + 64 runnable jobs in claim order, keeping the uncontrolled ones, or,
--      when controlled queues fill that window (a paused queue's backlog at the front),
--      through _claim_from_list over the queues that have queued jobs (one probe of
--      jobs_claim_idx per queue) less the controlled ones.
--   2. Then each capped, unpaused queue asked for that has a runnable job, in name
--      order, while max_jobs is not reached: its row of queue_controls is locked FOR NO
--      KEY UPDATE SKIP LOCKED (held until the claim commits, so the claim that takes it
--      next counts this one's jobs as processing), its processing jobs counted, and at
--      most max_running minus those taken. A row another claim holds is skipped: that
--      queue gives nothing to this claim (the caller claims again), so claims never wait
--      for one another here, however long a caller's transaction, and never deadlock.
-- So a claim over several queues takes a capped queue's jobs after the others', not in
-- strict priority order across them. Paused queues are never read.
CREATE OR REPLACE FUNCTION pgfence._claim_controlled(queues text[], max_jobs integer, as_of timestamptz)
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := as_of;
    v_ctl jsonb;
    v_capped text[];
    v_free text[];
    v_cand bigint[];
    v_seen bigint;
    v_window integer := 4 * max_jobs + 64;
    v_ids bigint[];
    v_got bigint[];
    v_need integer;
    v_max integer;
    v_running integer;
    v_queue text;
BEGIN
    SELECT coalesce(jsonb_object_agg(q.queue, true), '{}'),
           coalesce(array_agg(q.queue ORDER BY q.queue)
                        FILTER (WHERE q.paused_at IS NULL AND q.max_running IS NOT NULL
                                  AND (queues IS NULL OR q.queue = ANY (queues))), '{}')
      INTO v_ctl, v_capped
      FROM pgfence.queue_controls q;
    IF queues IS NOT NULL THEN
        SELECT array_agg(DISTINCT q.name) INTO v_free FROM unnest(queues) AS q(name) WHERE NOT v_ctl ? q.name;
    ELSE
        SELECT (array_agg(w.id ORDER BY w.priority DESC, w.available_at, w.id) FILTER (WHERE NOT v_ctl ? w.queue))[1:max_jobs],
               count(*)
          INTO v_cand, v_seen
          FROM (SELECT j.id, j.queue, j.priority, j.available_at
                  FROM pgfence.jobs j
                 WHERE j.status = 'queued'
                   AND j.queue <> ''  -- (jobs_claim_order_idx)
                   AND j.available_at <= v_now
                 ORDER BY j.priority DESC, j.available_at, j.id
                 LIMIT v_window) w;
        IF coalesce(cardinality(v_cand), 0) < max_jobs AND v_seen = v_window THEN
            WITH RECURSIVE present AS (
                (SELECT j.queue FROM pgfence.jobs j WHERE j.status = 'queued' ORDER BY j.queue LIMIT 1)
                UNION ALL
                SELECT (SELECT j.queue FROM pgfence.jobs j
                         WHERE j.status = 'queued' AND j.queue > p.queue ORDER BY j.queue LIMIT 1)
                  FROM present p WHERE p.queue IS NOT NULL
            )
            SELECT array_agg(p.queue) INTO v_free FROM present p WHERE p.queue IS NOT NULL AND NOT v_ctl ? p.queue;
        ELSIF v_cand IS NOT NULL THEN
            SELECT array_agg(l.id) INTO v_ids
              FROM (SELECT j.id FROM pgfence.jobs j
                     WHERE j.id = ANY (v_cand) AND j.status = 'queued' AND j.available_at <= v_now
                     ORDER BY j.id
                       FOR NO KEY UPDATE SKIP LOCKED) l;
        END IF;
    END IF;
    IF v_free IS NOT NULL THEN
        v_ids := pgfence._claim_from_list(v_free, max_jobs, v_now);
    END IF;
    v_ids := coalesce(v_ids, '{}');

    FOREACH v_queue IN ARRAY v_capped LOOP
        v_need := max_jobs - cardinality(v_ids);
        EXIT WHEN v_need <= 0;
        CONTINUE WHEN NOT EXISTS (SELECT FROM pgfence.jobs j
                                   WHERE j.status = 'queued' AND j.queue = v_queue AND j.available_at <= v_now);
        v_max := NULL;
        SELECT q.max_running INTO v_max FROM pgfence.queue_controls q
         WHERE q.queue = v_queue AND q.paused_at IS NULL
           FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN v_max IS NULL;  -- another claim counts it now, or paused or uncapped meanwhile
        SELECT count(*) INTO v_running FROM pgfence.jobs j WHERE j.status = 'processing' AND j.queue = v_queue;
        CONTINUE WHEN v_running >= v_max;
        SELECT array_agg(p.id) INTO v_got
          FROM (SELECT j.id FROM pgfence.jobs j
                 WHERE j.status = 'queued' AND j.queue = v_queue AND j.available_at <= v_now
                 ORDER BY j.priority DESC, j.available_at, j.id
                 LIMIT least(v_need, v_max - v_running)
                   FOR NO KEY UPDATE SKIP LOCKED) p;
        v_ids := v_ids || coalesce(v_got, '{}');
    END LOOP;
    RETURN CASE WHEN cardinality(v_ids) > 0 THEN v_ids END;
END $$;
COMMENT ON FUNCTION pgfence._claim_controlled(text[], integer, timestamptz) IS
  'Private: claim''s pick while a queue is paused or capped: nothing from paused queues, at most max_running processing per capped queue (its control row locked SKIP LOCKED while counting, until the claim commits); the locked ids, or NULL.';

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('pause_queue',     '{pgfence_operator}'),
    ('resume_queue',    '{pgfence_operator}'),
    ('set_queue_limit', '{pgfence_operator}'),
    ('queue_limits',    '{pgfence_operator}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
