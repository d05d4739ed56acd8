-- Deploy pgfence:functions/schedules to pg
-- requires: tables/schedules
-- requires: functions/cron
-- requires: functions/enqueue
--
-- Schedules (operators): schedule, unschedule, pause_schedule, resume_schedule,
-- schedules(); fire_schedules enqueues the due slots, run by every pass of the
-- background sweeper (functions/sweep), by CALL pgfence.sweep() (what the Python
-- worker runs when no background sweeper does), or by hand.
--   * Exactly once: fire_schedules takes a due schedule's row FOR NO KEY UPDATE SKIP LOCKED (two
--     sweepers never work one schedule at once), and for each slot inserts its ledger
--     row (schedule_slots, (schedule, slot) unique) in the transaction of the slot's
--     enqueue; a slot already in the ledger is never enqueued again, a crash rolls back
--     both, and next_fire_at is always after every slot fired.
--   * enqueued_by of a scheduled job is the schedule's created_by (the role that called
--     schedule()), so row-level security shows it to that role as if it had enqueued it.
--   * catch_up, for slots missed while nothing fired (sweeper down): all (every missed
--     slot, oldest first, at most the newest 100: older ones are dropped), latest (only
--     the newest), none (only a slot at most 1 minute late; none after longer downtime).
--   * every: slots at whole multiples of the interval since 1970-01-01 00:00 UTC (every
--     '10 seconds' fires at :00, :10, ...; '1 day' at 00:00 UTC), whatever the time zone.
--   * A paused schedule fires nothing; resume_schedule moves next_fire_at to the next
--     slot after now (slots during the pause are not caught up).

BEGIN;

-- The first slot of a schedule strictly after an instant ('infinity': none within
-- 3700 days; schedule() does not refuse it: _cron_parse refuses the expressions that
-- can never match, but some match rarely: '0 0 29 2 */6' (Feb 29 on a Saturday or
-- Sunday) fires in 2032 and then only in 2048, so after its 2032 slot next_fire_at is
-- infinity, schedules() shows NULL, and it does not fire again unless replaced).
CREATE OR REPLACE FUNCTION pgfence._schedule_next(s pgfence.schedules, after timestamptz) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_secs numeric;
BEGIN
    IF s.every IS NOT NULL THEN
        v_secs := extract(epoch FROM s.every);
        RETURN to_timestamp(((floor(extract(epoch FROM after) / v_secs) + 1) * v_secs)::double precision);
    END IF;
    RETURN coalesce(pgfence._cron_next(s.cron_minutes, s.cron_hours, s.cron_days, s.cron_months, s.cron_weekdays,
                                       s.cron_days_any, s.cron_weekdays_any, after, s.time_zone), 'infinity');
END $$;
COMMENT ON FUNCTION pgfence._schedule_next(pgfence.schedules, timestamptz) IS
  'Private: the first slot of a schedule strictly after `after` (cron in its time zone, or every since the epoch); infinity if none.';

-- The slots of a schedule to fire now, oldest first, by its catch_up: the due slots
-- are those from next_fire_at to now. all: the newest `cap` of them; latest: the
-- newest; none: the newest if at most 1 minute late.
CREATE OR REPLACE FUNCTION pgfence._schedule_due(s pgfence.schedules, now_at timestamptz, cap integer)
RETURNS timestamptz[]
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_secs numeric;
    v_last timestamptz;
    v_keep integer := CASE WHEN s.catch_up = 'all' THEN cap ELSE 1 END;
    v_window interval := interval '1 minute';
    v_start timestamptz;
    v_slot timestamptz;
    v_slots timestamptz[];
BEGIN
    IF s.next_fire_at > now_at THEN
        RETURN '{}'::timestamptz[];
    END IF;
    IF s.every IS NOT NULL THEN
        v_secs := extract(epoch FROM s.every);
        v_last := to_timestamp((floor(extract(epoch FROM now_at) / v_secs) * v_secs)::double precision);
        v_slots := ARRAY(SELECT g FROM generate_series(greatest(s.next_fire_at, v_last - make_interval(secs => (v_keep - 1) * v_secs)),
                                                       v_last, make_interval(secs => v_secs)) AS g);
    ELSE
        -- The newest v_keep slots in [start, now]: a window growing back from now (by 4
        -- each time) until it holds them or reaches next_fire_at, so a long downtime is
        -- not walked slot by slot.
        LOOP
            v_start := greatest(s.next_fire_at, now_at - v_window);
            v_slots := '{}'::timestamptz[];
            v_slot := pgfence._cron_next(s.cron_minutes, s.cron_hours, s.cron_days, s.cron_months, s.cron_weekdays,
                                         s.cron_days_any, s.cron_weekdays_any, v_start - interval '1 microsecond',
                                         s.time_zone);
            WHILE v_slot <= now_at LOOP
                v_slots := v_slots || v_slot;
                IF cardinality(v_slots) > v_keep THEN
                    v_slots := v_slots[2:];
                END IF;
                v_slot := pgfence._cron_next(s.cron_minutes, s.cron_hours, s.cron_days, s.cron_months, s.cron_weekdays,
                                             s.cron_days_any, s.cron_weekdays_any, v_slot, s.time_zone);
            END LOOP;
            EXIT WHEN cardinality(v_slots) >= v_keep OR v_start = s.next_fire_at;
            v_window := v_window * 4;
        END LOOP;
    END IF;
    IF s.catch_up <> 'all' THEN
        v_slots := v_slots[cardinality(v_slots):];
    END IF;
    IF s.catch_up = 'none' THEN
        v_slots := ARRAY(SELECT x FROM unnest(v_slots) AS x WHERE now_at - x <= interval '1 minute');
    END IF;
    RETURN v_slots;
END $$;
COMMENT ON FUNCTION pgfence._schedule_due(pgfence.schedules, timestamptz, integer) IS
  'Private: the slots of a schedule to fire at now_at, oldest first, by its catch_up (all: the newest cap; latest: the newest; none: the newest if at most 1 minute late).';

-- Operator: create (or, with replace, change) a schedule. Returns its first slot.
CREATE OR REPLACE FUNCTION pgfence.schedule(
    name            text,
    cron            text        DEFAULT NULL,
    kind            text        DEFAULT NULL,
    payload         jsonb       DEFAULT '{}',
    queue           text        DEFAULT 'default',
    priority        integer     DEFAULT 0,
    max_attempts    integer     DEFAULT 3,
    recovery_policy text        DEFAULT 'auto',
    time_zone       text        DEFAULT 'UTC',
    catch_up        text        DEFAULT 'latest',
    every           interval    DEFAULT NULL,
    replace         boolean     DEFAULT false,
    slot_key        text        DEFAULT NULL
) RETURNS timestamptz
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_row pgfence.schedules;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM pgfence._check_name('name', name);
    IF cron IS NULL AND every IS NULL THEN
        PERFORM pgfence._raise_null('cron', 'pass a cron expression such as ''*/5 * * * *'', or every => an interval');
    ELSIF cron IS NOT NULL AND every IS NOT NULL THEN
        PERFORM pgfence._raise_invalid('every', every::text, 'given with a cron expression',
            'pass either cron or every, not both');
    END IF;
    IF cron IS NOT NULL THEN
        SELECT * INTO v_row.cron_minutes, v_row.cron_hours, v_row.cron_days, v_row.cron_months, v_row.cron_weekdays,
                      v_row.cron_days_any, v_row.cron_weekdays_any
          FROM pgfence._cron_parse(cron);
    ELSE
        PERFORM pgfence._check_interval('every', every, interval '1 second', interval '366 days',
            '1 second..366 days', 'pass an interval such as ''10 seconds'' or ''1 hour''');
        IF extract(month FROM every) <> 0 OR extract(year FROM every) <> 0
           OR extract(epoch FROM every) <> trunc(extract(epoch FROM every)) THEN
            PERFORM pgfence._raise_invalid('every', every::text, 'is not a whole number of seconds without months',
                'pass seconds, minutes, hours or days (a month''s length varies: use cron for monthly slots)');
        END IF;
    END IF;
    PERFORM pgfence._check_name('kind', kind);
    PERFORM pgfence._check_payload('payload', payload);
    PERFORM pgfence._check_enqueue_options(queue, max_attempts, recovery_policy);
    IF priority IS NULL THEN
        PERFORM pgfence._raise_null('priority', 'pass an integer priority (higher runs first), default 0');
    END IF;
    PERFORM pgfence._check_time_zone('time_zone', time_zone);
    IF catch_up IS NULL THEN
        PERFORM pgfence._raise_null('catch_up', 'pass ''all'', ''latest'' or ''none''');
    ELSIF catch_up NOT IN ('all', 'latest', 'none') THEN
        PERFORM pgfence._raise_invalid('catch_up', quote_literal(catch_up), 'unknown catch-up rule',
            'pass ''all'' (every missed slot, at most 100), ''latest'' (the newest missed slot) or ''none''');
    END IF;
    IF slot_key IS NOT NULL THEN
        PERFORM pgfence._check_name('slot_key', slot_key);
    END IF;
    IF replace IS NULL THEN
        PERFORM pgfence._raise_null('replace', 'pass true to change an existing schedule, false (default) to refuse');
    END IF;

    v_row.name := name;
    v_row.cron := cron;
    v_row.every := every;
    v_row.kind := kind;
    v_row.payload := payload;
    v_row.queue := queue;
    v_row.priority := priority;
    v_row.max_attempts := max_attempts;
    v_row.recovery_policy := recovery_policy;
    v_row.time_zone := time_zone;
    v_row.catch_up := catch_up;
    v_row.slot_key := slot_key;
    v_row.created_at := v_now;
    v_row.created_by := pgfence._invoker();
    v_row.next_fire_at := pgfence._schedule_next(v_row, v_now);
    INSERT INTO pgfence.schedules AS s SELECT v_row.*
    ON CONFLICT ON CONSTRAINT schedules_pkey DO UPDATE
        SET cron = excluded.cron, every = excluded.every, cron_minutes = excluded.cron_minutes,
            cron_hours = excluded.cron_hours, cron_days = excluded.cron_days, cron_months = excluded.cron_months,
            cron_weekdays = excluded.cron_weekdays, cron_days_any = excluded.cron_days_any,
            cron_weekdays_any = excluded.cron_weekdays_any, kind = excluded.kind, payload = excluded.payload,
            queue = excluded.queue, priority = excluded.priority, max_attempts = excluded.max_attempts,
            recovery_policy = excluded.recovery_policy, time_zone = excluded.time_zone, catch_up = excluded.catch_up,
            slot_key = excluded.slot_key,
            created_at = excluded.created_at, created_by = excluded.created_by,
            next_fire_at = excluded.next_fire_at  -- after now: every slot fired is behind it
      WHERE replace
    RETURNING s.* INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'unique_violation',
            MESSAGE = format('pgfence: a schedule named %s exists', pgfence._printable(quote_literal(name))),
            HINT = 'pass replace => true to change it, or unschedule it first';
    END IF;
    RETURN v_row.next_fire_at;
END $$;
COMMENT ON FUNCTION pgfence.schedule(text, text, text, jsonb, text, integer, integer, text, text, text, interval, boolean, text) IS
$$Operator: enqueue kind (payload, queue, priority, max_attempts, recovery_policy, as enqueue) at each slot of cron
(5 fields or an @ macro, wall-clock times of time_zone) or of every (1 second..366 days, whole seconds; slots at
multiples of it since the Unix epoch). The sweeper's passes fire due slots, each exactly once; catch_up says what a
downtime's missed slots do: all (each, the newest 100 at most), latest (default: only the newest), none. Jobs get
enqueued_by = the calling role. A name that exists is refused (23505) unless replace => true (its pause and
ledger stay; it fires from its next slot after now). slot_key (NULL: off) puts each job's slot into its payload
under that key ('2026-01-01T00:00:00Z'). Returns the first slot. Errors: 22004, 22023 (naming the argument, and the cron field), 23505.$$;

-- Operator: remove a schedule (and its ledger). Returns whether it existed.
CREATE OR REPLACE FUNCTION pgfence.unschedule(name text) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
    PERFORM pgfence._check_name('name', name);
    DELETE FROM pgfence.schedules s WHERE s.name = name;
    RETURN FOUND;
END $$;
COMMENT ON FUNCTION pgfence.unschedule(text) IS
  'Operator: remove the schedule (waits for a fire of it in progress); its jobs stay. Returns true when it existed. Errors: 22004, 22023.';

-- 22023 for a schedule name that does not exist.
CREATE OR REPLACE FUNCTION pgfence._raise_no_schedule(name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgfence._raise_invalid('name', quote_literal(name), 'no such schedule',
        'pass the name of a schedule (SELECT name FROM pgfence.schedules())');
END $$;
COMMENT ON FUNCTION pgfence._raise_no_schedule(text) IS
  'Private: raise 22023 naming a schedule that does not exist.';

-- Operator: stop a schedule firing. Returns true when it paused it.
CREATE OR REPLACE FUNCTION pgfence.pause_schedule(name text) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_row pgfence.schedules;
BEGIN
    PERFORM pgfence._check_name('name', name);
    SELECT * INTO v_row FROM pgfence.schedules s WHERE s.name = name FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM pgfence._raise_no_schedule(name);
    ELSIF v_row.paused_at IS NOT NULL THEN
        RETURN false;
    END IF;
    UPDATE pgfence.schedules s SET paused_at = clock_timestamp(), paused_by = pgfence._invoker() WHERE s.name = name;
    RETURN true;
END $$;
COMMENT ON FUNCTION pgfence.pause_schedule(text) IS
  'Operator: the schedule fires nothing until resume_schedule (waits for a fire of it in progress). Returns true when it paused it, false when it was paused. Errors: 22004, 22023 (no such schedule).';

-- Operator: let a paused schedule fire again, from the next slot after now.
CREATE OR REPLACE FUNCTION pgfence.resume_schedule(name text) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_row pgfence.schedules;
BEGIN
    PERFORM pgfence._check_name('name', name);
    SELECT * INTO v_row FROM pgfence.schedules s WHERE s.name = name FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM pgfence._raise_no_schedule(name);
    ELSIF v_row.paused_at IS NULL THEN
        RETURN false;
    END IF;
    UPDATE pgfence.schedules s
       SET paused_at = NULL, paused_by = NULL,
           next_fire_at = greatest(s.next_fire_at, pgfence._schedule_next(v_row, clock_timestamp()))
     WHERE s.name = name;
    RETURN true;
END $$;
COMMENT ON FUNCTION pgfence.resume_schedule(text) IS
  'Operator: a paused schedule fires again from its next slot after now (slots during the pause are not caught up). Returns true when it was paused. Errors: 22004, 22023 (no such schedule).';

-- Operator: every schedule with its next and last fire time.
CREATE OR REPLACE FUNCTION pgfence.schedules()
RETURNS TABLE(name text, cron text, every interval, kind text, payload jsonb, queue text, priority integer,
              max_attempts integer, recovery_policy text, time_zone text, catch_up text, slot_key text,
              paused_at timestamptz,
              paused_by text, created_at timestamptz, created_by text, next_fire_at timestamptz,
              last_fire_at timestamptz, last_slot timestamptz, last_job_id bigint, last_error text,
              last_error_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT s.name, s.cron, s.every, s.kind, s.payload, s.queue, s.priority, s.max_attempts, s.recovery_policy,
           s.time_zone, s.catch_up, s.slot_key, s.paused_at, s.paused_by, s.created_at, s.created_by,
           CASE WHEN isfinite(s.next_fire_at) THEN s.next_fire_at END, s.last_fire_at, s.last_slot, s.last_job_id, s.last_error,
           s.last_error_at
      FROM pgfence.schedules s
     ORDER BY s.name
$$;
COMMENT ON FUNCTION pgfence.schedules() IS
  'Operator: every schedule by name: its cron or every, job options, time zone, catch_up, pause, creator, next slot (next_fire_at; NULL: none within 3700 days), last slot fired and when, its job, and why its last fire failed (last_error, last_error_at).';

-- Enqueue the due slots of due schedules: at most max_slots jobs. Returns how many.
-- Concurrency: each schedule's row is taken FOR NO KEY UPDATE SKIP LOCKED (another firer skips
-- it), and each slot's ledger row is written in this transaction with its job: the
-- slot is enqueued exactly once, by whichever firer commits; a crash rolls back both.
CREATE OR REPLACE FUNCTION pgfence.fire_schedules(max_slots integer DEFAULT 100) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    s pgfence.schedules;
    v_now timestamptz := clock_timestamp();
    v_slots timestamptz[];
    v_next timestamptz;
    v_id bigint;
    v_fired integer := 0;
    v_mine integer;
    v_last_slot timestamptz;
    v_last_id bigint;
BEGIN
    PERFORM pgfence._check_range('max_slots', max_slots, 1, 10000);
    PERFORM pgfence._check_isolation('fire_schedules');
    FOR s IN SELECT * FROM pgfence.schedules x
              WHERE x.paused_at IS NULL AND x.next_fire_at <= v_now
              ORDER BY x.next_fire_at
                FOR NO KEY UPDATE SKIP LOCKED LOOP
        EXIT WHEN v_fired >= max_slots;
        v_next := NULL;
        v_mine := 0;
        -- One schedule whose job cannot be enqueued (a rule newer than the schedule), or
        -- whose slots cannot be computed (its time zone gone from tzdata after an
        -- upgrade: _cron_next raises), must not stop the others: its slots are rolled
        -- back alone, the error kept on its row (schedules().last_error), and it is tried
        -- again at the next call. So its slots and its next one are computed in here.
        BEGIN
            v_slots := pgfence._schedule_due(s, v_now, 100);
            FOR i IN 1..coalesce(cardinality(v_slots), 0) LOOP
                IF v_fired + v_mine >= max_slots THEN
                    v_next := v_slots[i];  -- the rest at the next call
                    EXIT;
                END IF;
                CONTINUE WHEN EXISTS (SELECT FROM pgfence.schedule_slots l
                                       WHERE l.schedule = s.name AND l.slot = v_slots[i]);
                v_id := pgfence.enqueue(s.kind,
                                        CASE WHEN s.slot_key IS NULL THEN s.payload
                                             ELSE s.payload || jsonb_build_object(s.slot_key,
                                                 to_char(v_slots[i] AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')) END,
                                        s.queue, s.priority, NULL, s.max_attempts, s.recovery_policy);
                UPDATE pgfence.jobs j SET enqueued_by = s.created_by WHERE j.id = v_id AND j.queue = s.queue;
                INSERT INTO pgfence.schedule_slots (schedule, slot, job_id, fired_at)
                VALUES (s.name, v_slots[i], v_id, clock_timestamp());
                v_mine := v_mine + 1;
                v_last_slot := v_slots[i];
                v_last_id := v_id;
            END LOOP;
            v_next := coalesce(v_next, pgfence._schedule_next(s, v_now));
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'pgfence: schedule % could not fire: % (SQLSTATE %)',
                pgfence._printable(s.name), pgfence._printable(SQLERRM), SQLSTATE;
            UPDATE pgfence.schedules x
               SET last_error = left(format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE), 10000),
                   last_error_at = clock_timestamp()
             WHERE x.name = s.name;
            CONTINUE;
        END;
        v_fired := v_fired + v_mine;
        UPDATE pgfence.schedules x
           SET next_fire_at = greatest(x.next_fire_at, v_next),
               last_fire_at = CASE WHEN v_mine > 0 THEN clock_timestamp() ELSE x.last_fire_at END,
               last_slot    = CASE WHEN v_mine > 0 THEN v_last_slot ELSE x.last_slot END,
               last_job_id  = CASE WHEN v_mine > 0 THEN v_last_id ELSE x.last_job_id END,
               last_error   = CASE WHEN v_mine > 0 THEN NULL ELSE x.last_error END,
               last_error_at = CASE WHEN v_mine > 0 THEN NULL ELSE x.last_error_at END
         WHERE x.name = s.name;
        IF v_mine > 0 THEN
            -- The ledger keeps the newest 1000 slots per schedule (older ones are behind
            -- next_fire_at, which stays after every slot fired).
            DELETE FROM pgfence.schedule_slots l
             WHERE l.schedule = s.name
               AND l.slot < (SELECT k.slot FROM pgfence.schedule_slots k WHERE k.schedule = s.name
                              ORDER BY k.slot DESC OFFSET 999 LIMIT 1);
        END IF;
    END LOOP;
    RETURN v_fired;
END $$;
COMMENT ON FUNCTION pgfence.fire_schedules(integer) IS
$$Operator: enqueue the due slots of the unpaused schedules, at most max_slots (1..10000, default 100) jobs, each
slot exactly once (its ledger row in pgfence.schedule_slots is written with its job; schedules another call is
firing are skipped). A schedule whose job cannot be enqueued, or whose slots cannot be computed (a time zone
tzdata no longer has), is rolled back alone (WARNING, its last_error) and tried again at the next call; the
others fire. Run by every pass of the background sweeper and by CALL pgfence.sweep(); call it yourself
(e.g. from cron every few seconds) where neither runs. Returns the number of jobs enqueued. Errors: 22004,
22023, PF004.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('schedule',        '{pgfence_operator}'),
    ('unschedule',      '{pgfence_operator}'),
    ('pause_schedule',  '{pgfence_operator}'),
    ('resume_schedule', '{pgfence_operator}'),
    ('schedules',       '{pgfence_operator,pgfence_viewer}'),
    ('fire_schedules',  '{pgfence_operator}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMIT;
