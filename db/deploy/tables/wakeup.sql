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

-- The wake-up tag of a queue (the payload of NOTIFY pgfence_enqueue). PL/pgSQL, so
-- that the key is read with a plan cached for the session: a SQL function with a FROM
-- clause is never inlined, and called from enqueue it was planned again every time
-- (about 80 us per enqueue; this way about 15).
CREATE OR REPLACE FUNCTION pgfence._wakeup_tag(queue text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_key text;
BEGIN
    SELECT k.key INTO v_key FROM pgfence.wakeup_key k;
    RETURN left(md5(v_key || queue), 16);
END $$;
COMMENT ON FUNCTION pgfence._wakeup_tag(text) IS
  'Private: the payload of NOTIFY pgfence_enqueue for a queue (a keyed digest, not the name).';

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
