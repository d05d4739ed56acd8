-- Deploy pgfence:functions/claim to pg (reworked after @v0.7.0)
-- requires: functions/claim@v0.7.0
-- requires: tables/job_timeouts
-- requires: tables/jobs_claim_order
-- requires: tables/secret_key
-- requires: functions/_checks
-- requires: functions/_rules
-- requires: functions/queue_controls
-- requires: tables/queue_sets
--
-- claim, claim_results (claimed, its old name, kept as an alias) and their helpers,
-- whole. Changed after @v0.4.0: claim's checks that name a bad argument and its
-- search over a list of queues are functions of their own (_claim_refuse,
-- _claim_from_list); claimed() is named claim_results() (a name that does not read
-- like a yes/no question); claimed() stays, deprecated, calling it. Changed after
-- @v0.6.0: while any queue is paused or capped (pgfence.queue_controls has a row),
-- claim picks through _claim_controlled (functions/queue_controls); otherwise as
-- before, after one look at that table. Changed after @v0.7.0: a job's run timeout
-- (tables/job_timeouts, stored on the job at enqueue, so nothing more is read per row)
-- caps the lease: lease_expires_at = least(claim time + lease, claim time + timeout),
-- so the attempt's deadline is reserved_at + timeout; claim_results renews a lease no
-- further than that and returns no attempt past it. Same arguments; the rows gain
-- waited_s: how long the job had been runnable when it was claimed (the claim time
-- minus available_at, in seconds, on the database's clock), so a worker can measure
-- enqueue-to-start without trusting its own clock against the server's. The three
-- functions are dropped and made again (a new result column), in this transaction:
-- no moment without claim. Clients that name the columns they read are unaffected.
-- claim also takes queue_set: the name of a set of queues kept on the server
-- (tables/queue_sets, defined with define_queue_set), claimed from as its list would
-- be, without sending, parsing and checking the list on every call; while a queue
-- has a control, the set goes whole to _claim_controlled(jsonb, ...), which the rework
-- of functions/queue_controls after @v0.7.0 adds (deployed after this change: before
-- it, no set can have been defined, since define_queue_set comes later still).

BEGIN;

DROP FUNCTION IF EXISTS pgfence._queued_queues();  -- (gone since @v0.4.0)
DROP FUNCTION IF EXISTS pgfence.claimed(text, uuid[], interval);
DROP FUNCTION IF EXISTS pgfence.claim_results(text, uuid[], interval);
DROP FUNCTION IF EXISTS pgfence.claim(text, text[], interval, integer, uuid);
DROP FUNCTION IF EXISTS pgfence.claim(text, text[], interval, integer, uuid, text);
DROP FUNCTION IF EXISTS pgfence._claim_refuse(text, text[], interval, integer);

-- The attempt token of a claim made with a request_id: a digest of the request id,
-- the claim time (to the microsecond), the job and its attempt number, so claim_results()
-- can find what that claim took, and a request id given twice still yields a new
-- token for each attempt. In two parts: the first is the same for every job of one
-- claim call, and claim computes it once.
CREATE OR REPLACE FUNCTION pgfence._request_prefix(request_id uuid, claimed_at timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT request_id::text || '/' || (extract(epoch FROM claimed_at) * 1000000)::bigint || '/'  -- (NULL for NULL)
$$;
COMMENT ON FUNCTION pgfence._request_prefix(uuid, timestamptz) IS
  'Private: the part of a request-id token shared by the jobs of one claim call (request id, claim time in us).';

CREATE OR REPLACE FUNCTION pgfence._request_token(prefix text, job_id bigint, attempt integer) RETURNS uuid
LANGUAGE sql IMMUTABLE AS $$
    SELECT md5(prefix || job_id::text || '/' || attempt::text)::uuid  -- (text casts: immutable, so inlined)
$$;
COMMENT ON FUNCTION pgfence._request_token(text, bigint, integer) IS
  'Private: the attempt token claim gives a job claimed with a request_id: md5 of _request_prefix, job id, attempt.';

-- The transaction lock of a claim request: claim takes it, claim_results() waits for it.
-- A one-key advisory lock whose 64-bit key is keyed with the deployment's secret
-- (tables/secret_key): any role may take advisory locks, and with a public key (it was
-- hashtext of the request id) it could hold the lock of a request id it knows, or
-- thousands of the 2^32 keys at random, and park the claims that landed on them.
-- The key is the second half of the digest: wakeup_tags(names) shows the first half of
-- md5(key || name) for any name a worker passes, '/claim/' || a request id included
-- (the first half was the key until a review found that).
-- The lock's key, from the secret key and the request id: plain SQL, inlined into the
-- statement that reads the secret key from the table (claim's own, and _lock_request's
-- for claim_results), so the key is read when the lock is taken, never a constant of a
-- plan. (claim took the lock through _lock_request, a nested PL/pgSQL call: the
-- statement in claim itself saves that call, about 2 us of a one-job claim's 84.)
CREATE OR REPLACE FUNCTION pgfence._request_lock_key(secret text, request_id uuid) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT ('x' || substr(md5(secret || '/claim/' || request_id::text), 17, 16))::bit(64)::bigint
$$;
COMMENT ON FUNCTION pgfence._request_lock_key(text, uuid) IS
  'Private: the advisory lock key of a claim request id, given the secret key (pgfence.secret_key, read by the caller''s statement).';

CREATE OR REPLACE FUNCTION pgfence._lock_request(request_id uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(pgfence._request_lock_key(k.key, request_id)) FROM pgfence.secret_key k;
END $$;
COMMENT ON FUNCTION pgfence._lock_request(uuid) IS
  'Private: the transaction-level advisory lock of a claim request id, keyed with the secret key (held by claim, waited for by claimed).';

-- Whether a job comes after the cut (a job given by its priority, available_at and id)
-- in claim order (priority DESC, available_at, id); every job does when the cut is
-- NULL. Plain SQL, inlined into claim's queries.
CREATE OR REPLACE FUNCTION pgfence._after_cut(priority integer, available_at timestamptz, id bigint,
                                              cut_priority integer, cut_available_at timestamptz, cut_id bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT cut_id IS NULL OR priority < cut_priority
           OR (priority = cut_priority AND (available_at > cut_available_at
                                            OR (available_at = cut_available_at AND id > cut_id)))
$$;
COMMENT ON FUNCTION pgfence._after_cut(integer, timestamptz, bigint, integer, timestamptz, bigint) IS
  'Private: whether a job comes after the cut job in claim order (priority DESC, available_at, id); true for a NULL cut.';

-- Whether every name of a list is a valid name (_name_ok; NULL for an empty list), for
-- claim's lists of two or more queues. A list of plain names (printable ASCII, no
-- space, 1..128 characters: every such name is valid) is told by one regex over the
-- names joined by a control character, which no name may hold: the list is plain when
-- the joined text matches and holds exactly one separator fewer than the list has names
-- (a name holding the separator adds one; a NULL, joined as another control character,
-- fails the match). 10,000 names: 1.0 ms, where _name_ok on each took 3.1-3.4 ms. Any
-- other list: _name_ok on each.
CREATE OR REPLACE FUNCTION pgfence._names_ok(names text[]) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_joined text := array_to_string(names, E'\x01', E'\x02');
BEGIN
    IF v_joined ~ E'^[!-~]{1,128}(\\x01[!-~]{1,128})*$'
       AND octet_length(v_joined) - octet_length(replace(v_joined, E'\x01', '')) = cardinality(names) - 1 THEN
        RETURN true;
    END IF;
    RETURN (SELECT bool_and(pgfence._name_ok(q.name)) FROM unnest(names) AS q(name));
END $$;
COMMENT ON FUNCTION pgfence._names_ok(text[]) IS
  'Private: true when every element is a valid name (as pgfence._name_ok), false else, NULL for an empty array; a long list of plain ASCII names is checked by one regex.';

-- A list of queue names as claim and define_queue_set take it (not NULL: claim's NULL,
-- every queue, is told apart before): 1..10,000 names, one-dimensional, each a valid
-- name; raises the error naming the first bad one (22004, 22023). or_else: what else
-- the caller may pass, ending the hints ('' for nothing).
CREATE OR REPLACE FUNCTION pgfence._check_queues(arg text, queues text[], or_else text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_bad integer;
BEGIN
    IF queues IS NULL THEN
        PERFORM pgfence._raise_null(arg, 'pass at least one queue name' || or_else);
    END IF;
    IF cardinality(queues) = 0 THEN
        PERFORM pgfence._raise_invalid(arg, '{}', 'is empty', 'pass at least one queue name' || or_else);
    END IF;
    PERFORM pgfence._check_array(arg, queues);
    IF cardinality(queues) > 10000 THEN
        PERFORM pgfence._raise_invalid(arg || ' length', cardinality(queues)::text, 'outside 1..10000',
            'pass at most 10000 queue names' || or_else);
    END IF;
    SELECT min(t.ord) INTO v_bad FROM unnest(queues) WITH ORDINALITY t(q, ord)
     WHERE NOT pgfence._name_ok(t.q);
    IF v_bad IS NOT NULL THEN
        PERFORM pgfence._check_name(format('%s[%s]', arg, v_bad), queues[v_bad]);
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_queues(text, text[], text) IS
  'Private: check a list of queue names (not NULL, 1..10000 valid names, one-dimensional), naming arg and the first bad element.';

-- A valid list of queue names as the set claim tests a job's queue against: a jsonb
-- object whose keys are the names (sorted and deduplicated; ? finds a key by binary
-- search), every value NULL (a set stored with the names as values too took twice the
-- room). claim builds it for a list on each call; define_queue_set stores it.
CREATE OR REPLACE FUNCTION pgfence._queue_set_of(queues text[]) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_object(queues, array_fill(NULL::text, ARRAY[cardinality(queues)]))
$$;
COMMENT ON FUNCTION pgfence._queue_set_of(text[]) IS
  'Private: a list of queue names as a set (a jsonb object keyed by the names), as claim tests membership.';

-- claim's arguments, when its one validity expression said no: raise the error that
-- names the first bad one (22004, 22023, PF004). Returns only for valid arguments.
CREATE OR REPLACE FUNCTION pgfence._claim_refuse(worker_id text, queues text[], lease interval, max_jobs integer,
                                                 queue_set text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgfence._check_name('worker_id', worker_id);
    IF queues IS NOT NULL THEN
        PERFORM pgfence._check_queues('queues', queues, ', or NULL to claim from every queue');
    END IF;
    IF queue_set IS NOT NULL THEN
        IF queues IS NOT NULL THEN
            PERFORM pgfence._raise_invalid('queue_set', quote_literal(queue_set), 'is given with queues',
                'pass either queues (a list of names) or queue_set (a set made with pgfence.define_queue_set), not both');
        END IF;
        PERFORM pgfence._check_name('queue_set', queue_set);
    END IF;
    PERFORM pgfence._check_lease(lease);
    PERFORM pgfence._check_range('max_jobs', max_jobs, 1, 1000);
    PERFORM pgfence._check_isolation('claim');
END $$;
COMMENT ON FUNCTION pgfence._claim_refuse(text, text[], interval, integer, text) IS
  'Private: raise the error naming claim''s first bad argument (worker_id, queues, queue_set, lease, max_jobs, isolation).';

-- claim over a set of queues (members: _queue_set_of a list, or a stored set;
-- names: how many names it holds; claim: more than one distinct name;
-- _claim_controlled: one or more): the ids of the jobs it
-- locked (FOR NO KEY UPDATE SKIP LOCKED), at most max_jobs, NULL for none, runnable
-- as_of claim's time; how they are found is told at claim below. Runs inside claim,
-- with claim's settings (generic plans, no JIT, no sequential scan).
CREATE OR REPLACE FUNCTION pgfence._claim_from_set(members jsonb, names integer, max_jobs integer, as_of timestamptz)
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := as_of;  -- (claim's time: runnable means available_at <= it)
    v_set jsonb := members;      -- (the listed names, a set)
    v_window integer;
    v_full boolean;
    v_ids bigint[];
    v_cand bigint[];
    v_got bigint[];
    v_need integer;
    v_cand_priority integer[];
    v_cand_available_at timestamptz[];
    v_cut_priority integer;          -- the last job read, in claim order (the rounds)
    v_cut_available_at timestamptz;
    v_cut_id bigint;
BEGIN
    -- A list: find the first max_jobs jobs of the listed queues after the cut without
    -- locking them, lock those SKIP LOCKED, and for those another claimer holds read
    -- on after the last one read.
    v_ids := '{}';
    FOR i IN 1..3 LOOP
        v_need := max_jobs - cardinality(v_ids);
        v_cand := NULL;
        IF names > 16 THEN
            -- A long list: the first 4 * v_need + 64 jobs of all queues in claim order,
            -- keeping the listed ones. If they hold v_need, or were all the runnable
            -- jobs there are, those are the first of the listed queues. The window is
            -- read lazily, once: it stops at the v_need-th listed job (a membership
            -- test costs ~1 us in a set of 10,000 names; testing and sorting the whole
            -- window cost a claim over such a set ~200 us), or at the window's last
            -- job (its rank v_window: whether the window was full). The rank's frame is
            -- ROWS: under the default RANGE frame the window function read one job past
            -- the window, to see whether it was the last one's peer.
            v_window := 4 * v_need + 64;
            SELECT array_agg(l.id ORDER BY l.priority DESC, l.available_at, l.id) FILTER (WHERE l.listed),
                   array_agg(l.priority ORDER BY l.priority DESC, l.available_at, l.id) FILTER (WHERE l.listed),
                   array_agg(l.available_at ORDER BY l.priority DESC, l.available_at, l.id) FILTER (WHERE l.listed),
                   coalesce(bool_or(l.rank = v_window), false)
              INTO v_cand, v_cand_priority, v_cand_available_at, v_full
              FROM (SELECT w.id, w.priority, w.available_at, w.listed, w.rank
                      FROM (SELECT j.id, j.priority, j.available_at, v_set ? j.queue AS listed,
                                   row_number() OVER (ORDER BY j.priority DESC, j.available_at, j.id
                                                      ROWS UNBOUNDED PRECEDING) AS rank
                              FROM pgfence.jobs j
                             WHERE j.status = 'queued'
                               AND j.queue <> ''  -- (jobs_claim_order_idx)
                               AND j.available_at <= v_now
                               AND pgfence._after_cut(j.priority, j.available_at, j.id,
                                                      v_cut_priority, v_cut_available_at, v_cut_id)
                             ORDER BY j.priority DESC, j.available_at, j.id
                             LIMIT v_window) w
                     WHERE w.listed OR w.rank = v_window
                     ORDER BY w.priority DESC, w.available_at, w.id
                     LIMIT v_need) l;
            IF coalesce(cardinality(v_cand), 0) < v_need AND v_full THEN
                v_cand := NULL;  -- not enough of them so near the front: read the heads
            ELSIF v_cand IS NULL THEN
                EXIT;  -- no runnable job after the cut is listed
            END IF;
        END IF;
        IF v_cand IS NULL THEN
            -- The heads: each listed queue's first runnable job after the cut (one probe
            -- of jobs_claim_idx per queue); only the queues whose heads are among the
            -- first v_need can hold one of the first v_need jobs, the queue ranked r at
            -- most v_need - r + 1 of them: read those, merge, keep the first v_need.
            WITH heads AS (
                SELECT q.name AS queue, h.priority, h.available_at, h.id
                  FROM jsonb_object_keys(v_set) AS q(name)
                 CROSS JOIN LATERAL (
                        SELECT j.priority, j.available_at, j.id
                          FROM pgfence.jobs j
                         WHERE j.status = 'queued' AND j.queue = q.name AND j.available_at <= v_now
                           AND pgfence._after_cut(j.priority, j.available_at, j.id,
                                                  v_cut_priority, v_cut_available_at, v_cut_id)
                         ORDER BY j.priority DESC, j.available_at, j.id
                         LIMIT 1) h
                 ORDER BY h.priority DESC, h.available_at, h.id
                 LIMIT v_need
            ), ranked AS (
                SELECT hd.queue, row_number() OVER (ORDER BY hd.priority DESC, hd.available_at, hd.id) AS r
                  FROM heads hd
            ), merged AS (
                SELECT c.id, c.priority, c.available_at
                  FROM ranked rk
                 CROSS JOIN LATERAL (
                        SELECT j.id, j.priority, j.available_at
                          FROM pgfence.jobs j
                         WHERE j.status = 'queued' AND j.queue = rk.queue AND j.available_at <= v_now
                           AND pgfence._after_cut(j.priority, j.available_at, j.id,
                                                  v_cut_priority, v_cut_available_at, v_cut_id)
                         ORDER BY j.priority DESC, j.available_at, j.id
                         LIMIT v_need - rk.r + 1) c
                 ORDER BY c.priority DESC, c.available_at, c.id
                 LIMIT v_need
            )
            SELECT array_agg(m.id ORDER BY m.priority DESC, m.available_at, m.id),
                   array_agg(m.priority ORDER BY m.priority DESC, m.available_at, m.id),
                   array_agg(m.available_at ORDER BY m.priority DESC, m.available_at, m.id)
              INTO v_cand, v_cand_priority, v_cand_available_at
              FROM merged m;
            EXIT WHEN v_cand IS NULL;
        END IF;
        -- (the cut: the last candidate as read, whatever has become of it since)
        v_cut_priority := v_cand_priority[cardinality(v_cand)];
        v_cut_available_at := v_cand_available_at[cardinality(v_cand)];
        v_cut_id := v_cand[cardinality(v_cand)];
        SELECT array_agg(l.id) INTO v_got
          FROM (SELECT j.id FROM pgfence.jobs j
                 WHERE j.id = ANY (v_cand) AND j.id <> ALL (v_ids)
                   AND j.status = 'queued' AND j.available_at <= v_now
                 ORDER BY j.id
                   FOR NO KEY UPDATE SKIP LOCKED) l;
        v_ids := v_ids || coalesce(v_got, '{}');
        EXIT WHEN cardinality(v_ids) >= max_jobs OR cardinality(v_got) = cardinality(v_cand);
    END LOOP;
    RETURN CASE WHEN cardinality(v_ids) > 0 THEN v_ids END;
END $$;
COMMENT ON FUNCTION pgfence._claim_from_set(jsonb, integer, integer, timestamptz) IS
  'Private: claim over a set of queues (a jsonb object keyed by the names, and their number): find the first runnable jobs without locks, lock them SKIP LOCKED (up to 3 rounds); the locked ids, or NULL.';

-- The same over a list of queue names (_claim_controlled's queues that are free).
CREATE OR REPLACE FUNCTION pgfence._claim_from_list(queues text[], max_jobs integer, as_of timestamptz)
RETURNS bigint[]
LANGUAGE sql AS $$
    SELECT pgfence._claim_from_set(pgfence._queue_set_of(queues), cardinality(queues), max_jobs, as_of)
$$;
COMMENT ON FUNCTION pgfence._claim_from_list(text[], integer, timestamptz) IS
  'Private: _claim_from_set over a list of queue names.';

-- Claim up to max_jobs runnable jobs for worker_id, in priority DESC,
-- available_at, id order. Each claimed job gets a fresh attempt_token and a lease
-- of `lease` from clock_timestamp() (not now(): a claim inside a long transaction
-- still hands out a full lease). First applies the reclaim rule to a batch of
-- expired leases, so recovery does not wait for the sweep.
-- Concurrency: rows are picked with FOR NO KEY UPDATE SKIP LOCKED, and only the rows
-- the claim returns are ever locked, so two callers never get the same job, no caller
-- gets more than max_jobs, and a claim never holds jobs it does not take (a claim
-- over 2,000 queues used to lock max_jobs rows in each).
-- How the rows are found, by the shape of queues:
--   * NULL (every queue): the claim order over all queues (jobs_claim_order_idx),
--     whatever the number of queues;
--   * one queue (or one name repeated, or a set of one): that queue's claim order
--     (jobs_claim_idx);
--   * a list (up to 10,000 names), or queue_set, the name of a set stored with
--     define_queue_set (its names read from pgfence.queue_sets, already checked and
--     made a set there; a list is checked and made one on each call): the first runnable jobs of the listed queues are
--     found without locks, then locked SKIP LOCKED; those another claimer holds are
--     skipped, and the next ones read, up to 3 rounds (so under contention a claim may
--     return fewer than are runnable: the caller claims again). They are found
--       - over more than 16 names, among the first 4 * max_jobs + 64 runnable jobs of
--         all queues (jobs_claim_order_idx), if enough of those are listed (a list
--         that holds most of the work: one short walk, whatever its length);
--       - otherwise (16 names or fewer, or listed queues rare near the front) from
--         each listed queue's first runnable job, its head (one probe of
--         jobs_claim_idx per queue): only the queues whose heads are among the first
--         max_jobs heads can hold one of the first max_jobs jobs, the queue ranked r
--         at most max_jobs - r + 1 of them, so those are read and merged.
--     Either way no more than that window of other queues' jobs is read (walking the
--     claim order over all queues to the end read every queued job of the others when
--     the listed queues were idle: 5 s for 10,000 listed queues beside 20,000 jobs
--     queued elsewhere).
-- request_id (optional, fresh for each call): when the reply is lost (the connection
-- drops), claim_results(worker_id, ARRAY[request_id]) returns the jobs this call took, so
-- the caller runs them instead of leaving them leased until the lease expires (and
-- the attempt, already counted, is wasted).
CREATE OR REPLACE FUNCTION pgfence.claim(
    worker_id  text,
    queues     text[]   DEFAULT NULL,
    lease      interval DEFAULT '30 seconds',
    max_jobs   integer  DEFAULT 1,
    request_id uuid     DEFAULT NULL,
    queue_set  text     DEFAULT NULL
) RETURNS TABLE(id bigint, queue text, kind text, payload jsonb, attempts integer,
                max_attempts integer, attempt_token uuid, lease_expires_at timestamptz,
                waited_s double precision)
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
SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    v_queue text;
    v_now timestamptz;
    v_ids bigint[];
    v_prefix text;
    v_set jsonb;
    v_names integer;
BEGIN
    -- One expression decides whether every argument is valid (the common case runs no
    -- nested call); only an invalid call runs the checks that name the argument.
    -- (The *_ok predicates are inlined; anything NULL counts as invalid here.) No
    -- subquery in it: PL/pgSQL evaluates an expression without one directly, and one
    -- with a subquery through the executor, which cost a one-queue claim 18-28 us of
    -- server time (a subquery over unnest(queues) did this before); a list of two or
    -- more names goes through _names_ok, as fast as that subquery was.
    IF NOT coalesce(pgfence._name_ok(worker_id)
                    AND (queues IS NULL OR (cardinality(queues) BETWEEN 1 AND 10000 AND pgfence._array_ok(queues)
                         AND CASE WHEN cardinality(queues) = 1 THEN pgfence._name_ok(queues[1])
                                  ELSE pgfence._names_ok(queues) END))
                    AND lease BETWEEN interval '1 millisecond' AND interval '1 day'
                    AND pgfence._interval_signs_agree(lease)
                    AND max_jobs BETWEEN 1 AND 1000
                    AND (claim.queue_set IS NULL OR (queues IS NULL AND pgfence._name_ok(claim.queue_set)))
                    AND current_setting('transaction_isolation') = 'read committed', false) THEN
        PERFORM pgfence._claim_refuse(worker_id, queues, lease, max_jobs, claim.queue_set);
    END IF;
    -- The request's lock first, before any row: claim_results() waits for this claim from
    -- its first statement that touches a table, and both take the advisory lock
    -- before row locks (no lock-order cycle between them).
    IF request_id IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(pgfence._request_lock_key(k.key, request_id)) FROM pgfence.secret_key k;
    END IF;

    -- A stored set (read after the request's lock): its names as a set, and how many
    -- (one: that queue's own path).
    -- ('{}' || members: the value read once, whole; a variable holding the column's
    -- TOAST pointer was read again, and decompressed, by every ? of the search: a
    -- claim over a set of 10,000 took 28 ms, read once 0.7.)
    IF claim.queue_set IS NOT NULL THEN
        SELECT '{}'::jsonb || s.members, s.queue_count INTO v_set, v_names
          FROM pgfence.queue_sets s WHERE s.queue_set = claim.queue_set;
        IF NOT FOUND THEN
            PERFORM pgfence._raise_invalid('queue_set', quote_literal(claim.queue_set), 'is not defined',
                'define it first with pgfence.define_queue_set(queue_set, queues), or pass queues');
        ELSIF v_names = 1 THEN
            SELECT k INTO v_queue FROM jsonb_object_keys(v_set) AS k;
        END IF;
    END IF;

    -- On-claim recovery: the same rule and SQL as the sweep. _reclaim is called only
    -- when an expired lease exists: the probe is one index look-up in this plan,
    -- where the call costs a nested function and a plan of its own.
    v_now := clock_timestamp();
    IF EXISTS (SELECT FROM pgfence.jobs j WHERE j.status = 'processing' AND j.lease_expires_at < v_now) THEN
        PERFORM pgfence._reclaim(max_jobs);
    END IF;

    v_now := clock_timestamp();
    v_prefix := pgfence._request_prefix(request_id, v_now);  -- (NULL without a request_id)
    IF queues IS NOT NULL AND queues[1] = ALL (queues) THEN
        v_queue := queues[1];  -- (one name, maybe repeated)
    END IF;
    -- (v_queue: the one queue of a list or a set; v_set: a set of more than one)

    -- 1. Pick and lock, in claim order, SKIP LOCKED: only the rows returned. While a
    --    queue is paused or capped, _claim_controlled picks (it keeps to the rules).
    IF EXISTS (SELECT FROM pgfence.queue_controls) THEN
        IF v_set IS NOT NULL AND v_queue IS NULL THEN
            v_ids := pgfence._claim_controlled(v_set, v_names, max_jobs, v_now);  -- (the stored set, whole)
        ELSE
            v_ids := pgfence._claim_controlled(CASE WHEN v_queue IS NOT NULL THEN ARRAY[v_queue] ELSE queues END,
                                               max_jobs, v_now);
        END IF;
        -- (it may have waited for another claim of a capped queue: the claim time and
        -- the lease start once the jobs are ours, so an attempt's recorded claim never
        -- precedes the end of the one whose slot it took)
        v_now := clock_timestamp();
        v_prefix := pgfence._request_prefix(request_id, v_now);
    ELSIF queues IS NULL AND v_queue IS NULL AND v_set IS NULL THEN
        -- Every queue: the claim order over all queues.
        SELECT array_agg(c.id ORDER BY c.priority DESC, c.available_at, c.id) INTO v_ids
          FROM (SELECT j.id, j.priority, j.available_at
                  FROM pgfence.jobs j
                 WHERE j.status = 'queued'
                   AND j.queue <> ''  -- (the predicate of jobs_claim_order_idx: see tables/jobs_claim_order)
                   AND j.available_at <= v_now
                 ORDER BY j.priority DESC, j.available_at, j.id
                 LIMIT max_jobs
                   FOR NO KEY UPDATE SKIP LOCKED) c;
    ELSIF v_queue IS NOT NULL THEN
        SELECT array_agg(c.id ORDER BY c.priority DESC, c.available_at, c.id) INTO v_ids
          FROM (SELECT j.id, j.priority, j.available_at
                  FROM pgfence.jobs j
                 WHERE j.status = 'queued'
                   AND j.queue = v_queue
                   AND j.available_at <= v_now
                 ORDER BY j.priority DESC, j.available_at, j.id
                 LIMIT max_jobs
                   FOR NO KEY UPDATE SKIP LOCKED) c;
    ELSIF v_set IS NOT NULL THEN
        v_ids := pgfence._claim_from_set(v_set, v_names, max_jobs, v_now);
    ELSE
        v_ids := pgfence._claim_from_set(pgfence._queue_set_of(queues), cardinality(queues), max_jobs, v_now);
    END IF;
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
               -- (the run timeout caps the lease: the attempt's deadline is reserved_at + timeout)
               lease_expires_at = least(v_now + lease, v_now + j.timeout),
               updated_at       = v_now
         WHERE j.id = ANY (v_ids)
        RETURNING j.id, j.queue, j.kind, j.payload, j.attempts, j.max_attempts, j.attempt_token,
                  j.lease_expires_at, j.priority, j.available_at
    )
    -- (::text and the rest: RETURN QUERY wants the declared types exactly, and the
    -- columns are domains over them, tables/job_domains)
    SELECT c.id, c.queue::text, c.kind::text, c.payload::jsonb, c.attempts::integer, c.max_attempts::integer,
           c.attempt_token, c.lease_expires_at,
           greatest(0, extract(epoch FROM v_now - c.available_at))::double precision
      FROM claimed c
     ORDER BY c.priority DESC, c.available_at, c.id;
END $$;

COMMENT ON FUNCTION pgfence.claim(text, text[], interval, integer, uuid, text) IS
$$Claim 0..max_jobs (1..1000) runnable jobs for worker_id from queues (NULL = all; else 1..10000 names), or
from the queues of queue_set (a set stored with define_queue_set; not with queues),
priority DESC, available_at, id order, each with a fresh attempt_token and a lease (1 ms..1 day) from
clock_timestamp(), capped at the job's run timeout (its deadline: reserved_at + timeout). Reclaims a batch of expired leases first (same rule as the sweep). Never hands one job to
two callers, and locks only the jobs it returns. Takes nothing from a paused queue (pause_queue) and never more
than a capped queue's free slots (set_queue_limit; a capped queue's jobs come after the others' in a claim over
several queues). Each row's waited_s: seconds the job had been runnable when claimed (claim time - available_at,
the database's clock). request_id (optional, fresh per call):
pgfence.claim_results(worker_id, ARRAY[request_id]) finds what this call took if its reply is lost. Needs READ
COMMITTED (PF004 otherwise). Errors: 22004, 22023.$$;

-- The jobs that claims made with these request ids took and that are still
-- leased to worker_id by those claims, as claim returned them, with their leases
-- renewed like a heartbeat's (the caller runs them now): what a caller whose claim
-- reply was lost (the connection dropped after the commit) holds without knowing
-- it. A job since reclaimed, released, finished or claimed again is not returned.
-- A claim with one of these request ids that is still running (its reply was lost
-- before it committed) is waited for, up to lock_timeout. (A claim whose request
-- reaches the server only after this call has run cannot be waited for: ask again
-- later if the network may still hold it.)
CREATE OR REPLACE FUNCTION pgfence.claim_results(
    worker_id   text,
    request_ids uuid[],
    lease       interval DEFAULT '30 seconds'
) RETURNS TABLE(id bigint, queue text, kind text, payload jsonb, attempts integer,
                max_attempts integer, attempt_token uuid, lease_expires_at timestamptz,
                waited_s double precision)
LANGUAGE plpgsql
-- Through jobs_reclaim_idx (the processing jobs), never by reading the table.
SET enable_seqscan = off
-- (and no JIT, which a plan costed with enable_seqscan off could otherwise start)
SET jit = off
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
    PERFORM pgfence._check_isolation('claim_results');
    -- Wait for those claims to end (each holds its request's lock until it commits),
    -- in a fixed order (two callers asking for the same ids never deadlock).
    PERFORM pgfence._lock_request(s.r) FROM (SELECT DISTINCT r FROM unnest(request_ids) AS r ORDER BY r) s;
    RETURN QUERY
    WITH held AS (
        SELECT j.id
          FROM pgfence.jobs j
         WHERE j.status = 'processing'
           AND j.reserved_by = worker_id
           AND (j.timeout IS NULL OR j.reserved_at + j.timeout > clock_timestamp())
           AND j.attempt_token IN (SELECT pgfence._request_token(pgfence._request_prefix(r, j.reserved_at),
                                                                 j.id, j.attempts)
                                     FROM unnest(request_ids) AS r)
         ORDER BY j.id
           FOR NO KEY UPDATE OF j
    ), renewed AS (
        UPDATE pgfence.jobs j
           -- (clock_timestamp(), not a time read before the row locks were waited for)
           SET lease_expires_at = least(clock_timestamp() + lease, j.reserved_at + j.timeout),
               heartbeat_at = clock_timestamp(),
               updated_at = clock_timestamp()
          FROM held h
         WHERE j.id = h.id
        RETURNING j.id, j.queue, j.kind, j.payload, j.attempts, j.max_attempts, j.attempt_token,
                  j.lease_expires_at, j.priority, j.available_at, j.reserved_at
    )
    SELECT r.id, r.queue::text, r.kind::text, r.payload::jsonb, r.attempts::integer, r.max_attempts::integer,
           r.attempt_token, r.lease_expires_at,
           greatest(0, extract(epoch FROM r.reserved_at - r.available_at))::double precision
      FROM renewed r
     ORDER BY r.priority DESC, r.available_at, r.id;
END $$;

COMMENT ON FUNCTION pgfence.claim_results(text, uuid[], interval) IS
$$The jobs that claim calls made with these request_ids (1..1000) took and still hold for worker_id (status
processing, same attempt, run timeout not passed), in claim order, as claim returned them, each lease renewed
to clock_timestamp() + lease (like a heartbeat, never past the run timeout), waited_s as that claim saw it: for a caller whose claim reply was lost. Waits (up to 10 s, then 55P03) for such a
claim that is still running. Needs READ COMMITTED. Errors: 22004, 22023, PF004, 55P03.$$;

-- The old name of claim_results, kept so that callers of schema_version 3 keep working.
CREATE OR REPLACE FUNCTION pgfence.claimed(
    worker_id   text,
    request_ids uuid[],
    lease       interval DEFAULT '30 seconds'
) RETURNS TABLE(id bigint, queue text, kind text, payload jsonb, attempts integer,
                max_attempts integer, attempt_token uuid, lease_expires_at timestamptz,
                waited_s double precision)
LANGUAGE sql AS $$
    SELECT * FROM pgfence.claim_results(worker_id, request_ids, lease)
$$;
COMMENT ON FUNCTION pgfence.claimed(text, uuid[], interval) IS
  'Deprecated: the old name of pgfence.claim_results (same arguments, same rows).';

COMMENT ON COLUMN pgfence.jobs.attempt_token IS
  'The fence: a new value on every claim (random, or derived from the claim''s request_id). Kept on done rows, and on rows fail dead-lettered, as the token that finished the job.';
COMMENT ON COLUMN pgfence.jobs.reserved_at IS
  'When the current or last attempt claimed the job. Written by claim only: claim_results() derives request-id tokens from it.';

INSERT INTO pgfence.routine_grants (routine, roles) VALUES ('claim', '{pgfence_worker}'),
                                                        ('claim_results', '{pgfence_worker}'),
                                                        ('claimed', '{pgfence_worker}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
