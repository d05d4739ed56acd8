-- Deploy pgfence:tables/secret_key to pg
-- requires: schema
-- requires: functions/_checks

BEGIN;

-- The deployment's secret: a random key only the owner reads, written once at deploy.
-- It keys two things a role outside pgfence could otherwise see or aim at:
--   * the NOTIFY wake-up tags: enqueue (and requeue) send NOTIFY pgfence_enqueue to
--     wake idle workers, and any role may LISTEN on any channel, so the payload is not
--     the queue name but a tag, the first 16 hex digits of md5(key || queue). A
--     listener without pgfence_worker learns that jobs arrive, and how often per tag,
--     but not the queues' names (nor can it test a guess); a worker asks
--     pgfence.wakeup_tags(its queues) once and compares;
--   * the advisory locks of claim request ids (see functions/claim): any role may take
--     advisory locks, and with a public key it could hold the lock of a request id and
--     park the claim that uses it.
-- The key is read from the table by the statement that uses it, every time: never
-- folded into a plan as a constant, since any role may print the plans of the
-- statements it runs (debug_print_plan), those of SECURITY DEFINER functions included.
CREATE TABLE IF NOT EXISTS pgfence.secret_key (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    key       text    NOT NULL
);
INSERT INTO pgfence.secret_key (key) VALUES (replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''))
ON CONFLICT (singleton) DO NOTHING;
COMMENT ON TABLE pgfence.secret_key IS
  'The deployment''s secret (written at deploy): keys the NOTIFY wake-up tags and the claim request locks. Readable by the owner only.';
ALTER TABLE pgfence.secret_key OWNER TO pgfence_owner;
REVOKE ALL ON TABLE pgfence.secret_key FROM PUBLIC;

-- The wake-up tag of a queue (the payload of NOTIFY pgfence_enqueue). PL/pgSQL, so its
-- one statement keeps a cached plan (a SQL function reading a table is never inlined,
-- and was planned again on every enqueue: about 80 us); the key is read when it runs.
CREATE OR REPLACE FUNCTION pgfence._wakeup_tag(queue text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT left(md5(k.key || queue), 16) FROM pgfence.secret_key k);
END $$;
COMMENT ON FUNCTION pgfence._wakeup_tag(text) IS
  'Private: the NOTIFY pgfence_enqueue payload of an enqueue into queue: left(md5(secret key || queue), 16).';

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
    RETURN QUERY SELECT DISTINCT q.name, left(md5(k.key || q.name), 16)
                   FROM unnest(queues) AS q(name) CROSS JOIN pgfence.secret_key k
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
