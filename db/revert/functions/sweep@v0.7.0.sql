-- Revert pgfence:functions/sweep from pg (back to @v0.3.0)
--
-- sweep() as of @v0.1.0 and note_sweeper_pass/run_sweeper as of @v0.3.0 (each CREATE
-- made CREATE OR REPLACE), then what the rework added is dropped and the privilege
-- rule applied again.

BEGIN;

DROP FUNCTION pgfence.sweeper_step(pgfence.sweeper_state);
DROP FUNCTION pgfence._sweeper_next(pgfence.sweeper_state);
DROP FUNCTION pgfence.sweeper_begin(interval, timestamptz);
DROP FUNCTION pgfence.sweeper_health();
DROP FUNCTION pgfence.resume_sweeper();
DROP FUNCTION pgfence.pause_sweeper();
DROP FUNCTION pgfence.sweep_batch(integer, bigint);
DELETE FROM pgfence.routine_grants
 WHERE routine IN ('sweep_batch', 'sweeper_begin', 'sweeper_step', 'pause_sweeper', 'resume_sweeper', 'sweeper_health');

-- Reclaim every expired lease, batch_size at a time, each batch committed in its
-- own transaction (so 100,000 expired rows never sit in one long transaction).
-- Overlapping sweeps are harmless: batches take rows with SKIP LOCKED. CALL it
-- outside an explicit transaction block; reclaimed returns the total.
CREATE OR REPLACE PROCEDURE pgfence.sweep(INOUT reclaimed bigint DEFAULT 0, batch_size integer DEFAULT 1000)
LANGUAGE plpgsql AS $$
DECLARE
    v_batch bigint;
BEGIN
    -- Checked inline: this procedure runs with the caller's rights (it commits, so
    -- it cannot be SECURITY DEFINER), and the private helpers are the owner's.
    IF batch_size IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
            MESSAGE = 'pgfence: argument batch_size must not be NULL', HINT = 'pass a batch_size between 1 and 10000';
    ELSIF batch_size NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('pgfence: invalid batch_size %s: outside 1..10000', batch_size),
            HINT = 'pass a batch_size between 1 and 10000';
    END IF;
    reclaimed := 0;
    LOOP
        SELECT count(*) INTO v_batch FROM pgfence.reclaim_expired(batch_size);
        reclaimed := reclaimed + v_batch;
        COMMIT;
        EXIT WHEN v_batch < batch_size;
    END LOOP;
END $$;

COMMENT ON PROCEDURE pgfence.sweep(bigint, integer) IS
$$Reclaim every expired lease (batch_size 1..10000 per transaction, each committed). CALL pgfence.sweep();
outside a transaction block. Returns reclaimed = total jobs reclaimed. Safe to run concurrently.
Errors: 22004, 22023, PF004 (from reclaim_expired).$$;



-- Record a sweeper pass (reclaimed), a purge (purged) or a failed purge (error) in
-- pgfence.sweeper_status. A function of its own so that run_sweeper, which runs
-- with its caller's rights, needs no write access to the table.
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
  'Record in pgfence.sweeper_status a sweeper pass (reclaimed, or NULL), a purge (purged, or NULL; each 0..1000000000) and/or an error of the sweeper (error, 1..10000 characters, or NULL: kept with its time until the next error); used by run_sweeper. Errors: 22023.';

-- Privileges, as the privileges change gives every routine it finds (see privileges.sql):
-- owned by pgfence_owner, no EXECUTE for PUBLIC, the public API SECURITY DEFINER with a
-- pinned search_path, and EXECUTE for the role that calls it.
ALTER FUNCTION pgfence.note_sweeper_pass(bigint, bigint, text) OWNER TO pgfence_owner;
REVOKE ALL ON FUNCTION pgfence.note_sweeper_pass(bigint, bigint, text) FROM PUBLIC;
ALTER FUNCTION pgfence.note_sweeper_pass(bigint, bigint, text) SECURITY DEFINER SET search_path = pg_catalog, pgfence, pg_temp;
GRANT EXECUTE ON FUNCTION pgfence.note_sweeper_pass(bigint, bigint, text) TO pgfence_operator;

-- (CREATE OR REPLACE keeps the procedure's owner and grants.)
-- The background sweeper pg_cron starts every minute: a pass every pass_interval
-- until the end of the current minute (pg_cron 1.4 schedules by the minute only),
-- so a lease is reclaimed within about pass_interval of its expiry. A pass is
-- skipped while another session holds the advisory lock
-- hashtext('pgfence.sweep') (another sweeper, or an operator pausing it).
CREATE OR REPLACE PROCEDURE pgfence.run_sweeper(pass_interval interval DEFAULT '0.5 seconds', run_until timestamptz DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    v_until timestamptz := coalesce(run_until, date_trunc('minute', clock_timestamp()) + interval '1 minute');
    v_reclaimed bigint;
    v_purged bigint;
    v_next_purge timestamptz;
    v_wake timestamptz;
BEGIN
    IF pass_interval IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
            MESSAGE = 'pgfence: argument pass_interval must not be NULL', HINT = 'pass an interval such as ''0.5 seconds''';
    ELSIF pass_interval < interval '10 milliseconds' OR pass_interval > interval '1 minute' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('pgfence: invalid pass_interval %s: outside 10 ms..1 minute', pass_interval),
            HINT = 'pass an interval such as ''0.5 seconds''';
    END IF;
    -- Refused before the sweep lock is taken: an error inside a pass leaves this
    -- session holding it (see the COMMENT). Each transaction after the first COMMIT
    -- starts at default_transaction_isolation, so that is checked too.
    IF current_setting('transaction_isolation') <> 'read committed'
       OR current_setting('default_transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = 'PF004',
            MESSAGE = format('pgfence: run_sweeper needs READ COMMITTED, not %s (default %s)',
                             current_setting('transaction_isolation'), current_setting('default_transaction_isolation')),
            HINT = 'CALL it outside a transaction block with default_transaction_isolation = ''read committed''';
    END IF;
    -- Keep pg_cron's run log bounded: a day of this job's runs. (A caller without
    -- access to schema cron, e.g. an operator running this by hand, skips it.)
    BEGIN
        -- (Dynamic SQL: without pg_cron the table does not exist, and a static
        -- statement would not compile under plpgsql_check.)
        IF to_regclass('cron.job_run_details') IS NOT NULL THEN
            EXECUTE $sql$DELETE FROM cron.job_run_details
                          WHERE end_time < now() - interval '1 day'
                            AND jobid IN (SELECT jobid FROM cron.job WHERE jobname = 'pgfence-reclaim')$sql$;
        END IF;
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE NOTICE 'pgfence: cannot trim cron.job_run_details (%); trim it yourself', SQLERRM;
    END;
    COMMIT;
    LOOP
        EXIT WHEN to_regclass('pgfence.jobs') IS NULL;  -- reverted under us
        -- A session-level lock: it must outlive the COMMITs inside the pass, so that
        -- a session holding it (another sweeper, an operator) really pauses us.
        IF pg_try_advisory_lock(hashtext('pgfence.sweep')) THEN
            v_reclaimed := 0;
            CALL pgfence.sweep(v_reclaimed);
            PERFORM pgfence.note_sweeper_pass(v_reclaimed, NULL);
            -- Every 10 s: delete finished jobs past their retention, a batch per transaction.
            IF v_next_purge IS NULL OR clock_timestamp() >= v_next_purge THEN
                -- A purge that fails must not stop the reclaim passes: it is logged
                -- as a WARNING and tried again at the next purge time.
                LOOP
                    BEGIN
                        v_purged := pgfence.purge_finished(1000);
                        PERFORM pgfence.note_sweeper_pass(NULL, v_purged);
                    EXCEPTION WHEN OTHERS THEN
                        RAISE WARNING 'pgfence: purge_finished failed, the sweeper goes on reclaiming: % (SQLSTATE %)',
                            SQLERRM, SQLSTATE;
                        PERFORM pgfence.note_sweeper_pass(NULL, NULL,
                            left(format('purge_finished failed: %s (SQLSTATE %s)', SQLERRM, SQLSTATE), 10000));
                        v_purged := 0;
                    END;
                    COMMIT;
                    EXIT WHEN v_purged < 1000;
                END LOOP;
                v_next_purge := clock_timestamp() + interval '10 seconds';
            END IF;
            PERFORM pg_advisory_unlock(hashtext('pgfence.sweep'));
        END IF;
        COMMIT;
        EXIT WHEN clock_timestamp() + pass_interval >= v_until;
        -- Sleep in 10 ms transactions: a procedure's transaction holds a snapshot
        -- (and so the xmin horizon) until it commits; one long pg_sleep would keep
        -- every job claimed meanwhile from being pruned out of the claim index.
        v_wake := clock_timestamp() + pass_interval;
        WHILE clock_timestamp() < v_wake LOOP
            PERFORM pg_sleep(0.01);
            COMMIT;
        END LOOP;
    END LOOP;
END $$;

COMMENT ON PROCEDURE pgfence.run_sweeper(interval, timestamptz) IS
$$Background sweeper: CALL pgfence.sweep() every pass_interval (default 0.5 s) until run_until (default:
the end of the current minute), recording each pass in pgfence.sweeper_status, and purge_finished every
10 s (a failing purge is logged as a WARNING and in sweeper_status.last_error, and does not stop the
passes). pg_cron job
'pgfence-reclaim' starts it every minute. Holding pg_advisory_lock(hashtext('pgfence.sweep')) pauses it.
It holds that session-level lock during each pass: if a pass raises an error (a statement_timeout, a
cancel), the calling session keeps the lock, and other sweepers skip their passes until it disconnects
(pg_cron's runs always do). Errors: 22004, 22023, PF004.$$;

COMMENT ON COLUMN pgfence.sweeper_status.last_error IS
  'The last error the background sweeper caught and survived (a failed purge_finished), kept until the next one.';
COMMENT ON COLUMN pgfence.sweeper_status.last_error_at IS
  'When last_error happened (NULL: never).';

DROP TYPE pgfence.sweeper_state;
SELECT pgfence._apply_privileges();

COMMIT;
