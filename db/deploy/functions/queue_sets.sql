-- Deploy pgfence:functions/queue_sets to pg
-- requires: tables/queue_sets
-- requires: functions/claim
-- requires: functions/_checks
--
-- Sets of queues kept on the server: define_queue_set and drop_queue_set (a worker
-- or an operator), queue_sets() to read them. claim(queue_set => name) claims from
-- a set's queues exactly as from the list (functions/claim); the names are checked
-- (_check_queues, as claim checks a list) and made a set (_queue_set_of) once, here.
-- A set names queues, not jobs: defining or dropping one changes no job, and a
-- claim already running keeps the set it read.

BEGIN;

-- Define (or define again, replacing its names) a set of queues.
CREATE OR REPLACE FUNCTION pgfence.define_queue_set(queue_set text, queues text[]) RETURNS integer
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_set jsonb;
    v_count integer;
BEGIN
    PERFORM pgfence._check_name('queue_set', queue_set);
    PERFORM pgfence._check_queues('queues', queues, '');
    v_set := pgfence._queue_set_of(queues);
    SELECT count(*) INTO v_count FROM jsonb_object_keys(v_set);
    INSERT INTO pgfence.queue_sets AS s (queue_set, members, queues, defined_at, defined_by)
    VALUES (queue_set, v_set, v_count, clock_timestamp(), pgfence._invoker())
    ON CONFLICT ON CONSTRAINT queue_sets_pkey DO UPDATE
        SET members = excluded.members, queues = excluded.queues,
            defined_at = excluded.defined_at, defined_by = excluded.defined_by;
    RETURN v_count;
END $$;
COMMENT ON FUNCTION pgfence.define_queue_set(text, text[]) IS
$$Worker or operator: store the set queue_set (a name) of queues (1..10000 names, checked as claim checks a
list), replacing the set of that name if there is one; claim(queue_set => queue_set) then claims from those
queues as from the list, without sending or checking it each time. Returns the number of distinct queues.
Changes no job. Errors: 22004, 22023.$$;

-- Drop a set; claims that name it afterwards are refused (22023, not defined).
CREATE OR REPLACE FUNCTION pgfence.drop_queue_set(queue_set text) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
    PERFORM pgfence._check_name('queue_set', queue_set);
    DELETE FROM pgfence.queue_sets s WHERE s.queue_set = queue_set;
    RETURN FOUND;
END $$;
COMMENT ON FUNCTION pgfence.drop_queue_set(text) IS
$$Worker or operator: drop the set queue_set; true if there was one. Claims naming it afterwards are refused
(22023, not defined); changes no job. Errors: 22004, 22023.$$;

-- The sets, by name, each with its queues (sorted).
CREATE OR REPLACE FUNCTION pgfence.queue_sets()
RETURNS TABLE(queue_set text, queues integer, names text[], defined_at timestamptz, defined_by text)
LANGUAGE sql STABLE AS $$
    SELECT s.queue_set, s.queues,
           ARRAY(SELECT k FROM jsonb_object_keys(s.members) AS k ORDER BY k COLLATE "C"),
           s.defined_at, s.defined_by
      FROM pgfence.queue_sets s
     ORDER BY s.queue_set COLLATE "C"
$$;
COMMENT ON FUNCTION pgfence.queue_sets() IS
  'Worker, operator, viewer: the stored sets of queues (define_queue_set), by name: how many queues, their names (sorted), when and by whom defined.';

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('define_queue_set', '{pgfence_worker,pgfence_operator}'),
    ('drop_queue_set',   '{pgfence_worker,pgfence_operator}'),
    ('queue_sets',       '{pgfence_worker,pgfence_operator,pgfence_viewer}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
