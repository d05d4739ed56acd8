-- Deploy pgfence:tables/queue_sets to pg
-- requires: schema
--
-- Named lists of queues, kept on the server (functions/queue_sets writes them), so
-- that a worker serving thousands of queues names its set in each claim instead of
-- sending, parsing and checking the whole list every time: a claim over an explicit
-- list of 10,000 names spent 4-5 ms on that list, one over the set of the same names
-- reads the stored set (its names checked once, when it was defined). members is the
-- set as claim uses it (a jsonb object keyed by the names, values NULL: sorted,
-- deduplicated, `?` by binary search). At most 100 sets (functions/queue_sets). Not a table that refers to a job: under distribution by queue it is
-- a reference table (a copy on every node), so its key is its name.

BEGIN;

CREATE TABLE IF NOT EXISTS pgfence.queue_sets (
    queue_set  text        PRIMARY KEY,
    members    jsonb       NOT NULL,
    queue_count integer    NOT NULL,
    defined_at timestamptz NOT NULL,
    defined_by text        NOT NULL,
    CONSTRAINT queue_sets_members_valid CHECK (jsonb_typeof(members) = 'object'),
    CONSTRAINT queue_sets_queue_count_valid CHECK (queue_count BETWEEN 1 AND 10000)
);
-- Stored out of line but not compressed: every claim over a set reads it whole, and a
-- set of 10,000 names (140 kB) read in 106-143 us compressed with pglz, 67-72 with lz4,
-- 31-36 as it is (2,000 reads each, taking turns). The room it costs: 140 kB for
-- 10,000 names of 6 characters, 1.4 MB for 10,000 of 128; at most 100 sets. (A set
-- stored before this setting stays compressed until it is defined again.)
ALTER TABLE pgfence.queue_sets ALTER COLUMN members SET STORAGE EXTERNAL;

COMMENT ON TABLE pgfence.queue_sets IS
$$Named sets of queues (define_queue_set): claim(queue_set => name) claims from the set's queues as it would from
the list, without the list being sent, parsed and checked on every call.$$;
COMMENT ON COLUMN pgfence.queue_sets.queue_set IS 'The set''s name (a valid name, like a queue''s).';
COMMENT ON COLUMN pgfence.queue_sets.members IS
  'The queues, as a jsonb object whose keys are the names (values NULL): claim tests a job''s queue with ?. Stored uncompressed (STORAGE EXTERNAL): each claim over the set reads it whole.';
COMMENT ON COLUMN pgfence.queue_sets.queue_count IS 'How many distinct queues the set holds (1..10000).';
COMMENT ON COLUMN pgfence.queue_sets.defined_at IS 'When the set was last defined.';
COMMENT ON COLUMN pgfence.queue_sets.defined_by IS
  'The role that last defined it (SET ROLE respected): only it, or an operator, may define it again or drop it.';

ALTER TABLE pgfence.queue_sets OWNER TO pgfence_owner;
REVOKE ALL ON TABLE pgfence.queue_sets FROM PUBLIC;
GRANT SELECT ON TABLE pgfence.queue_sets TO pgfence_operator;

COMMIT;
