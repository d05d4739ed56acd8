-- Verify pgfence:tables/metric_totals on pg

BEGIN;

SELECT metric, queue, label, value FROM pgfence.metric_totals WHERE false;

ROLLBACK;
