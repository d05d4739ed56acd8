-- Verify pgfence:cron/reclaim on pg

BEGIN;

-- With pg_cron installed, both jobs must exist and call the sweeper.
DO $$
BEGIN
    -- Two IFs: cron.job may not exist, and one expression would be planned whole.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        IF (SELECT count(*) FROM cron.job
             WHERE (jobname, schedule) IN (('pgfence-reclaim', '* * * * *'), ('pgfence-reclaim-reboot', '@reboot'))
               AND command = 'CALL pgfence.run_sweeper()') <> 2 THEN
            RAISE EXCEPTION 'pg_cron jobs pgfence-reclaim and pgfence-reclaim-reboot are not both scheduled';
        END IF;
    END IF;
END $$;

ROLLBACK;
