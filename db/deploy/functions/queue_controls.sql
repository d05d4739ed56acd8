-- Deploy pgfence:functions/queue_controls to pg (reworked after @v0.7.0)
-- requires: functions/queue_controls@v0.7.0
-- requires: tables/queue_rate_limits
-- requires: tables/queue_controls
-- requires: functions/_checks
--
-- Flow control per queue, enforced by claim for every client in every language:
--   * pause_queue / resume_queue: claim takes nothing from a paused queue; jobs already
--     claimed (running, or prefetched by a worker) finish normally; enqueue still works.
--   * set_queue_limit(queue, max_running): claim never lets more than max_running jobs
--     of the queue be processing at once, across all workers; NULL removes the cap.
--   * set_queue_rate_limit(queue, max_claims, per): claims hand out at most max_claims
--     jobs of the queue per `per`, across all workers, by a token bucket (below); NULL
--     removes the limit.
-- All four are operator actions, recorded in pgfence.queue_controls (who, when).
-- _claim_controlled is claim's pick while any queue has a control.
-- Changed after @v0.7.0: the rate limit (set_queue_rate_limit, the bucket helpers and
-- its use in _claim_controlled, queue_limits' new columns: a DROP and CREATE, as its
-- result changed); resume_queue and set_queue_limit(NULL) keep a row that still holds a
-- rate limit; _claim_controlled takes a set of queues (claim(queue_set) passes its
-- stored set whole; the list signature of @v0.7.0 stays, for claim's lists).

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
    -- The row first, locked (a concurrent pause, cap or rate limit waits, or is waited
    -- for, and its change is what is read), then one change to it.
    SELECT * INTO v_row FROM pgfence.queue_controls c WHERE c.queue = queue FOR NO KEY UPDATE;
    IF NOT FOUND OR v_row.paused_at IS NULL THEN
        RETURN false;
    ELSIF v_row.max_running IS NULL AND v_row.max_claims IS NULL THEN
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
    -- No cap: the row locked first (as resume_queue), then kept for a pause or a rate
    -- limit, or deleted.
    SELECT * INTO v_row FROM pgfence.queue_controls c WHERE c.queue = queue FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    ELSIF v_row.paused_at IS NULL AND v_row.max_claims IS NULL THEN
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

-- A rate limit's token bucket at `at`: its tokens as of refilled_at plus max_claims per
-- `per` since (a clock that went back adds nothing), at most max_claims. NULL: no limit.
CREATE OR REPLACE FUNCTION pgfence._rate_tokens(max_claims integer, per interval, tokens double precision,
                                                refilled_at timestamptz, at timestamptz)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT least(max_claims::double precision,
                 tokens + greatest(extract(epoch FROM at - refilled_at)::double precision, 0)
                          * max_claims / extract(epoch FROM per)::double precision)
$$;
COMMENT ON FUNCTION pgfence._rate_tokens(integer, interval, double precision, timestamptz, timestamptz) IS
  'Private: a rate limit''s bucket at `at` (refilled at max_claims per `per` since refilled_at, at most max_claims); NULL without a limit.';

-- The claims a rate limit's bucket allows at `at`: its whole tokens. NULL: no limit.
CREATE OR REPLACE FUNCTION pgfence._rate_allowance(max_claims integer, per interval, tokens double precision,
                                                   refilled_at timestamptz, at timestamptz)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- (+ 1e-9: refills that add up to a whole token may land a hair below it)
    SELECT floor(pgfence._rate_tokens(max_claims, per, tokens, refilled_at, at) + 1e-9)::integer
$$;
COMMENT ON FUNCTION pgfence._rate_allowance(integer, interval, double precision, timestamptz, timestamptz) IS
  'Private: the claims a rate limit''s bucket allows at `at` (its whole tokens); NULL without a limit.';

-- Operator: at most max_claims jobs of a queue claimed per `per` (NULL: no limit). A
-- token bucket of max_claims tokens, refilled continuously at max_claims per `per` by the
-- database clock, each claimed job taking one. It starts full, so the queue may hand out
-- max_claims at once after an idle spell of `per` (the burst), and over any window of
-- length T at most max_claims + max_claims * T / per.
CREATE OR REPLACE FUNCTION pgfence.set_queue_rate_limit(queue text, max_claims integer,
                                                        per interval DEFAULT interval '1 second')
RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_row pgfence.queue_controls;
BEGIN
    PERFORM pgfence._check_name('queue', queue);
    IF max_claims IS NOT NULL THEN
        PERFORM pgfence._check_range('max_claims', max_claims, 1, 1000000);
        PERFORM pgfence._check_interval('per', per, interval '1 millisecond', interval '1 day',
            '1 millisecond..1 day', 'pass an interval between 1 millisecond and 1 day, e.g. ''1 second''');
        -- A new limit starts with a full bucket; a changed one keeps its bucket as it stands
        -- now, refilled at the old rate up to now (at most the new size), and refills at the
        -- new rate from now: setting a limit again grants no extra burst, and the time
        -- before the change is not refilled again at the new rate (a lowered rate would
        -- otherwise starve a queue whose bucket was full, a raised one refill the past).
        INSERT INTO pgfence.queue_controls AS c (queue, max_claims, claims_per, rate_tokens, rate_refilled_at,
                                                 rate_limited_at, rate_limited_by)
        VALUES (queue, max_claims, per, max_claims, clock_timestamp(), clock_timestamp(), pgfence._invoker())
        ON CONFLICT ON CONSTRAINT queue_controls_pkey DO UPDATE
            SET max_claims = excluded.max_claims, claims_per = excluded.claims_per,
                rate_tokens = CASE WHEN c.rate_tokens IS NULL THEN excluded.rate_tokens
                                   ELSE least(pgfence._rate_tokens(c.max_claims, c.claims_per, c.rate_tokens,
                                                                   c.rate_refilled_at, excluded.rate_refilled_at),
                                              excluded.max_claims) END,
                rate_refilled_at = excluded.rate_refilled_at,
                rate_limited_at = excluded.rate_limited_at, rate_limited_by = excluded.rate_limited_by;
        RETURN;
    END IF;
    -- No limit: the row locked first (as resume_queue), then kept for a pause or a cap, or deleted.
    SELECT * INTO v_row FROM pgfence.queue_controls c WHERE c.queue = queue FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    ELSIF v_row.paused_at IS NULL AND v_row.max_running IS NULL THEN
        DELETE FROM pgfence.queue_controls c WHERE c.queue = queue;
    ELSE
        UPDATE pgfence.queue_controls c
           SET max_claims = NULL, claims_per = NULL, rate_tokens = NULL, rate_refilled_at = NULL,
               rate_limited_at = clock_timestamp(), rate_limited_by = pgfence._invoker()
         WHERE c.queue = queue;
    END IF;
END $$;
COMMENT ON FUNCTION pgfence.set_queue_rate_limit(text, integer, interval) IS
$$Operator: claims hand out at most max_claims (1..1000000) jobs of queue per `per` (1 millisecond..1 day,
default 1 second), across all workers: a token bucket of max_claims, refilled continuously at max_claims per
`per` by the database clock, so the burst after an idle spell is max_claims and over any window of length T at
most max_claims + max_claims * T / per are claimed; the other jobs stay queued. Set again, it keeps the bucket
as the old limit left it (refilled up to now, at most the new max_claims) and refills at the new rate from now.
NULL removes the limit (per is then ignored). It binds the claims that start after it commits. Errors: 22004,
22023.$$;

-- The queues with a control, how many of their jobs are processing now, and what a rate
-- limit's bucket allows now. (A DROP and CREATE: its result gained the rate limit's
-- columns after @v0.7.0.)
DROP FUNCTION IF EXISTS pgfence.queue_limits();
CREATE FUNCTION pgfence.queue_limits()
RETURNS TABLE(queue text, paused_at timestamptz, paused_by text, max_running integer, running bigint,
              limited_at timestamptz, limited_by text, max_claims integer, claims_per interval,
              claims_available integer, rate_limited_at timestamptz, rate_limited_by text)
LANGUAGE sql STABLE AS $$
    SELECT c.queue, c.paused_at, c.paused_by, c.max_running,
           (SELECT count(*) FROM pgfence.jobs j WHERE j.status = 'processing' AND j.queue = c.queue),
           c.limited_at, c.limited_by, c.max_claims, c.claims_per,
           pgfence._rate_allowance(c.max_claims, c.claims_per, c.rate_tokens, c.rate_refilled_at, clock_timestamp()),
           c.rate_limited_at, c.rate_limited_by
      FROM pgfence.queue_controls c
     ORDER BY c.queue
$$;
COMMENT ON FUNCTION pgfence.queue_limits() IS
$$Operator: the paused, capped and rate-limited queues (pgfence.queue_controls) with the number of their jobs
processing now and, for a rate limit, the claims its bucket allows now (claims_available).$$;

-- claim's pick while some queue has a control (claim calls it only then), over a set
-- of queues (members: a jsonb object keyed by the names, as claim tests them, and names
-- how many; NULL: every queue): the ids of the jobs locked (FOR NO KEY UPDATE SKIP
-- LOCKED), at most max_jobs, NULL for none.
-- The controls are read once; a queue is either claimed in 1 (no control then) or in 2.
--   1. The asked-for queues without a control, as claim takes them: the set less the
--      controlled names through _claim_from_set (a stored set of 10,000 names is
--      neither listed nor copied unless a controlled queue is in it); every queue
--      (NULL) through a window of the first
--      4 * max_jobs + 64 runnable jobs in claim order, keeping the uncontrolled ones, or,
--      when controlled queues fill that window (a paused queue's backlog at the front),
--      through _claim_from_list over the queues that have queued jobs (one probe of
--      jobs_claim_idx per queue) less the controlled ones.
--   2. Then each capped or rate-limited, unpaused queue asked for that has a runnable
--      job, in name order, while max_jobs is not reached: its row of queue_controls is
--      locked FOR NO KEY UPDATE SKIP LOCKED (held until the claim commits, so the claim
--      that locks it next counts this one's jobs as processing and sees its bucket
--      debited), and at most min(max_running minus its processing jobs, the whole tokens
--      of its bucket refilled to clock_timestamp()) are taken; a rate limit's bucket is
--      then debited by the jobs taken (refilled_at = that clock). A row another claim
--      holds is skipped: that queue gives nothing to this claim (the caller claims
--      again), so claims never wait for one another here, however long a caller's
--      transaction, and never deadlock.
-- So a claim over several queues takes a capped queue's jobs after the others', not in
-- strict priority order across them. Paused queues are never read.
CREATE OR REPLACE FUNCTION pgfence._claim_controlled(members jsonb, names integer, max_jobs integer, as_of timestamptz)
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := as_of;
    v_ctl jsonb;
    v_ctl_names text[];
    v_ctl_listed integer;
    v_limited text[];
    v_free text[];
    v_cand bigint[];
    v_seen bigint;
    v_window integer := 4 * max_jobs + 64;
    v_ids bigint[];
    v_got bigint[];
    v_need integer;
    v_running integer;
    v_queue text;
    v_row pgfence.queue_controls;
    v_take integer;
    v_clock timestamptz;
    v_tokens double precision;
BEGIN
    SELECT coalesce(jsonb_object_agg(q.queue, true), '{}'),
           coalesce(array_agg(q.queue) FILTER (WHERE members ? q.queue), '{}'),
           count(*) FILTER (WHERE members ? q.queue),
           coalesce(array_agg(q.queue ORDER BY q.queue)
                        FILTER (WHERE q.paused_at IS NULL AND (q.max_running IS NOT NULL OR q.max_claims IS NOT NULL)
                                  AND (members IS NULL OR members ? q.queue)), '{}')
      INTO v_ctl, v_ctl_names, v_ctl_listed, v_limited
      FROM pgfence.queue_controls q;
    IF members IS NOT NULL THEN
        -- (the set less its controlled names; names - v_ctl_listed of them are left)
        IF names > v_ctl_listed THEN
            v_ids := pgfence._claim_from_set(CASE WHEN v_ctl_listed = 0 THEN members ELSE members - v_ctl_names END,
                                             names - v_ctl_listed, max_jobs, v_now);
        END IF;
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
        IF v_free IS NOT NULL THEN
            v_ids := pgfence._claim_from_list(v_free, max_jobs, v_now);
        END IF;
    END IF;
    v_ids := coalesce(v_ids, '{}');

    FOREACH v_queue IN ARRAY v_limited LOOP
        v_need := max_jobs - cardinality(v_ids);
        EXIT WHEN v_need <= 0;
        CONTINUE WHEN NOT EXISTS (SELECT FROM pgfence.jobs j
                                   WHERE j.status = 'queued' AND j.queue = v_queue AND j.available_at <= v_now);
        v_row := NULL;
        SELECT * INTO v_row FROM pgfence.queue_controls q
         WHERE q.queue = v_queue AND q.paused_at IS NULL
           FOR NO KEY UPDATE SKIP LOCKED;
        -- another claim holds it now, or paused or uncontrolled meanwhile
        CONTINUE WHEN v_row.queue IS NULL OR (v_row.max_running IS NULL AND v_row.max_claims IS NULL);
        v_take := v_need;
        IF v_row.max_running IS NOT NULL THEN
            SELECT count(*) INTO v_running FROM pgfence.jobs j WHERE j.status = 'processing' AND j.queue = v_queue;
            v_take := least(v_take, v_row.max_running - v_running);
        END IF;
        IF v_row.max_claims IS NOT NULL THEN
            v_clock := clock_timestamp();
            v_tokens := pgfence._rate_tokens(v_row.max_claims, v_row.claims_per, v_row.rate_tokens,
                                             v_row.rate_refilled_at, v_clock);
            v_take := least(v_take, pgfence._rate_allowance(v_row.max_claims, v_row.claims_per, v_row.rate_tokens,
                                                            v_row.rate_refilled_at, v_clock));
        END IF;
        CONTINUE WHEN v_take <= 0;
        SELECT array_agg(p.id) INTO v_got
          FROM (SELECT j.id FROM pgfence.jobs j
                 WHERE j.status = 'queued' AND j.queue = v_queue AND j.available_at <= v_now
                 ORDER BY j.priority DESC, j.available_at, j.id
                 LIMIT v_take
                   FOR NO KEY UPDATE SKIP LOCKED) p;
        IF v_row.max_claims IS NOT NULL AND v_got IS NOT NULL THEN
            -- (the claim that locks the row next reads this, committed with the claim)
            UPDATE pgfence.queue_controls q
               SET rate_tokens = greatest(v_tokens - cardinality(v_got), 0), rate_refilled_at = v_clock
             WHERE q.queue = v_queue;
        END IF;
        v_ids := v_ids || coalesce(v_got, '{}');
    END LOOP;
    RETURN CASE WHEN cardinality(v_ids) > 0 THEN v_ids END;
END $$;
COMMENT ON FUNCTION pgfence._claim_controlled(jsonb, integer, integer, timestamptz) IS
  'Private: claim''s pick over a set of queues (NULL: all) while a queue is paused, capped or rate-limited: nothing from paused queues, at most max_running processing per capped queue and at most its bucket''s allowance per rate-limited queue (its control row locked SKIP LOCKED until the claim commits, the bucket debited by what was taken); the locked ids, or NULL.';

-- The same over a list of queue names (NULL: every queue): claim's one queue and its
-- lists. (Its signature is @v0.7.0's: a claim of that version still finds it during an
-- upgrade, and the claim of this one during a revert. PL/pgSQL, whose body is not
-- resolved when it is made: _queue_set_of is functions/claim's, which a build from the
-- newest scripts alone runs after this one.)
CREATE OR REPLACE FUNCTION pgfence._claim_controlled(queues text[], max_jobs integer, as_of timestamptz)
RETURNS bigint[]
LANGUAGE plpgsql AS $$
BEGIN
    RETURN pgfence._claim_controlled(CASE WHEN queues IS NOT NULL THEN pgfence._queue_set_of(queues) END,
                                     cardinality(queues), max_jobs, as_of);
END $$;
COMMENT ON FUNCTION pgfence._claim_controlled(text[], integer, timestamptz) IS
  'Private: _claim_controlled over a list of queue names (NULL: every queue).';

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('pause_queue',          '{pgfence_operator}'),
    ('resume_queue',         '{pgfence_operator}'),
    ('set_queue_limit',      '{pgfence_operator}'),
    ('set_queue_rate_limit', '{pgfence_operator}'),
    ('queue_limits',         '{pgfence_operator,pgfence_viewer}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
