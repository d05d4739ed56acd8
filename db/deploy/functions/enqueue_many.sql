-- Deploy pgfence:functions/enqueue_many to pg (reworked after @v0.7.0)
-- requires: functions/enqueue_many@v0.7.0
-- requires: functions/enqueue
-- requires: tables/history
--
-- enqueue_many, whole; its argument checks are a function of their own
-- (_check_enqueue_many_inputs). Changed after @v0.5.0: keys held by done jobs
-- (pgfence.held_keys) resolve to them, looked up before the insert and again after it
-- (see _key_held_after_insert in functions/enqueue).
-- Changed after @v0.7.0: timeout and unique_for, one value for the batch, as enqueue's
-- (a new signature: the old one is dropped); a held key past its held_until is free.

BEGIN;

-- enqueue_many's arguments: raise the error that names the first bad one (22004,
-- 22023); returns for valid arguments. The arrays are checked whole first (shape,
-- lengths), then element by element, each naming its index.
CREATE OR REPLACE FUNCTION pgfence._check_enqueue_many_inputs(
    kinds text[], payloads jsonb[], queue text, priorities integer[], run_ats timestamptz[],
    max_attempts integer, recovery_policy text, idempotency_keys text[]
) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n integer := cardinality(kinds);
    v_bad integer;
BEGIN
    IF kinds IS NULL THEN
        PERFORM pgfence._raise_null('kinds', 'pass an array with one kind per job');
    END IF;
    PERFORM pgfence._check_array('kinds', kinds);
    PERFORM pgfence._check_array('payloads', payloads);
    PERFORM pgfence._check_array('priorities', priorities);
    PERFORM pgfence._check_array('run_ats', run_ats);
    PERFORM pgfence._check_array('idempotency_keys', idempotency_keys);
    PERFORM pgfence._check_range('kinds length', n, 1, 10000);
    PERFORM pgfence._check_enqueue_options(queue, max_attempts, recovery_policy);
    IF cardinality(payloads) <> n OR cardinality(priorities) <> n OR cardinality(run_ats) <> n
       OR cardinality(idempotency_keys) <> n THEN
        PERFORM pgfence._raise_invalid('array lengths',
            format('payloads=%s priorities=%s run_ats=%s idempotency_keys=%s', coalesce(cardinality(payloads)::text, 'NULL'),
                   coalesce(cardinality(priorities)::text, 'NULL'), coalesce(cardinality(run_ats)::text, 'NULL'),
                   coalesce(cardinality(idempotency_keys)::text, 'NULL')),
            format('kinds has %s elements', n),
            'pass NULL or an array with exactly one element per kind, in the same order');
    END IF;
    SELECT min(t.ord) INTO v_bad FROM unnest(kinds) WITH ORDINALITY t(k, ord)
     WHERE NOT pgfence._name_ok(t.k);
    IF v_bad IS NOT NULL THEN
        PERFORM pgfence._check_name(format('kinds[%s]', v_bad), kinds[v_bad]);
    END IF;
    IF payloads IS NOT NULL THEN
        SELECT min(t.ord) INTO v_bad FROM unnest(payloads) WITH ORDINALITY t(p, ord)
         WHERE NOT pgfence._payload_ok(t.p);
        IF v_bad IS NOT NULL THEN
            PERFORM pgfence._check_payload(format('payloads[%s]', v_bad), payloads[v_bad]);
        END IF;
    END IF;
    IF array_position(priorities, NULL) IS NOT NULL THEN
        PERFORM pgfence._raise_null(format('priorities[%s]', array_position(priorities, NULL)),
            'pass NULL for all-default priorities, or an integer for every job');
    END IF;
    IF run_ats IS NOT NULL THEN
        SELECT min(t.ord) INTO v_bad FROM unnest(run_ats) WITH ORDINALITY t(r, ord) WHERE NOT pgfence._run_at_ok(t.r);
        IF v_bad IS NOT NULL THEN
            PERFORM pgfence._check_run_at(format('run_ats[%s]', v_bad), run_ats[v_bad]);
        END IF;
    END IF;
    IF idempotency_keys IS NOT NULL THEN
        SELECT min(t.ord) INTO v_bad FROM unnest(idempotency_keys) WITH ORDINALITY t(k, ord)
         WHERE NOT pgfence._key_ok(t.k);
        IF v_bad IS NOT NULL THEN
            PERFORM pgfence._check_idempotency_key(format('idempotency_keys[%s]', v_bad), idempotency_keys[v_bad]);
        END IF;
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_enqueue_many_inputs(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[]) IS
  'Private: check enqueue_many''s arguments, raising the error that names the first bad one (22004, 22023).';

-- Enqueue a batch of jobs into one queue in one set-based call. The arrays are
-- parallel: element i of each describes job i. Rows come back in input order,
-- one per input element: ordinal (1-based), the job id, and created = false when
-- an idempotency key resolved to an existing job (or to an earlier element of
-- the same batch with the same key). Same idempotency rules as enqueue.
DROP FUNCTION IF EXISTS pgfence.enqueue_many(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[]);
CREATE OR REPLACE FUNCTION pgfence.enqueue_many(
    kinds            text[],
    payloads         jsonb[]       DEFAULT NULL,
    queue            text          DEFAULT 'default',
    priorities       integer[]     DEFAULT NULL,
    run_ats          timestamptz[] DEFAULT NULL,
    max_attempts     integer       DEFAULT 3,
    recovery_policy  text          DEFAULT 'auto',
    idempotency_keys text[]        DEFAULT NULL,
    timeout          interval      DEFAULT NULL,
    unique_for       interval      DEFAULT NULL
) RETURNS TABLE(ordinal integer, id bigint, created boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    n integer := cardinality(kinds);
    v_now timestamptz := clock_timestamp();
    v_invoker text := pgfence._invoker();
    v_keys text[] := '{}'::text[];          -- resolved keys ...
    v_key_ids bigint[] := '{}'::bigint[];   -- ... and the job id each resolved to
    v_key_created boolean[] := '{}'::boolean[];
    v_todo text[];
    v_new_keys text[];
    v_new_ids bigint[];
    v_gone_keys text[];
    v_gone_ids bigint[];
    v_held_ids bigint[];
    v_plain_ords integer[];
    v_plain_ids bigint[];
    v_timeout interval;
    v_unique_for interval;
BEGIN
    PERFORM pgfence._check_enqueue_many_inputs(kinds, payloads, enqueue_many.queue, priorities, run_ats,
        enqueue_many.max_attempts, enqueue_many.recovery_policy, idempotency_keys);
    PERFORM pgfence._check_timeout('timeout', enqueue_many.timeout);
    PERFORM pgfence._check_unique_for('unique_for', enqueue_many.unique_for);
    IF enqueue_many.unique_for IS NOT NULL THEN  -- (for the jobs with a key: some must have one)
        PERFORM pgfence._check_unique_for_has_key(enqueue_many.unique_for,
                                                  EXISTS (SELECT FROM unnest(idempotency_keys) k WHERE k IS NOT NULL));
    END IF;
    -- The run timeout: the batch's, else the queue's default (one look-up by key).
    IF enqueue_many.timeout IS NOT NULL THEN
        v_timeout := pgfence._timeout_length(enqueue_many.timeout);
    ELSE
        SELECT t.timeout INTO v_timeout FROM pgfence.queue_timeouts t WHERE t.queue = enqueue_many.queue;
    END IF;
    v_unique_for := pgfence._timeout_length(enqueue_many.unique_for);  -- (NULL for NULL)

    -- Jobs without a key: one INSERT with pre-assigned ids, so each input row
    -- knows its id without relying on RETURNING order.
    WITH input AS (
        SELECT t.ord::integer AS ord, nextval('pgfence.jobs_id_seq'::regclass) AS id,
               t.kind, t.payload, t.priority, t.run_at
          FROM unnest(kinds, payloads, priorities, run_ats, idempotency_keys)
               WITH ORDINALITY AS t(kind, payload, priority, run_at, key, ord)
         WHERE t.key IS NULL
    ), ins AS (
        INSERT INTO pgfence.jobs (id, queue, kind, payload, priority, available_at, max_attempts,
                                  recovery_policy, created_at, updated_at, enqueued_by, timeout)
        OVERRIDING SYSTEM VALUE
        SELECT i.id, enqueue_many.queue, i.kind, coalesce(i.payload, '{}'), coalesce(i.priority, 0),
               coalesce(i.run_at, v_now), enqueue_many.max_attempts, enqueue_many.recovery_policy, v_now, v_now,
               v_invoker, v_timeout
          FROM input i
    )
    SELECT array_agg(i.ord), array_agg(i.id) INTO v_plain_ords, v_plain_ids FROM input i;

    -- Jobs with a key: insert one job per distinct key unless the key is held,
    -- then resolve held keys to the holder. A key whose holder left the holding
    -- states between the two statements goes round again.
    IF cardinality(array_remove(idempotency_keys, NULL)) > 0 THEN
        LOOP
            SELECT array_agg(DISTINCT k) INTO v_todo
              FROM unnest(idempotency_keys) k WHERE k IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM unnest(v_keys) d WHERE d = k);
            EXIT WHEN v_todo IS NULL;

            -- Keys held by done jobs (not purged yet) resolve to those jobs.
            SELECT array_agg(k.idempotency_key), array_agg(k.job_id) INTO v_new_keys, v_new_ids
              FROM pgfence.held_keys k
             WHERE k.queue = enqueue_many.queue AND k.idempotency_key = ANY (v_todo)
               AND k.purge_at > '-infinity'
               AND (k.held_until IS NULL OR k.held_until > clock_timestamp());
            IF v_new_keys IS NOT NULL THEN
                v_keys := v_keys || v_new_keys;
                v_key_ids := v_key_ids || v_new_ids;
                v_key_created := v_key_created || array_fill(false, ARRAY[cardinality(v_new_keys)]);
                CONTINUE;
            END IF;

            WITH rep AS (
                SELECT DISTINCT ON (t.key) t.key, t.kind, t.payload, t.priority, t.run_at
                  FROM unnest(kinds, payloads, priorities, run_ats, idempotency_keys)
                       WITH ORDINALITY AS t(kind, payload, priority, run_at, key, ord)
                 WHERE t.key = ANY (v_todo)
                 ORDER BY t.key, t.ord
            ), ins AS (
                INSERT INTO pgfence.jobs AS j (queue, kind, payload, priority, available_at, max_attempts,
                                               recovery_policy, idempotency_key, created_at, updated_at, enqueued_by,
                                               timeout, unique_for)
                SELECT enqueue_many.queue, r.kind, coalesce(r.payload, '{}'), coalesce(r.priority, 0),
                       coalesce(r.run_at, v_now), enqueue_many.max_attempts, enqueue_many.recovery_policy,
                       r.key, v_now, v_now, v_invoker, v_timeout, v_unique_for
                  FROM rep r
                ON CONFLICT (queue, idempotency_key)
                    WHERE idempotency_key IS NOT NULL
                      AND status IN ('queued', 'processing', 'manual_review', 'done')
                    DO NOTHING
                RETURNING j.idempotency_key, j.id
            )
            SELECT array_agg(ins.idempotency_key), array_agg(ins.id) INTO v_new_keys, v_new_ids FROM ins;
            IF v_new_keys IS NOT NULL THEN
                -- An insert that waited for a holder which completed meanwhile: that done
                -- job holds the key now; take our job back and answer with it.
                SELECT array_agg(nk.key), array_agg(nk.id), array_agg(h.held)
                  INTO v_gone_keys, v_gone_ids, v_held_ids
                  FROM unnest(v_new_keys, v_new_ids) AS nk(key, id)
                 CROSS JOIN LATERAL (SELECT pgfence._key_held_after_insert(enqueue_many.queue, nk.key) AS held) h
                 WHERE h.held IS NOT NULL;
                IF v_gone_keys IS NOT NULL THEN
                    DELETE FROM pgfence.jobs x WHERE x.id = ANY (v_gone_ids);
                    SELECT array_agg(nk.key), array_agg(nk.id) INTO v_new_keys, v_new_ids
                      FROM unnest(v_new_keys, v_new_ids) AS nk(key, id) WHERE nk.key <> ALL (v_gone_keys);
                    v_keys := v_keys || v_gone_keys;
                    v_key_ids := v_key_ids || v_held_ids;
                    v_key_created := v_key_created || array_fill(false, ARRAY[cardinality(v_gone_keys)]);
                END IF;
            END IF;
            IF v_new_keys IS NOT NULL THEN
                v_keys := v_keys || v_new_keys;
                v_key_ids := v_key_ids || v_new_ids;
                v_key_created := v_key_created || array_fill(true, ARRAY[cardinality(v_new_keys)]);
            END IF;

            SELECT array_agg(j.idempotency_key), array_agg(j.id) INTO v_new_keys, v_new_ids
              FROM pgfence.jobs j
             WHERE j.queue = enqueue_many.queue
               AND j.idempotency_key = ANY (v_todo)
               AND NOT EXISTS (SELECT 1 FROM unnest(v_keys) d WHERE d = j.idempotency_key)
               AND j.status IN ('queued', 'processing', 'manual_review', 'done');
            IF v_new_keys IS NOT NULL THEN
                v_keys := v_keys || v_new_keys;
                v_key_ids := v_key_ids || v_new_ids;
                v_key_created := v_key_created || array_fill(false, ARRAY[cardinality(v_new_keys)]);
            END IF;
        END LOOP;

    END IF;

    -- (a wake-up only for jobs made: a batch whose every key was held made none)
    IF v_plain_ids IS NOT NULL OR true = ANY (v_key_created) THEN
        PERFORM pg_notify('pgfence_enqueue', pgfence._wakeup_tag(enqueue_many.queue));
    END IF;

    RETURN QUERY
    SELECT p.ord, p.id, true FROM unnest(v_plain_ords, v_plain_ids) AS p(ord, id)
    UNION ALL
    SELECT k.ord, r.id, r.created AND k.ord = k.first_ord
      FROM (SELECT t.key, t.ord::integer AS ord, min(t.ord) OVER (PARTITION BY t.key)::integer AS first_ord
              FROM unnest(idempotency_keys) WITH ORDINALITY AS t(key, ord)
             WHERE t.key IS NOT NULL) k
      JOIN unnest(v_keys, v_key_created, v_key_ids) AS r(key, created, id) ON r.key = k.key
    ORDER BY 1;
END $$;

COMMENT ON FUNCTION pgfence.enqueue_many(text[], jsonb[], text, integer[], timestamptz[], integer, text, text[], interval, interval) IS
$$Enqueue a batch (1..10000 jobs) into one queue in one call. Parallel arrays: kinds (required),
payloads, priorities, run_ats, idempotency_keys (each NULL for all-defaults, or one element per job;
a NULL element of idempotency_keys means no key). Returns (ordinal, id, created) per input element
in input order; created is false where a key resolved to an existing job or an earlier element. Same
validation and idempotency rules as enqueue; one NOTIFY pgfence_enqueue with the queue's wake-up tag
when the batch made a job (none when every key was held). timeout and unique_for (one value for the whole
batch) as enqueue's; unique_for applies to the jobs with a key, and some job must have one (22023 else).$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES ('enqueue_many', '{pgfence_producer}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
