-- Deploy pgfence:functions/sweep to pg (reworked after @v0.7.0)
-- requires: functions/sweep@v0.7.0
-- requires: functions/schedules
-- requires: tables/history
-- requires: tables/sweeper_pause
-- requires: functions/_checks
--
-- The sweep (every expired lease, by hand or from a scheduler) and the background
-- sweeper pg_cron runs, whole. Changed after @v0.7.0:
--   * every reclaim pass of the background sweeper, and CALL pgfence.sweep() after its
--     reclaims, fire due schedules (pgfence.fire_schedules), so schedules fire with no
--     worker alive; a failed fire is logged as a WARNING and in sweeper_status.last_error
--     and never stops the reclaims (the sweeper's pass is recorded either way);
--   * the background sweeper purges (and so maintains the history's partitions) as soon
--     as a history partition's range has passed, besides every 10 s: a partition is
--     dropped when its range ends, not up to 10 s later; and sooner (a quarter of the
--     slack, at least 1 s) while the partitions made reach less than 40 s past the
--     longest retain_done, so a maintenance that missed its lock under load is tried
--     again before completions land in the default partition.
-- Changed after @v0.3.0:
--   * safe whatever the caller's search_path: pg_cron runs these procedures as a
--     superuser, and a login able to create public.pg_sleep(numeric) got its function
--     run by it (ALTER ROLE ... SUPERUSER worked). Procedures that COMMIT cannot be
--     SECURITY DEFINER nor carry a SET clause, so each pins search_path in its body
--     (again after every COMMIT) and does nothing but call schema-qualified pgfence
--     functions, which run with the owner's rights and a pinned path;
--   * pausing the background sweeper is an operator action (pause_sweeper,
--     resume_sweeper), recorded in sweeper_status; the advisory lock any role could
--     take (and stall reclaim and purge with) is gone;
--   * run_until is at most 1 hour ahead (an 'infinity' ran forever);
--   * sweeper_health() says in one place whether the sweeper runs.

BEGIN;

-- Where a background sweeper run is between two of its transactions. run_sweeper
-- keeps it; sweeper_step does one step and returns the next state.
DO $$
BEGIN
    IF to_regtype('pgfence.sweeper_state') IS NULL THEN
        CREATE TYPE pgfence.sweeper_state AS (
            pass_interval interval,     -- between passes
            run_until     timestamptz,  -- the run ends at the first pass boundary after this
            phase         text,         -- reclaim | purge | sleep
            reclaimed     bigint,       -- by this pass so far
            wake_at       timestamptz,  -- the sleep ends then
            next_purge    timestamptz,  -- purge again from then on (NULL: at the first pass)
            done          boolean       -- the run is over
        );
    END IF;
END $$;
COMMENT ON TYPE pgfence.sweeper_state IS
  'The state of a background sweeper run (pgfence.run_sweeper) between its transactions.';
ALTER TYPE pgfence.sweeper_state OWNER TO pgfence_owner;

-- Reclaim every expired lease, batch_size at a time, each batch committed in its
-- own transaction (so 100,000 expired rows never sit in one long transaction).
-- Overlapping sweeps are harmless: batches take rows with SKIP LOCKED. CALL it
-- outside an explicit transaction block; reclaimed returns the total.
CREATE OR REPLACE PROCEDURE pgfence.sweep(INOUT reclaimed bigint DEFAULT 0, batch_size integer DEFAULT 1000)
LANGUAGE plpgsql AS $$
DECLARE
    v_more boolean;
    v_fired integer;
BEGIN
    -- (Run with the caller's rights and search_path, which may hold look-alikes of any
    -- function: pin the path, here and after every COMMIT, and call only
    -- schema-qualified pgfence functions.)
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pgfence, pg_temp', true);
    reclaimed := 0;
    LOOP
        SELECT b.total, b.more INTO reclaimed, v_more FROM pgfence.sweep_batch(batch_size, reclaimed) AS b;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pgfence, pg_temp', true);
        EXIT WHEN NOT v_more;
    END LOOP;
    -- Then the due schedules, 100 slots per committed transaction. (A failure here is
    -- the caller's to see: the reclaims are committed already.)
    LOOP
        v_fired := pgfence.fire_schedules(100);
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pgfence, pg_temp', true);
        EXIT WHEN v_fired < 100;
    END LOOP;
END $$;

COMMENT ON PROCEDURE pgfence.sweep(bigint, integer) IS
$$Reclaim every expired lease (batch_size 1..10000 per transaction, each committed), then fire the due schedules
(fire_schedules, 100 slots per transaction). CALL pgfence.sweep();
outside a transaction block. Returns reclaimed = total jobs reclaimed. Safe to run concurrently, and
whatever the caller's search_path. Not paused by pause_sweeper (an explicit call). Errors: 22004, 22023,
PF004.$$;

-- One batch of sweep(): reclaim up to batch_size expired leases; total = so_far plus
-- those, more = the batch was full (call again).
CREATE OR REPLACE FUNCTION pgfence.sweep_batch(batch_size integer, so_far bigint DEFAULT 0,
                                               OUT total bigint, OUT more boolean)
LANGUAGE plpgsql
-- Expired leases are found through jobs_reclaim_idx, never by reading the table (see claim).
SET enable_seqscan = off
-- No JIT: a scan that must stay sequential (a one-row table) costs 10^10 with
-- enable_seqscan off, and JIT compiled it on every call (about 100 ms each).
SET jit = off AS $$
DECLARE
    v_n bigint;
BEGIN
    PERFORM pgfence._check_range('batch_size', batch_size, 1, 10000);
    IF so_far IS NULL OR so_far < 0 THEN
        PERFORM pgfence._raise_invalid('so_far', coalesce(so_far::text, 'NULL'), 'is not a count',
            'pass the total the earlier batches returned, or 0');
    END IF;
    PERFORM pgfence._check_isolation('sweep');
    SELECT count(*) INTO v_n FROM pgfence._reclaim(batch_size);
    total := so_far + v_n;
    more := v_n = batch_size;
END $$;

COMMENT ON FUNCTION pgfence.sweep_batch(integer, bigint) IS
$$One transaction of pgfence.sweep(): reclaim up to batch_size (1..10000) expired leases; returns total =
so_far + those, and more = true when the batch was full. Errors: 22004, 22023, PF004.$$;

-- Record a sweeper pass (reclaimed), a purge (purged) or a failed purge (error) in
-- pgfence.sweeper_status.
CREATE OR REPLACE FUNCTION pgfence.note_sweeper_pass(reclaimed bigint, purged bigint, error text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- Counts of one pass: never negative (the totals only grow), and far below
    -- what would overflow the totals.
    IF reclaimed NOT BETWEEN 0 AND 1000000000 THEN
        PERFORM pgfence._raise_invalid('reclaimed', reclaimed::text, 'outside 0..1000000000',
            'pass how many jobs this pass reclaimed, or NULL when it was no reclaim pass');
    ELSIF purged NOT BETWEEN 0 AND 1000000000 THEN
        PERFORM pgfence._raise_invalid('purged', purged::text, 'outside 0..1000000000',
            'pass how many finished jobs this purge deleted, or NULL when it was no purge');
    ELSIF char_length(error) NOT BETWEEN 1 AND 10000 THEN
        PERFORM pgfence._raise_invalid('error', left(error, 100),
            format('is %s characters long (1..10000)', char_length(error)),
            'pass the error text of the failed step (shorten it), or NULL when nothing failed');
    END IF;
    UPDATE pgfence.sweeper_status
       SET last_pass_at    = CASE WHEN reclaimed IS NULL THEN last_pass_at ELSE clock_timestamp() END,
           last_reclaimed  = coalesce(reclaimed, last_reclaimed),
           total_reclaimed = total_reclaimed + coalesce(reclaimed, 0),
           last_purge_at   = CASE WHEN purged IS NULL THEN last_purge_at ELSE clock_timestamp() END,
           total_purged    = total_purged + coalesce(purged, 0),
           last_error      = coalesce(error, last_error),
           last_error_at   = CASE WHEN error IS NULL THEN last_error_at ELSE clock_timestamp() END;
END $$;

COMMENT ON FUNCTION pgfence.note_sweeper_pass(bigint, bigint, text) IS
  'Record in pgfence.sweeper_status a sweeper pass (reclaimed, or NULL), a purge (purged, or NULL; each 0..1000000000) and/or an error of the sweeper (error, 1..10000 characters, or NULL: kept with its time until the next error); used by the background sweeper. Errors: 22023.';

CREATE OR REPLACE FUNCTION pgfence.sweeper_last_pass() RETURNS timestamptz
LANGUAGE sql STABLE AS $$ SELECT last_pass_at FROM pgfence.sweeper_status $$;

COMMENT ON FUNCTION pgfence.sweeper_last_pass() IS
  'When the background sweeper (run_sweeper) last completed a pass; NULL if never.';

-- Pausing the background sweeper (run_sweeper, whoever runs it: pg_cron, a worker
-- process, an operator): an operator action, recorded. It waits for a step in
-- progress (a reclaim or purge batch holds the sweeper_status row), so once it has
-- returned (and committed) the background sweeper changes nothing until
-- resume_sweeper(). Claims still reclaim expired leases, and CALL pgfence.sweep()
-- still works: the pause is of the background sweeper only.
CREATE OR REPLACE FUNCTION pgfence.pause_sweeper() RETURNS boolean
LANGUAGE sql AS $$
    WITH paused AS (
        UPDATE pgfence.sweeper_status SET paused_at = clock_timestamp(), paused_by = pgfence._invoker()
         WHERE paused_at IS NULL
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM paused)
$$;

COMMENT ON FUNCTION pgfence.pause_sweeper() IS
$$Operator: pause the background sweeper (its reclaim passes and purges) until resume_sweeper(); waits for a
step in progress. Returns true when it paused it, false when it was paused already. Recorded in
sweeper_status (paused_at, paused_by). Claims still reclaim expired leases.$$;

CREATE OR REPLACE FUNCTION pgfence.resume_sweeper() RETURNS boolean
LANGUAGE sql AS $$
    WITH resumed AS (
        UPDATE pgfence.sweeper_status SET paused_at = NULL, paused_by = NULL
         WHERE paused_at IS NOT NULL
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM resumed)
$$;

COMMENT ON FUNCTION pgfence.resume_sweeper() IS
  'Operator: let the background sweeper run again; returns true when it was paused.';

-- Whether the background sweeper runs, with its own notion of healthy: a pass within
-- the last 2 minutes. state: running, paused, stopped (no pass within 2 minutes) or
-- never_ran. Workers that sweep when no background sweeper does (the Python Worker's
-- default) read this.
CREATE OR REPLACE FUNCTION pgfence.sweeper_health()
RETURNS TABLE(state text, last_pass_at timestamptz, last_pass_age interval, paused_at timestamptz,
              paused_by text, last_error text, last_error_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN s.paused_at IS NOT NULL THEN 'paused'
                WHEN s.last_pass_at IS NULL THEN 'never_ran'
                WHEN s.last_pass_at > clock_timestamp() - interval '2 minutes' THEN 'running'
                ELSE 'stopped' END,
           s.last_pass_at, clock_timestamp() - s.last_pass_at, s.paused_at, s.paused_by, s.last_error, s.last_error_at
      FROM pgfence.sweeper_status s
$$;

COMMENT ON FUNCTION pgfence.sweeper_health() IS
$$The background sweeper: state running (a pass within the last 2 minutes), paused (pause_sweeper), stopped
(no pass within 2 minutes: pg_cron is not running it) or never_ran; its last pass and that pass's age by the
database clock; who paused it and when; the last error it survived.$$;

-- Start a background sweeper run: check the arguments, return its first state.
CREATE OR REPLACE FUNCTION pgfence.sweeper_begin(pass_interval interval, run_until timestamptz)
RETURNS pgfence.sweeper_state
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgfence._check_interval('pass_interval', pass_interval, interval '10 milliseconds', interval '1 minute',
        '10 milliseconds..1 minute', 'pass an interval such as ''0.5 seconds''');
    IF run_until IS NOT NULL AND (NOT isfinite(run_until) OR run_until > clock_timestamp() + interval '1 hour') THEN
        PERFORM pgfence._raise_invalid('run_until', run_until::text, 'is not within the next hour',
            'pass NULL (the end of the current minute, for a run pg_cron starts every minute) or a time at most '
            '1 hour ahead');
    END IF;
    -- Each transaction after the first COMMIT starts at default_transaction_isolation.
    IF current_setting('transaction_isolation') <> 'read committed'
       OR current_setting('default_transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = 'PF004',
            MESSAGE = format('pgfence: run_sweeper needs READ COMMITTED, not %s (default %s)',
                             current_setting('transaction_isolation'), current_setting('default_transaction_isolation')),
            HINT = 'CALL it outside a transaction block with default_transaction_isolation = ''read committed''';
    END IF;
    RETURN ROW(pass_interval, coalesce(run_until, date_trunc('minute', clock_timestamp()) + interval '1 minute'),
               'reclaim', 0, NULL, NULL, false)::pgfence.sweeper_state;
END $$;

COMMENT ON FUNCTION pgfence.sweeper_begin(interval, timestamptz) IS
$$The first state of a background sweeper run (used by run_sweeper): pass_interval 10 ms..1 minute, run_until
NULL (the end of the current minute) or at most 1 hour ahead. Errors: 22004, 22023, PF004.$$;

-- One step of a background sweeper run, in the transaction run_sweeper commits after
-- it: one reclaim batch (1,000 expired leases; when the pass is over it is recorded
-- and the due schedules are fired, at most 100 slots; a fire that fails is logged as
-- a WARNING and in sweeper_status.last_error),
-- one purge batch (every 10 s, as soon as a history partition's range has passed, and
-- sooner while the history's partitions ahead run short:
-- finished jobs past their retention, 1,000 at a time; a
-- purge that fails is logged as a WARNING and in sweeper_status.last_error, and the
-- passes go on), or at most 10 ms of sleep (short transactions: a procedure's
-- transaction holds a snapshot, and one long sleep would keep every job claimed
-- meanwhile from being pruned out of the claim index). A step that finds the
-- sweeper paused, or another sweeper's step under way (it holds the sweeper_status
-- row), sleeps instead.
CREATE OR REPLACE FUNCTION pgfence.sweeper_step(state pgfence.sweeper_state) RETURNS pgfence.sweeper_state
LANGUAGE plpgsql
-- Expired leases are found through jobs_reclaim_idx, never by reading the table (see claim).
SET enable_seqscan = off
-- No JIT: sweeper_status (one row) can only be read sequentially, which enable_seqscan
-- off costs at 10^10, and JIT then compiled the step's statements every time: 100-250 ms
-- of CPU per reclaim or purge step, a quarter of a core for an idle sweeper.
SET jit = off
-- A step holds the sweeper_status row, and every other sweeper run waits for it: no
-- statement of a step may wait long on a lock another session holds (the reclaim takes
-- rows SKIP LOCKED; anything else fails after 5 s, ending this run, and pg_cron starts
-- the next one within the minute).
SET lock_timeout = '5s' AS $$
DECLARE
    s pgfence.sweeper_state := state;
    v_n bigint;
    v_paused timestamptz;
    v_free boolean;
    v_slack double precision;
BEGIN
    IF s.done IS NOT false OR s.phase IS NULL OR s.phase NOT IN ('reclaim', 'purge', 'sleep') OR s.run_until IS NULL
       OR NOT coalesce(s.pass_interval BETWEEN interval '10 milliseconds' AND interval '1 minute', false)
       OR (s.phase = 'sleep' AND s.wake_at IS NULL) OR s.reclaimed IS NULL THEN
        PERFORM pgfence._raise_invalid('state', s::text, 'is not a state of a running sweeper',
            'pass what pgfence.sweeper_begin or the last sweeper_step returned');
    END IF;
    IF s.phase = 'sleep' THEN
        IF clock_timestamp() < s.wake_at THEN
            PERFORM pg_sleep(least(0.01, extract(epoch FROM s.wake_at - clock_timestamp()))::double precision);
            RETURN s;
        END IF;
        s.phase := 'reclaim';
        s.wake_at := NULL;
    END IF;
    -- The sweeper_status row, if no other sweeper's step holds it: while it is held,
    -- pause_sweeper() waits, so a pause takes effect between two steps. (Only the
    -- owner's functions can lock it: no role can stall the sweeper this way.)
    SELECT true, ss.paused_at INTO v_free, v_paused FROM pgfence.sweeper_status ss FOR NO KEY UPDATE SKIP LOCKED;
    IF v_free IS NULL OR v_paused IS NOT NULL THEN
        s.reclaimed := 0;
        RETURN pgfence._sweeper_next(s);
    END IF;
    IF s.phase = 'reclaim' THEN
        SELECT count(*) INTO v_n FROM pgfence._reclaim(1000);
        s.reclaimed := s.reclaimed + v_n;
        IF v_n = 1000 THEN
            RETURN s;  -- more expired leases: another batch
        END IF;
        PERFORM pgfence.note_sweeper_pass(s.reclaimed, NULL);
        s.reclaimed := 0;
        -- The due schedules (at most 100 slots a pass; more at the next one). A fire
        -- that fails is rolled back alone: logged, and the passes go on.
        BEGIN
            PERFORM pgfence.fire_schedules(100);
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'pgfence: fire_schedules failed, the sweeper goes on reclaiming: % (SQLSTATE %)',
                pgfence._printable(SQLERRM), SQLSTATE;
            PERFORM pgfence.note_sweeper_pass(NULL, NULL,
                left(format('fire_schedules failed: %s (SQLSTATE %s)', SQLERRM, SQLSTATE), 10000));
        END;
        IF s.next_purge IS NULL OR clock_timestamp() >= s.next_purge THEN
            s.phase := 'purge';
            RETURN s;
        END IF;
        RETURN pgfence._sweeper_next(s);
    END IF;
    -- purge
    BEGIN
        v_n := pgfence.purge_finished(1000);
        PERFORM pgfence.note_sweeper_pass(NULL, v_n);
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'pgfence: purge_finished failed, the sweeper goes on reclaiming: % (SQLSTATE %)',
            pgfence._printable(SQLERRM), SQLSTATE;
        PERFORM pgfence.note_sweeper_pass(NULL, NULL,
            left(format('purge_finished failed: %s (SQLSTATE %s)', SQLERRM, SQLSTATE), 10000));
        v_n := 0;
    END;
    IF v_n = 1000 THEN
        RETURN s;  -- more to purge: another batch
    END IF;
    -- Again in 10 s, or sooner when a history partition's range ends before then (it is
    -- dropped at once, not up to 10 s late: the history stays within retention plus one
    -- partition width). A partition whose drop failed is not waited for again: next
    -- after the 10 s. Sooner too while the partitions made reach less than 40 s past
    -- the longest retain_done (the slack: normally a minute or more; it shrinks when the
    -- maintenance misses its lock under load, and at 0 completions land in the default
    -- partition): in a quarter of the slack, at least 1 s. Once the slack is gone, every
    -- 10 s again: a maintenance that cannot make partitions (a reader holding the
    -- default partition, a table in the way) is not tried every second, each try
    -- holding completions up to 100 ms.
    v_slack := extract(epoch FROM (SELECT max(h.upper_bound) FROM pgfence.history_partitions h)
                                  - pgfence._utc_plus(clock_timestamp(),
                                        coalesce((SELECT max(r.retain_done) FROM pgfence.retention r), interval '0')));
    s.next_purge := least(clock_timestamp() + interval '10 seconds',
                          (SELECT min(h.upper_bound) FROM pgfence.history_partitions h
                            WHERE h.upper_bound > clock_timestamp()),
                          CASE WHEN v_slack > 0 AND v_slack < 40
                               THEN clock_timestamp() + make_interval(secs => greatest(1, v_slack / 4)) END);
    RETURN pgfence._sweeper_next(s);
END $$;

COMMENT ON FUNCTION pgfence.sweeper_step(pgfence.sweeper_state) IS
$$One step of a background sweeper run (used by run_sweeper, which commits after each): a reclaim batch
(after the pass's last one, fire_schedules(100)), a purge batch, or at most 10 ms of sleep; returns the next state (done = true: the run is over). Errors:
22023 (a state no sweeper_begin or sweeper_step returned).$$;

-- After a pass (or a step that could not run): sleep until the next pass, or end the
-- run when the next pass would start after run_until.
CREATE OR REPLACE FUNCTION pgfence._sweeper_next(s pgfence.sweeper_state)
RETURNS pgfence.sweeper_state
LANGUAGE plpgsql AS $$
BEGIN
    IF clock_timestamp() + s.pass_interval >= s.run_until THEN
        s.done := true;
    ELSE
        s.phase := 'sleep';
        s.wake_at := clock_timestamp() + s.pass_interval;
    END IF;
    RETURN s;
END $$;

COMMENT ON FUNCTION pgfence._sweeper_next(pgfence.sweeper_state) IS
  'Private: the state after a sweeper pass: asleep until the next one, or done after run_until.';

-- The background sweeper pg_cron starts every minute (and once at server start): a
-- pass every pass_interval until the end of the current minute (pg_cron 1.4 schedules
-- by the minute only), so a lease is reclaimed within about pass_interval of its
-- expiry. Runs with its caller's rights (it commits, so it cannot be SECURITY
-- DEFINER): it pins search_path first and after every COMMIT, and only calls
-- schema-qualified pgfence functions, so no function or operator of the caller's
-- search_path ever runs in it (pg_cron runs it as a superuser).
CREATE OR REPLACE PROCEDURE pgfence.run_sweeper(pass_interval interval DEFAULT '0.5 seconds',
                                                run_until timestamptz DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    v_state pgfence.sweeper_state;
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pgfence, pg_temp', true);
    v_state := pgfence.sweeper_begin(pass_interval, run_until);
    -- Keep pg_cron's run log bounded: a day of this job's runs, where pg_cron itself is
    -- installed in this database: both tables must be members of the pg_cron extension.
    -- (Not merely exist: where pg_cron runs from another database, any role able to
    -- create a schema here could create a cron.job_run_details of its own, with a view or
    -- a function in it, and this statement runs as a superuser under pg_cron. There the
    -- DBA trims the log in pg_cron's database: see docs/operations.md.) A caller without access
    -- to schema cron, e.g. an operator running this by hand, skips it. Dynamic SQL:
    -- without pg_cron the table does not exist, and a static statement would not compile
    -- under plpgsql_check; a constant text, with every operator qualified.
    BEGIN
        IF (SELECT pg_catalog.count(*) FROM pg_catalog.pg_depend d
              JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
             WHERE e.extname OPERATOR(pg_catalog.=) 'pg_cron'
               AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
               AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
               AND d.deptype OPERATOR(pg_catalog.=) 'e'
               AND d.objid OPERATOR(pg_catalog.=) ANY (ARRAY[pg_catalog.to_regclass('cron.job_run_details'),
                                                             pg_catalog.to_regclass('cron.job')]::pg_catalog.oid[]))
           OPERATOR(pg_catalog.=) 2 THEN
            EXECUTE $sql$DELETE FROM cron.job_run_details d
                          WHERE d.end_time OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 day')
                            AND d.jobid IN (SELECT j.jobid FROM cron.job j
                                             WHERE j.jobname OPERATOR(pg_catalog.=) ANY
                                                   (ARRAY['pgfence-reclaim', 'pgfence-reclaim-reboot']))$sql$;
        END IF;
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE NOTICE 'pgfence: cannot trim cron.job_run_details (%); trim it yourself', SQLERRM;
    END;
    COMMIT;
    LOOP
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pgfence, pg_temp', true);
        EXIT WHEN pg_catalog.to_regprocedure('pgfence.sweeper_step(pgfence.sweeper_state)') IS NULL;  -- reverted under us
        v_state := pgfence.sweeper_step(v_state);
        COMMIT;
        EXIT WHEN v_state.done;
    END LOOP;
END $$;

COMMENT ON PROCEDURE pgfence.run_sweeper(interval, timestamptz) IS
$$Background sweeper: a reclaim pass (every expired lease, then the due schedules' slots) every pass_interval (10 ms..1 minute, default 0.5 s)
until run_until (default: the end of the current minute; at most 1 hour ahead), each recorded in
pgfence.sweeper_status, and purge_finished every 10 s, when a history partition's range ends, and sooner (at least 1 s apart) while the partitions made reach less than 40 s past the longest retain_done (a failing purge is logged as a WARNING and in
sweeper_status.last_error, and does not stop the passes); every step its own short transaction. pg_cron
jobs 'pgfence-reclaim' (every minute) and 'pgfence-reclaim-reboot' (at server start) run it. Paused by
pause_sweeper(). Safe whatever the caller's search_path. Errors: 22004, 22023, PF004.$$;

INSERT INTO pgfence.routine_grants (routine, roles) VALUES
    ('sweep',             '{pgfence_operator}'),
    ('sweep_batch',       '{pgfence_operator}'),
    ('run_sweeper',       '{pgfence_operator}'),
    ('sweeper_begin',     '{pgfence_operator}'),
    ('sweeper_step',      '{pgfence_operator}'),
    ('note_sweeper_pass', '{pgfence_operator}'),
    ('pause_sweeper',     '{pgfence_operator}'),
    ('resume_sweeper',    '{pgfence_operator}'),
    ('sweeper_health',    '{pgfence_worker,pgfence_operator,pgfence_viewer}'),
    ('sweeper_last_pass', '{pgfence_worker,pgfence_operator,pgfence_viewer}')
ON CONFLICT (routine) DO UPDATE SET roles = excluded.roles;
SELECT pgfence._apply_privileges();

COMMENT ON COLUMN pgfence.sweeper_status.last_error IS
  'The last error the background sweeper caught and survived (a failed purge_finished or fire_schedules), kept until the next one.';
COMMENT ON COLUMN pgfence.sweeper_status.last_error_at IS
  'When last_error happened (NULL: never).';

COMMIT;
