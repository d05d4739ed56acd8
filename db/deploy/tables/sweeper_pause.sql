-- Deploy pgfence:tables/sweeper_pause to pg
-- requires: tables/sweeper_status
-- requires: schema

BEGIN;

-- Pausing the background sweeper is an operator action (pgfence.pause_sweeper()),
-- recorded here, not an advisory lock that any role could take.
ALTER TABLE pgfence.sweeper_status
    ADD COLUMN IF NOT EXISTS paused_at timestamptz,
    ADD COLUMN IF NOT EXISTS paused_by text;

COMMENT ON COLUMN pgfence.sweeper_status.paused_at IS
  'Since when the background sweeper is paused (pgfence.pause_sweeper()); NULL: it runs.';
COMMENT ON COLUMN pgfence.sweeper_status.paused_by IS
  'The role that paused the background sweeper (SET ROLE respected).';

COMMIT;
