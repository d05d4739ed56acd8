-- Revert pgfence:cron/reclaim from pg

BEGIN;

DO $$
BEGIN
    -- Two IFs: cron.job may not exist, and one expression would be planned whole.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') THEN
        IF EXISTS (SELECT 1 FROM cron.job WHERE jobname = 'pgfence-reclaim') THEN
            PERFORM cron.unschedule('pgfence-reclaim');
        END IF;
    END IF;
END $$;

COMMIT;
