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

-- From @v0.2.0 (unchanged until the rework after @v0.3.0, which changed them):

-- The transaction lock of a claim request: claim takes it, claimed() waits for it.
-- (Two-key advisory locks: their key space is apart from the sweeper's one-key lock.)
CREATE OR REPLACE FUNCTION pgfence._lock_request(request_id uuid) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtext('pgfence.claim'), hashtext(request_id::text))
$$;
COMMENT ON FUNCTION pgfence._lock_request(uuid) IS
  'Private: the transaction-level advisory lock of a claim request id (held by claim, waited for by claimed).';

-- The jobs that claims made with these request ids took and that are still
-- leased to worker_id by those claims, as claim returned them, with their leases
-- renewed like a heartbeat's (the caller runs them now): what a caller whose claim
-- reply was lost (the connection dropped after the commit) holds without knowing
-- it. A job since reclaimed, released, finished or claimed again is not returned.
-- A claim with one of these request ids that is still running (its reply was lost
-- before it committed) is waited for, up to lock_timeout. (A claim whose request
-- reaches the server only after this call has run cannot be waited for: ask again
-- later if the network may still hold it.)
CREATE OR REPLACE FUNCTION pgfence.claimed(
    worker_id   text,
    request_ids uuid[],
    lease       interval DEFAULT '30 seconds'
) RETURNS TABLE(id bigint, queue text, kind text, payload jsonb, attempts integer,
                max_attempts integer, attempt_token uuid, lease_expires_at timestamptz)
LANGUAGE plpgsql
-- Through jobs_reclaim_idx (the processing jobs), never by reading the table.
SET enable_seqscan = off
-- A claim still running is waited for this long at most (then 55P03: ask again).
SET lock_timeout = '10s' AS $$
#variable_conflict use_column
BEGIN
    PERFORM pgfence._check_name('worker_id', worker_id);
    IF request_ids IS NULL THEN
        PERFORM pgfence._raise_null('request_ids', 'pass the request_id of each claim whose reply was lost');
    END IF;
    PERFORM pgfence._check_array('request_ids', request_ids);
    PERFORM pgfence._check_range('request_ids length', cardinality(request_ids), 1, 1000);
    IF array_position(request_ids, NULL) IS NOT NULL THEN
        PERFORM pgfence._raise_null(format('request_ids[%s]', array_position(request_ids, NULL)),
            'pass the request_id each claim was given');
    END IF;
    PERFORM pgfence._check_lease(lease);
    PERFORM pgfence._check_isolation('claimed');
    -- Wait for those claims to end (each holds its request's lock until it commits),
    -- in a fixed order (two callers asking for the same ids never deadlock).
    PERFORM pgfence._lock_request(s.r) FROM (SELECT DISTINCT r FROM unnest(request_ids) AS r ORDER BY r) s;
    RETURN QUERY
    WITH held AS (
        SELECT j.id
          FROM pgfence.jobs j
         WHERE j.status = 'processing'
           AND j.reserved_by = worker_id
           AND j.attempt_token IN (SELECT pgfence._request_token(pgfence._request_prefix(r, j.reserved_at),
                                                                 j.id, j.attempts)
                                     FROM unnest(request_ids) AS r)
         ORDER BY j.id
           FOR UPDATE OF j
    ), renewed AS (
        UPDATE pgfence.jobs j
           -- (clock_timestamp(), not a time read before the row locks were waited for)
           SET lease_expires_at = clock_timestamp() + lease, heartbeat_at = clock_timestamp(),
               updated_at = clock_timestamp()
          FROM held h
         WHERE j.id = h.id
        RETURNING j.id, j.queue, j.kind, j.payload, j.attempts, j.max_attempts, j.attempt_token,
                  j.lease_expires_at, j.priority, j.available_at
    )
    SELECT r.id, r.queue, r.kind, r.payload, r.attempts, r.max_attempts, r.attempt_token, r.lease_expires_at
      FROM renewed r
     ORDER BY r.priority DESC, r.available_at, r.id;
END $$;

COMMENT ON FUNCTION pgfence.claimed(text, uuid[], interval) IS
$$The jobs that claim calls made with these request_ids (1..1000) took and still hold for worker_id (status
processing, same attempt), in claim order, as claim returned them, each lease renewed to clock_timestamp() +
lease (like a heartbeat): for a caller whose claim reply was lost. Waits (up to 10 s, then 55P03) for such a
claim that is still running. Needs READ COMMITTED. Errors: 22004, 22023, PF004, 55P03.$$;

DROP FUNCTION pgfence._after_cut(integer, timestamptz, bigint, integer, timestamptz, bigint);

SELECT pgfence._apply_privileges();

COMMIT;
