-- Deploy pgfence:functions/enqueue to pg (reworked after @v0.7.0)
-- requires: functions/enqueue@v0.7.0
-- requires: tables/history
-- requires: tables/job_timeouts
-- requires: tables/job_unique_for
-- requires: tables/queue_timeouts
-- requires: functions/queue_timeouts
--
-- enqueue and its shared option checks. NOTIFY pgfence_enqueue carries the queue's
-- wake-up tag (tables/secret_key), not its name; payloads nest at most 64 levels
-- (functions/_checks). Changed after @v0.5.0: the idempotency key of a done job is
-- held in pgfence.held_keys (done jobs have left pgfence.jobs and its unique index):
-- enqueue looks there first, and again after an insert that may have waited for a
-- holder that completed meanwhile.
-- Changed after @v0.7.0: two arguments (a new signature: the old one is dropped, since
-- adding defaulted parameters with CREATE OR REPLACE would make an overload):
--   * timeout: the job's run timeout (tables/job_timeouts), else the queue's default
--     (pgfence.queue_timeouts), resolved here and stored on the job, so claim reads
--     nothing more for it;
--   * unique_for: how long a done job keeps holding its idempotency key
--     (tables/job_unique_for): NULL as before (its retention), 0 not at all, else until
--     created_at + unique_for. A key held by a done job (pgfence.held_keys) past its
--     held_until is free.
-- The options that are NULL unless given (idempotency_key, run_at, timeout, unique_for)
-- are checked by an expression of their own that runs only when one is given.
-- unique_for without an idempotency_key is refused (22023): it changed nothing, and a
-- caller who forgot the key got duplicates believing them kept out.

BEGIN;

-- The options every enqueue shares (single and batch): queue, max_attempts 1..1000,
-- recovery_policy auto or manual. Inlined into enqueue's fast path, like _name_ok.
CREATE OR REPLACE FUNCTION pgfence._enqueue_options_ok(queue text, max_attempts integer, recovery_policy text)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT pgfence._name_ok(queue) AND coalesce(max_attempts BETWEEN 1 AND 1000, false)
           AND coalesce(recovery_policy IN ('auto', 'manual'), false)
$$;
COMMENT ON FUNCTION pgfence._enqueue_options_ok(text, integer, text) IS
  'Private: true for valid enqueue options (queue, max_attempts 1..1000, recovery_policy auto|manual), never NULL.';

-- The done job holding (queue, key): pgfence.held_keys, whose row the purge deletes
-- once the job's retention has passed (as it deleted the done job itself before the
-- history existed: the key is held until the purge frees it). The probe of
-- _key_held_after_insert leaves a row with purge_at -infinity for the rest of its
-- transaction: that one holds nothing.
-- A key whose job was enqueued with unique_for is held only until its held_until.
CREATE OR REPLACE FUNCTION pgfence._held_key(queue text, idempotency_key text) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT k.job_id FROM pgfence.held_keys k
     WHERE k.queue = _held_key.queue AND k.idempotency_key = _held_key.idempotency_key
       AND k.purge_at > '-infinity'
       AND (k.held_until IS NULL OR k.held_until > clock_timestamp())
$$;
COMMENT ON FUNCTION pgfence._held_key(text, text) IS
  'Private: the done job whose idempotency key (queue, idempotency_key) is held (pgfence.held_keys, until the purge frees it after its retention, or until its held_until), or NULL.';

-- After an enqueue inserted a job with (queue, key): the done job that holds the key,
-- if one does. The insert may have waited for a job holding the key in pgfence.jobs'
-- unique index that completed meanwhile (its row deleted, its key moved to held_keys in
-- the same transaction): under READ COMMITTED this statement's snapshot sees that
-- commit. Under REPEATABLE READ or SERIALIZABLE the transaction's snapshot would not,
-- so the key is probed by an insert into held_keys, which raises 40001 (serialization
-- failure: retry the transaction) on a row committed since the snapshot, and is taken
-- back when nothing conflicts.
CREATE OR REPLACE FUNCTION pgfence._key_held_after_insert(queue text, idempotency_key text) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        INSERT INTO pgfence.held_keys AS k (queue, idempotency_key, job_id, purge_at)
        VALUES (queue, idempotency_key, 0, '-infinity')
        ON CONFLICT ON CONSTRAINT held_keys_pkey DO NOTHING;
        IF FOUND THEN
            DELETE FROM pgfence.held_keys k
             WHERE k.queue = queue AND k.idempotency_key = idempotency_key AND k.purge_at = '-infinity';
            RETURN NULL;
        END IF;
    END IF;
    RETURN pgfence._held_key(queue, idempotency_key);
END $$;
COMMENT ON FUNCTION pgfence._key_held_after_insert(text, text) IS
  'Private: after inserting a job with this key, the done job holding it (committed meanwhile), or NULL; 40001 under REPEATABLE READ when one committed since the snapshot.';

-- Checks the options every enqueue shares, naming what is wrong.
CREATE OR REPLACE FUNCTION pgfence._check_enqueue_options(queue text, max_attempts integer, recovery_policy text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF pgfence._enqueue_options_ok(queue, max_attempts, recovery_policy) THEN
        RETURN;
    END IF;
    PERFORM pgfence._check_name('queue', queue);
    PERFORM pgfence._check_range('max_attempts', max_attempts, 1, 1000);
    IF recovery_policy IS NULL THEN
        PERFORM pgfence._raise_null('recovery_policy', 'pass ''auto'' or ''manual''');
    ELSIF recovery_policy NOT IN ('auto', 'manual') THEN
        PERFORM pgfence._raise_invalid('recovery_policy', quote_literal(recovery_policy), 'unknown policy',
            'pass ''auto'' (requeue when a lease expires) or ''manual'' (send to manual_review for a human)');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_enqueue_options(text, integer, text) IS
  'Private: check queue, max_attempts and recovery_policy of an enqueue.';

-- unique_for: NULL (a done job holds its key for its retention), or 0 .. 100 years.
-- Stored as a plain length of time (_timeout_length), like a timeout, so the bound is
-- on that length: 36525 days, what '100 years' is stored as (extract(epoch) counts a
-- year as 365.25 days, where interval comparison counts it as 360: '101 years' compared
-- below '36500 days' and then broke the table's CHECK with 23514).
CREATE OR REPLACE FUNCTION pgfence._unique_for_ok(value interval) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT value IS NULL OR (extract(epoch FROM value) BETWEEN 0 AND 3155760000  -- (36525 days)
                             AND pgfence._interval_signs_agree(value))
$$;
COMMENT ON FUNCTION pgfence._unique_for_ok(interval) IS
  'Private: true for NULL or a valid unique_for (0 .. 100 years: a length of at most 36525 days, parts of one sign), never NULL.';

CREATE OR REPLACE FUNCTION pgfence._check_unique_for(arg text, value interval) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_hint text := 'pass NULL (a done job holds its key for its retention), 0 (only while queued, processing or '
                   'manual_review) or a period such as ''1 hour'' (held until created_at + that), at most 100 years';
BEGIN
    IF NOT pgfence._unique_for_ok(value) THEN
        IF pgfence._interval_signs_agree(value) AND extract(epoch FROM value) < 0 THEN
            PERFORM pgfence._raise_invalid(arg, value::text, 'outside 0..100 years', v_hint);
        END IF;
        PERFORM pgfence._check_interval(arg, value, interval '0', interval '36525 days', '0..100 years', v_hint);
        -- (years compare as 360 days there, but last 365.25: the length decides)
        PERFORM pgfence._raise_invalid(arg, value::text,
            format('outside 0..100 years (it lasts %s days, more than 36525)',
                   trim_scale(extract(epoch FROM value) / 86400)),
            v_hint);
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_unique_for(text, interval) IS
  'Private: check a unique_for interval (NULL, or 0 .. 100 years: a length of at most 36525 days), naming arg.';

-- unique_for says how long a done job holds its idempotency key: given for jobs without
-- a key it would change nothing, and a caller who forgot the key would get duplicates
-- believing them kept out (22023 naming unique_for).
CREATE OR REPLACE FUNCTION pgfence._check_unique_for_has_key(unique_for interval, has_key boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF unique_for IS NOT NULL AND NOT has_key THEN
        PERFORM pgfence._raise_invalid('unique_for', unique_for::text, 'is given without an idempotency key',
            'unique_for is how long a done job holds its idempotency key: pass idempotency_key too, or no unique_for');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_unique_for_has_key(interval, boolean) IS
  'Private: refuse a unique_for given for jobs without an idempotency key (22023 naming unique_for).';

CREATE OR REPLACE FUNCTION pgfence._key_ok(value text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT value IS NULL OR (value <> '' AND char_length(value) <= 255)
$$;
COMMENT ON FUNCTION pgfence._key_ok(text) IS
  'Private: true for a valid idempotency key (NULL, or 1..255 characters), never NULL.';

CREATE OR REPLACE FUNCTION pgfence._check_idempotency_key(arg text, value text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pgfence._key_ok(value) THEN
        PERFORM pgfence._raise_invalid(arg, quote_literal(value), format('length %s is outside 1..255', char_length(value)),
            'pass NULL for no key, or a key of 1 to 255 characters');
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_idempotency_key(text, text) IS
  'Private: check an idempotency key (NULL, or 1..255 characters).';

-- Enqueue one job and return its id. With an idempotency_key, while a job with the
-- same (queue, key) is queued, processing, manual_review or done (and holding its key:
-- unique_for), nothing is inserted and that job's id is returned, also under
-- concurrent same-key calls. Runs in the caller's transaction: rolled back with it.
DROP FUNCTION IF EXISTS pgfence.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text);
CREATE OR REPLACE FUNCTION pgfence.enqueue(
    kind            text,
    payload         jsonb       DEFAULT '{}',
    queue           text        DEFAULT 'default',
    priority        integer     DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer     DEFAULT 3,
    recovery_policy text        DEFAULT 'auto',
    idempotency_key text        DEFAULT NULL,
    timeout         interval    DEFAULT NULL,
    unique_for      interval    DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_id bigint;
    v_held bigint;
    v_now timestamptz := clock_timestamp();
    v_timeout interval;
    v_unique_for interval;
    v_bad boolean;
BEGIN
    -- Two expressions decide whether every argument is valid (the common case costs
    -- no nested calls); only an invalid call runs the checks that name the argument.
    -- (The *_ok predicates are inlined; anything NULL counts as invalid here.) The
    -- second, over the arguments that are NULL unless given, runs only when one is
    -- given: PL/pgSQL sets an expression up again in every transaction it runs in, and
    -- these four predicates were a third of the one check expression's set-up (5-7 us
    -- of a single enqueue's server time, bench/enqueue_parts.py).
    v_bad := NOT coalesce(pgfence._name_ok(kind) AND pgfence._payload_ok(payload)
                          AND pgfence._enqueue_options_ok(queue, max_attempts, recovery_policy)
                          AND enqueue.priority IS NOT NULL, false);
    IF NOT v_bad AND (idempotency_key IS NOT NULL OR enqueue.run_at IS NOT NULL OR enqueue.timeout IS NOT NULL
                      OR enqueue.unique_for IS NOT NULL) THEN
        v_bad := NOT coalesce(pgfence._key_ok(idempotency_key) AND pgfence._run_at_ok(enqueue.run_at)
                              AND pgfence._timeout_ok(enqueue.timeout) AND pgfence._unique_for_ok(enqueue.unique_for)
                              AND (enqueue.unique_for IS NULL OR idempotency_key IS NOT NULL), false);
    END IF;
    IF v_bad THEN
        PERFORM pgfence._check_name('kind', kind);
        PERFORM pgfence._check_payload('payload', payload);
        PERFORM pgfence._check_enqueue_options(queue, max_attempts, recovery_policy);
        IF enqueue.priority IS NULL THEN
            PERFORM pgfence._raise_null('priority', 'pass an integer priority (higher runs first), default 0');
        END IF;
        PERFORM pgfence._check_idempotency_key('idempotency_key', idempotency_key);
        PERFORM pgfence._check_run_at('run_at', enqueue.run_at);
        PERFORM pgfence._check_timeout('timeout', enqueue.timeout);
        PERFORM pgfence._check_unique_for('unique_for', enqueue.unique_for);
        PERFORM pgfence._check_unique_for_has_key(enqueue.unique_for, idempotency_key IS NOT NULL);
    END IF;
    -- The run timeout: the job's own, else the queue's default (one look-up by key).
    IF enqueue.timeout IS NOT NULL THEN
        v_timeout := pgfence._timeout_length(enqueue.timeout);
    ELSE
        SELECT t.timeout INTO v_timeout FROM pgfence.queue_timeouts t WHERE t.queue = enqueue.queue;
    END IF;
    v_unique_for := pgfence._timeout_length(enqueue.unique_for);  -- (NULL for NULL)

    IF idempotency_key IS NULL THEN
        INSERT INTO pgfence.jobs (queue, kind, payload, priority, available_at, max_attempts,
                                  recovery_policy, created_at, updated_at, enqueued_by, timeout)
        VALUES (enqueue.queue, enqueue.kind, enqueue.payload, enqueue.priority,
                coalesce(enqueue.run_at, v_now), enqueue.max_attempts, enqueue.recovery_policy, v_now, v_now,
                pgfence._invoker(), v_timeout)
        RETURNING id INTO v_id;
        PERFORM pg_notify('pgfence_enqueue', pgfence._wakeup_tag(enqueue.queue));
        RETURN v_id;
    END IF;

    -- Insert unless the key is held (by a done job: held_keys; by a live one: the
    -- unique index); a concurrent holder makes us wait for its transaction, then either
    -- we insert (it rolled back, or completed: look again) or we read its id. If the
    -- holder left the key-holding states in between, try again.
    LOOP
        v_id := pgfence._held_key(enqueue.queue, enqueue.idempotency_key);
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
        INSERT INTO pgfence.jobs AS j (queue, kind, payload, priority, available_at, max_attempts,
                                       recovery_policy, idempotency_key, created_at, updated_at, enqueued_by,
                                       timeout, unique_for)
        VALUES (enqueue.queue, enqueue.kind, enqueue.payload, enqueue.priority,
                coalesce(enqueue.run_at, v_now), enqueue.max_attempts, enqueue.recovery_policy,
                enqueue.idempotency_key, v_now, v_now, pgfence._invoker(), v_timeout, v_unique_for)
        ON CONFLICT (queue, idempotency_key)
            WHERE idempotency_key IS NOT NULL
              AND status IN ('queued', 'processing', 'manual_review', 'done')
            DO NOTHING
        RETURNING j.id INTO v_id;
        IF v_id IS NOT NULL THEN
            v_held := pgfence._key_held_after_insert(enqueue.queue, enqueue.idempotency_key);
            IF v_held IS NOT NULL THEN
                DELETE FROM pgfence.jobs x WHERE x.id = v_id;
                RETURN v_held;
            END IF;
            PERFORM pg_notify('pgfence_enqueue', pgfence._wakeup_tag(enqueue.queue));
            RETURN v_id;
        END IF;
        SELECT j.id INTO v_id FROM pgfence.jobs j
         WHERE j.queue = enqueue.queue AND j.idempotency_key = enqueue.idempotency_key
           AND j.status IN ('queued', 'processing', 'manual_review', 'done');
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END LOOP;
END $$;

COMMENT ON FUNCTION pgfence.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, interval, interval) IS
$$Enqueue one job; returns its id. payload: a JSON object of at most 1 MiB, nested at most 64 levels.
run_at NULL = now. max_attempts 1..1000. recovery_policy 'auto' (expired lease -> queued) or 'manual'
(-> manual_review). idempotency_key: while a job with the same (queue, key) is
queued/processing/manual_review, or done and holding it (pgfence.held_keys: until purged, or per unique_for),
returns that job's id and inserts nothing (under REPEATABLE READ or SERIALIZABLE, a same-key
enqueue or completion committed since the transaction's snapshot raises 40001: retry the transaction). Joins the caller's transaction. On commit, notifies channel pgfence_enqueue with the queue's
wake-up tag (pgfence.wakeup_tags). timeout (1 ms..30 days; NULL = the queue's default, set_queue_timeout, or
none): the run timeout of each attempt; the lease never outlives claim time + timeout, and an attempt that
reaches it ends as timed_out (its calls get PF001) and the job follows its recovery_policy. unique_for (NULL,
or 0..100 years): how long a done job keeps holding its key: NULL its retention, 0 not at all, else until
created_at + unique_for; given without an idempotency_key, 22023. Errors: 22004 NULL argument, 22023 bad value.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES ('enqueue', '{pgfence_producer}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
