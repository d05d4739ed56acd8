-- Deploy pgfence:functions/queue_sets to pg
-- requires: tables/queue_sets
-- requires: functions/claim
-- requires: functions/_checks
--
-- Sets of queues kept on the server: define_queue_set and drop_queue_set (a worker
-- or an operator; a set is changed only by the role that defined it, or an
-- operator), queue_sets() to read them. claim(queue_set => name) claims from
-- a set's queues exactly as from the list (functions/claim); the names are checked
-- (_check_queues, as claim checks a list) and made a set (_queue_set_of) once, here.
-- A set names queues, not jobs: defining or dropping one changes no job, and a
-- claim already running keeps the set it read. Defining or dropping one notifies
-- pgfence_enqueue with the set's wake-up tag (_queue_set_tag): a worker claiming from
-- the set listens for it and reads the set's queues again (their tags are what it wakes
-- on), so a queue added to the set wakes it from then on.

BEGIN;

-- Who may change a stored set: the role that defined it, or an operator (a worker
-- pool's set is not another pool's to redefine or drop). 42501 otherwise.
CREATE OR REPLACE FUNCTION pgfence._check_set_owner(queue_set text, defined_by text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF defined_by IS DISTINCT FROM pgfence._invoker()
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_roles r
                        WHERE r.rolname = pgfence._invoker()
                          AND (r.rolsuper OR pg_catalog.pg_has_role(r.oid, 'pgfence_operator', 'USAGE'))) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('pgfence: queue_set %s was defined by %s', pgfence._printable(quote_literal(queue_set)),
                             pgfence._printable(quote_literal(defined_by))),
            HINT = 'only the role that defined a set, or an operator, may define it again or drop it; '
                   'choose another name';
    END IF;
END $$;
COMMENT ON FUNCTION pgfence._check_set_owner(text, text) IS
  'Private: raise 42501 unless the caller defined the set (defined_by) or is an operator.';

-- The wake-up tag of a set's changes: that of a name no queue can have (a control
-- character, which names may not hold, then the set's name), so a worker gets it from
-- wakeup_tags(ARRAY[chr(1) || queue_set]) and it never equals a queue's tag.
CREATE OR REPLACE FUNCTION pgfence._queue_set_tag(queue_set text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT pgfence._wakeup_tag(chr(1) || queue_set)
$$;
COMMENT ON FUNCTION pgfence._queue_set_tag(text) IS
  'Private: the NOTIFY pgfence_enqueue payload of a change to the set queue_set: the wake-up tag of chr(1) || queue_set.';

-- Define (or define again, replacing its names) a set of queues. At most 100 sets:
-- the table is locked against other defines while they are counted (claims only
-- read it, and are not held).
CREATE OR REPLACE FUNCTION pgfence.define_queue_set(queue_set text, queues text[]) RETURNS integer
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_set jsonb;
    v_count integer;
    v_by text;
BEGIN
    PERFORM pgfence._check_name('queue_set', queue_set);
    PERFORM pgfence._check_queues('queues', queues, '');
    v_set := pgfence._queue_set_of(queues);
    SELECT count(*) INTO v_count FROM jsonb_object_keys(v_set);
    LOCK TABLE pgfence.queue_sets IN SHARE ROW EXCLUSIVE MODE;
    SELECT s.defined_by INTO v_by FROM pgfence.queue_sets s WHERE s.queue_set = queue_set;
    IF FOUND THEN
        PERFORM pgfence._check_set_owner(queue_set, v_by);
    ELSIF (SELECT count(*) FROM pgfence.queue_sets) >= 100 THEN
        RAISE EXCEPTION USING ERRCODE = 'program_limit_exceeded',
            MESSAGE = 'pgfence: 100 sets of queues are stored, the most there may be',
            HINT = 'drop a set no worker uses (pgfence.queue_sets() lists them), or define this one again '
                   'under the name of one of yours';
    END IF;
    INSERT INTO pgfence.queue_sets AS s (queue_set, members, queue_count, defined_at, defined_by)
    VALUES (queue_set, v_set, v_count, clock_timestamp(), pgfence._invoker())
    ON CONFLICT ON CONSTRAINT queue_sets_pkey DO UPDATE
        SET members = excluded.members, queue_count = excluded.queue_count,
            defined_at = excluded.defined_at, defined_by = excluded.defined_by;
    PERFORM pg_notify('pgfence_enqueue', pgfence._queue_set_tag(queue_set));  -- (its workers read it again)
    RETURN v_count;
END $$;
COMMENT ON FUNCTION pgfence.define_queue_set(text, text[]) IS
$$Worker or operator: store the set queue_set (a name) of queues (1..10000 names, checked as claim checks a
list), replacing the set of that name if there is one (only the role that defined it, or an operator, may);
claim(queue_set => queue_set) then claims from those queues as from the list, without sending or checking it
each time. At most 100 sets. Returns the number of distinct queues. Changes no job. On commit, notifies
pgfence_enqueue with the set's tag (wakeup_tags(ARRAY[chr(1) || queue_set])): workers claiming from the set
read its queues again. Errors: 22004, 22023, 42501 (another role's set), 54000 (100 sets stored).$$;

-- Drop a set; claims that name it afterwards are refused (22023, not defined).
CREATE OR REPLACE FUNCTION pgfence.drop_queue_set(queue_set text) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_by text;
BEGIN
    PERFORM pgfence._check_name('queue_set', queue_set);
    LOCK TABLE pgfence.queue_sets IN SHARE ROW EXCLUSIVE MODE;  -- (as define_queue_set: one change at a time)
    SELECT s.defined_by INTO v_by FROM pgfence.queue_sets s WHERE s.queue_set = queue_set;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pgfence._check_set_owner(queue_set, v_by);
    DELETE FROM pgfence.queue_sets s WHERE s.queue_set = queue_set;
    PERFORM pg_notify('pgfence_enqueue', pgfence._queue_set_tag(queue_set));
    RETURN true;
END $$;
COMMENT ON FUNCTION pgfence.drop_queue_set(text) IS
$$Worker or operator: drop the set queue_set (only the role that defined it, or an operator, may); true if
there was one. Claims naming it afterwards are refused (22023, not defined); changes no job. On commit (when
there was one), notifies pgfence_enqueue with the set's tag, as define_queue_set. Errors: 22004, 22023, 42501.$$;

-- The sets, by name, each with its queues (sorted).
CREATE OR REPLACE FUNCTION pgfence.queue_sets()
RETURNS TABLE(queue_set text, queue_count integer, names text[], defined_at timestamptz, defined_by text)
LANGUAGE sql STABLE AS $$
    SELECT s.queue_set, s.queue_count,
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
