-- Revert pgfence:functions/claim from pg (back to @v0.2.0)
--
-- claim as of @v0.2.0: its checks one call each, and _reclaim called on every claim.

BEGIN;

-- Claim up to max_jobs runnable jobs for worker_id, in priority DESC,
-- available_at, id order. Each claimed job gets a fresh attempt_token and a lease
-- of `lease` from clock_timestamp() (not now(): a claim inside a long transaction
-- still hands out a full lease). First applies the reclaim rule to a batch of
-- expired leases, so recovery does not wait for the sweep.
-- Concurrency: SELECT ... LIMIT max_jobs FOR UPDATE SKIP LOCKED first, then UPDATE
-- exactly the rows it locked, so two callers never get the same job and no caller
-- gets more than max_jobs.
-- request_id (optional, fresh for each call): when the reply is lost (the connection
-- drops), claimed(worker_id, ARRAY[request_id]) returns the jobs this call took, so
-- the caller runs them instead of leaving them leased until the lease expires (and
-- the attempt, already counted, is wasted).
CREATE OR REPLACE FUNCTION pgfence.claim(
    worker_id  text,
    queues     text[]   DEFAULT NULL,
    lease      interval DEFAULT '30 seconds',
    max_jobs   integer  DEFAULT 1,
    request_id uuid     DEFAULT NULL
) RETURNS TABLE(id bigint, queue text, kind text, payload jsonb, attempts integer,
                max_attempts integer, attempt_token uuid, lease_expires_at timestamptz)
LANGUAGE plpgsql
-- Generic plans: every input row is looked up by primary key (LATERAL ... OFFSET 0),
-- so the plan never depends on the values, and replanning on every call (the
-- custom-plan default, several partial indexes to prove) cost more than the work.
SET plan_cache_mode = force_generic_plan
-- No JIT: the generic plan of the pick-and-lock query cannot know max_jobs, so it
-- assumes a tenth of the queue; from ~600,000 queued jobs that estimate passes
-- jit_above_cost and every claim compiled the query again (6-7 ms each; a drain of
-- 600,000 jobs, 2 x 8, prefetch 500: 29.9k jobs/s with JIT, 38.5k with this setting).
SET jit = off
-- No sequential scan: a claim reaches queued rows through jobs_claim_idx and expired
-- leases through jobs_reclaim_idx, never by reading the table. The generic plan
-- assumes max_jobs is a tenth of the queue, so when the indexes are large next to
-- the heap (left so by an earlier backlog: 20,000 queued jobs in 420 heap pages,
-- claim index 6,941 pages, reclaim index 784) it chose to read and sort the whole
-- queue, and the reclaim probe to read the whole table, on every claim: a claim of
-- 8 took 7.5 ms; with this setting 0.5-0.7 ms.
SET enable_seqscan = off
SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_queues text[];
    v_now timestamptz;
    v_bad integer;
    v_ids bigint[];
    v_prefix text;
BEGIN
    PERFORM pgfence._check_name('worker_id', worker_id);
    IF queues IS NOT NULL THEN
        IF cardinality(queues) = 0 THEN
            PERFORM pgfence._raise_invalid('queues', '{}', 'is empty',
                'pass NULL to claim from every queue, or at least one queue name');
        END IF;
        PERFORM pgfence._check_array('queues', queues);
        SELECT min(t.ord) INTO v_bad FROM unnest(queues) WITH ORDINALITY t(q, ord)
         WHERE NOT pgfence._name_ok(t.q);
        IF v_bad IS NOT NULL THEN
            PERFORM pgfence._check_name(format('queues[%s]', v_bad), queues[v_bad]);
        END IF;
    END IF;
    PERFORM pgfence._check_lease(lease);
    PERFORM pgfence._check_range('max_jobs', max_jobs, 1, 1000);
    PERFORM pgfence._check_isolation('claim');
    -- The request's lock first, before any row: claimed() waits for this claim from
    -- its first statement that touches a table, and both take the advisory lock
    -- before row locks (no lock-order cycle between them).
    IF request_id IS NOT NULL THEN
        PERFORM pgfence._lock_request(request_id);
    END IF;

    -- On-claim recovery: the same rule and SQL as the sweep.
    PERFORM pgfence._reclaim(max_jobs);

    v_queues := CASE WHEN queues IS NULL THEN pgfence._queued_queues()
                     ELSE ARRAY(SELECT DISTINCT unnest(queues)) END;
    v_now := clock_timestamp();
    v_prefix := pgfence._request_prefix(request_id, v_now);  -- (NULL without a request_id)

    -- 1. Pick and lock, per queue in claim order, SKIP LOCKED.
    SELECT array_agg(c.id ORDER BY c.priority DESC, c.available_at, c.id) INTO v_ids
      FROM (SELECT c.id, c.priority, c.available_at
              FROM unnest(v_queues) AS q(name)
             CROSS JOIN LATERAL (
                    SELECT j.id, j.priority, j.available_at
                      FROM pgfence.jobs j
                     WHERE j.status = 'queued'
                       AND j.queue = q.name
                       AND j.available_at <= v_now
                     ORDER BY j.priority DESC, j.available_at, j.id
                     LIMIT max_jobs
                       FOR UPDATE SKIP LOCKED) c
             ORDER BY c.priority DESC, c.available_at, c.id
             LIMIT max_jobs) c;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;

    -- 2. Claim what we locked, by primary key (= ANY of an array: an index scan
    --    whatever the plan's row estimate, so a deep queue never turns it into a
    --    scan of the table). Claim changes neither priority nor available_at.
    RETURN QUERY
    WITH claimed AS (
        UPDATE pgfence.jobs j
           SET status           = 'processing',
               attempts         = j.attempts + 1,
               attempt_token    = CASE WHEN v_prefix IS NULL THEN gen_random_uuid()
                                       ELSE pgfence._request_token(v_prefix, j.id, j.attempts + 1) END,
               reserved_by      = worker_id,
               reserved_at      = v_now,
               heartbeat_at     = NULL,
               lease_expires_at = v_now + lease,
               updated_at       = v_now
         WHERE j.id = ANY (v_ids)
        RETURNING j.id, j.queue, j.kind, j.payload, j.attempts, j.max_attempts, j.attempt_token,
                  j.lease_expires_at, j.priority, j.available_at
    )
    SELECT c.id, c.queue, c.kind, c.payload, c.attempts, c.max_attempts, c.attempt_token, c.lease_expires_at
      FROM claimed c
     ORDER BY c.priority DESC, c.available_at, c.id;
END $$;

COMMENT ON FUNCTION pgfence.claim(text, text[], interval, integer, uuid) IS
$$Claim 0..max_jobs (1..1000) runnable jobs for worker_id from queues (NULL = all), priority DESC,
available_at, id order, each with a fresh attempt_token and a lease (1 ms..1 day) from clock_timestamp().
Reclaims a batch of expired leases first (same rule as the sweep). Never hands one job to two callers.
request_id (optional, fresh per call): pgfence.claimed(worker_id, ARRAY[request_id]) finds what this call
took if its reply is lost. Needs READ COMMITTED (PF004 otherwise). Errors: 22004, 22023.$$;

COMMIT;
