-- Deploy pgfence:tables/sweeper_status to pg
-- requires: schema

BEGIN;

-- One row: what the background sweeper last did, so operators can see that it
-- runs (pgfence stats) and alert when it stops.
CREATE TABLE pgfence.sweeper_status (
    singleton        boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    last_pass_at     timestamptz,
    last_reclaimed   bigint      NOT NULL DEFAULT 0,
    total_reclaimed  bigint      NOT NULL DEFAULT 0,
    last_purge_at    timestamptz,
    total_purged     bigint      NOT NULL DEFAULT 0,
    last_error       text,
    last_error_at    timestamptz
) WITH (fillfactor = 50);

INSERT INTO pgfence.sweeper_status DEFAULT VALUES;

COMMENT ON TABLE pgfence.sweeper_status IS
  'One row: when the background sweeper (pgfence.run_sweeper) last completed a pass, and what it reclaimed.';

COMMIT;
