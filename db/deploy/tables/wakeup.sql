-- Deploy pgfence:tables/wakeup to pg
-- requires: schema
-- requires: functions/_checks

BEGIN;

-- enqueue (and requeue) send NOTIFY pgfence_enqueue to wake idle workers. Any role
-- may LISTEN on any channel, so the payload is not the queue name but a tag: the
-- first 16 hex digits of md5(key || queue), with a random key only the owner reads.
-- A listener without pgfence_worker learns that jobs arrive, and how often per tag,
-- but not the queues' names (nor can it test a guess); a worker asks
-- pgfence.wakeup_tags(its queues) once and compares.
CREATE TABLE IF NOT EXISTS pgfence.wakeup_key (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    key       text    NOT NULL
);
INSERT INTO pgfence.wakeup_key (key) VALUES (replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''))
ON CONFLICT (singleton) DO NOTHING;
COMMENT ON TABLE pgfence.wakeup_key IS
  'The secret of the NOTIFY wake-up tags (pgfence._wakeup_tag); readable by the owner only.';
ALTER TABLE pgfence.wakeup_key OWNER TO pgfence_owner;
REVOKE ALL ON TABLE pgfence.wakeup_key FROM PUBLIC;

-- The key, as a constant of the plans that use it: IMMUTABLE, although it reads a
-- table, because the key is written once, at deploy, and never changes; so the planner
-- folds it into the plans of the statements that call _wakeup_tag (enqueue's NOTIFY),
-- and an enqueue reads no table and runs no query for it. (A SQL function reading the
-- table on each call is never inlined: enqueue planned it again every time, about
-- 80 us; a PL/pgSQL one cost about 0.1 ms of an idle enqueue's latency.) Only the
-- owner may call it, so no other role can have it folded into a plan it can show.
CREATE OR REPLACE FUNCTION pgfence._wakeup_key() RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT k.key FROM pgfence.wakeup_key k
$$;
COMMENT ON FUNCTION pgfence._wakeup_key() IS
  'Private: the secret of the wake-up tags (declared IMMUTABLE so plans fold it: it never changes after deploy).';

-- The wake-up tag of a queue (the payload of NOTIFY pgfence_enqueue). Inlined into
-- the statement that notifies, the key folded in.
CREATE OR REPLACE FUNCTION pgfence._wakeup_tag(queue text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT left(md5(pgfence._wakeup_key() || queue), 16)
$$;
-- For workers: the tags of their queues, to tell their own wake-ups from others'.
CREATE OR REPLACE FUNCTION pgfence.wakeup_tags(queues text[]) RETURNS TABLE(queue text, tag text)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    IF queues IS NULL THEN
        PERFORM pgfence._raise_null('queues', 'pass the names of the queues this worker claims from');
    END IF;
    PERFORM pgfence._check_array('queues', queues);
    PERFORM pgfence._check_range('queues length', cardinality(queues), 0, 10000);
    RETURN QUERY SELECT DISTINCT q.name, pgfence._wakeup_tag(q.name) FROM unnest(queues) AS q(name)
                  WHERE q.name IS NOT NULL ORDER BY 1;
END $$;
COMMENT ON FUNCTION pgfence.wakeup_tags(text[]) IS
$$The NOTIFY pgfence_enqueue payload (a keyed tag) that an enqueue or requeue into each of queues (0..10000
names) sends: LISTEN on pgfence_enqueue and wake when a notification carries one of them. Errors: 22004,
22023.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES ('wakeup_tags', '{pgfence_worker}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
