-- Deploy pgfence:cron/reclaim to pg (reworked after @v0.3.0)
-- requires: cron/reclaim@v0.3.0
-- requires: functions/sweep
--
-- Changed after @v0.3.0: a second job, pgfence-reclaim-reboot ('@reboot'), starts the
-- sweeper when the server (re)starts, so that after a crash-restart expired leases are
-- reclaimed within about a pass, not at the next minute boundary (8.8 s to 58.4 s in
-- three crash-restarts).

BEGIN;

-- Schedule the background sweeper with pg_cron when pg_cron is installed in this
-- database: every minute, and once at server start. cron.schedule with an existing
-- job name updates that job, so a redeploy is idempotent. Without pg_cron this
-- deploys cleanly with a NOTICE: run CALL pgfence.sweep() from your own scheduler, or
-- let the Python worker sweep (Worker(run_sweeper=True)). If pg_cron lives in another
-- database (cron.database_name), schedule both from there with
-- cron.schedule_in_database (docs/operations.md).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        PERFORM cron.schedule('pgfence-reclaim', '* * * * *', 'CALL pgfence.run_sweeper()');
        PERFORM cron.schedule('pgfence-reclaim-reboot', '@reboot', 'CALL pgfence.run_sweeper()');
    ELSE
        RAISE NOTICE 'pgfence: pg_cron is not installed in database %, so no sweep is scheduled', current_database()
            USING HINT = 'install pg_cron (shared_preload_libraries = ''pg_cron'', cron.database_name = this database, '
                         'CREATE EXTENSION pg_cron) and redeploy cron/reclaim, or run CALL pgfence.sweep() every second '
                         'from another scheduler';
    END IF;
END $$;

COMMIT;
