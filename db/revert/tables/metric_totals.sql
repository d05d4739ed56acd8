-- Revert pgfence:tables/metric_totals from pg

BEGIN;

DROP TABLE pgfence.metric_totals;

COMMIT;
