-- Revert pgfence:functions/claim from pg (back to @v0.3.0)
--
-- The definitions of @v0.3.0 (its deploy script, each CREATE made CREATE OR REPLACE),
-- then what the rework added is dropped and the privilege rule applied again.

BEGIN;

-- The queues that have queued jobs right now, by a loose index scan over the
-- claim index (one index probe per queue, whatever the table's depth).
CREATE OR REPLACE FUNCTION pgfence._queued_queues() RETURNS text[]
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE q(name) AS (
        (SELECT j.queue FROM pgfence.jobs j WHERE j.status = 'queued' ORDER BY j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM pgfence.jobs j
                 WHERE j.status = 'queued' AND j.queue > q.name ORDER BY j.queue LIMIT 1)
          FROM q WHERE q.name IS NOT NULL
    )
    SELECT coalesce(array_agg(name), '{}') FROM q WHERE name IS NOT NULL
$$;
COMMENT ON FUNCTION pgfence._queued_queues() IS
  'Private: distinct queues that hold queued jobs (loose index scan on jobs_claim_idx).';

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
-- (Restated: CREATE OR REPLACE sets what it says, and this is the public API.)
SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_queues text[];
    v_now timestamptz;
    v_bad integer;
    v_ids bigint[];
    v_prefix text;
BEGIN
    -- One expression decides whether every argument is valid (the common case runs no
    -- nested call); only an invalid call runs the checks that name the argument.
    -- (The *_ok predicates are inlined; anything NULL counts as invalid here.)
    IF NOT coalesce(pgfence._name_ok(worker_id)
                    AND (queues IS NULL OR (cardinality(queues) > 0 AND pgfence._array_ok(queues)
                         AND (SELECT bool_and(pgfence._name_ok(q.name)) FROM unnest(queues) AS q(name))))
                    AND lease BETWEEN interval '1 millisecond' AND interval '1 day'
                    AND pgfence._interval_signs_agree(lease)
                    AND max_jobs BETWEEN 1 AND 1000
                    AND current_setting('transaction_isolation') = 'read committed', false) THEN
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
    END IF;
    -- The request's lock first, before any row: claimed() waits for this claim from
    -- its first statement that touches a table, and both take the advisory lock
    -- before row locks (no lock-order cycle between them).
    IF request_id IS NOT NULL THEN
        PERFORM pgfence._lock_request(request_id);
    END IF;

    -- On-claim recovery: the same rule and SQL as the sweep. _reclaim is called only
    -- when an expired lease exists: the probe is one index look-up in this plan,
    -- where the call costs a nested function and a plan of its own.
    v_now := clock_timestamp();
    IF EXISTS (SELECT FROM pgfence.jobs j WHERE j.status = 'processing' AND j.lease_expires_at < v_now) THEN
        PERFORM pgfence._reclaim(max_jobs);
    END IF;

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

SELECT pgfence._apply_privileges();

COMMIT;
