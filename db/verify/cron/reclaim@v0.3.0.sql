-- Verify pgfence:cron/reclaim on pg

BEGIN;

-- With pg_cron installed, the job must exist and call the sweeper.
DO $$
BEGIN
    -- Two IFs: cron.job may not exist, and one expression would be planned whole.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        IF NOT EXISTS (SELECT 1 FROM cron.job
                        WHERE jobname = 'pgfence-reclaim' AND command = 'CALL pgfence.run_sweeper()') THEN
            RAISE EXCEPTION 'pg_cron job pgfence-reclaim is missing';
        END IF;
    END IF;
END $$;

ROLLBACK;
