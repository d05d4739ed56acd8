-- Revert pgfence:cron/reclaim from pg (back to @v0.3.0: the minutely job only)

BEGIN;

DO $$
BEGIN
    -- Two IFs: cron.job may not exist, and one expression would be planned whole.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        IF EXISTS (SELECT 1 FROM cron.job WHERE jobname = 'pgfence-reclaim-reboot') THEN
            PERFORM cron.unschedule('pgfence-reclaim-reboot');
        END IF;
    END IF;
END $$;

COMMIT;
