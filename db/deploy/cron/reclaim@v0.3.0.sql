-- Deploy pgfence:cron/reclaim to pg
-- requires: functions/sweep

BEGIN;

-- Schedule the background sweeper with pg_cron when pg_cron is installed in this
-- database. cron.schedule with an existing job name updates that job, so a
-- redeploy is idempotent. Without pg_cron this deploys cleanly with a NOTICE:
-- run CALL pgfence.sweep() from your own scheduler, or let the Python worker
-- sweep (Worker(run_sweeper=True)).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        PERFORM cron.schedule('pgfence-reclaim', '* * * * *', 'CALL pgfence.run_sweeper()');
    ELSE
        RAISE NOTICE 'pgfence: pg_cron is not installed in database %, so no sweep is scheduled', current_database()
            USING HINT = 'install pg_cron (shared_preload_libraries = ''pg_cron'', cron.database_name = this database, '
                         'CREATE EXTENSION pg_cron) and redeploy cron/reclaim, or run CALL pgfence.sweep() every second '
                         'from another scheduler';
    END IF;
END $$;

COMMIT;
