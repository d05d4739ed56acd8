-- Deploy pgfence:tables/rejections_cap to pg
-- requires: tables/attempts
-- requires: schema

BEGIN;

-- At most 100 refused calls are stored per job (pgfence._record_rejection decides):
-- each stored one takes a slot, unique per job, so concurrent refusals cannot
-- overfill it; the ones after that are counted per job in pgfence.rejection_overflow.
-- Rows stored before this change have no slot (they count toward the 100).
ALTER TABLE pgfence.rejections ADD COLUMN IF NOT EXISTS slot smallint;
CREATE UNIQUE INDEX IF NOT EXISTS rejections_slot_idx ON pgfence.rejections (job_id, slot);
COMMENT ON COLUMN pgfence.rejections.slot IS
  'Which of the job''s 100 rejection slots this row takes (NULL: stored before the cap existed).';

CREATE TABLE IF NOT EXISTS pgfence.rejection_overflow (
    job_id           bigint      PRIMARY KEY,
    not_stored       bigint      NOT NULL CHECK (not_stored >= 1),
    last_rejected_at timestamptz NOT NULL
);
COMMENT ON TABLE pgfence.rejection_overflow IS
  'Refused calls not stored in pgfence.rejections because the job had 100 stored already: how many, and the last.';
ALTER TABLE pgfence.rejection_overflow OWNER TO pgfence_owner;
REVOKE ALL ON TABLE pgfence.rejection_overflow FROM PUBLIC;
GRANT SELECT ON TABLE pgfence.rejection_overflow TO pgfence_operator;

COMMIT;
