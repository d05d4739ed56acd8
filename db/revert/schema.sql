-- Revert pgfence:schema from pg (back to @v0.7.0)
--
-- The rule's CHECK back to three roles (the rows naming pgfence_viewer went with the
-- reverts of the changes after this one), then the @v0.7.0 script again (re-runnable:
-- CREATE OR REPLACE, upserted rows): _apply_privileges over the three roles.

BEGIN;
UPDATE pgfence.routine_grants SET roles = array_remove(roles, 'pgfence_viewer') WHERE 'pgfence_viewer' = ANY (roles);
ALTER TABLE pgfence.routine_grants DROP CONSTRAINT routine_grants_roles,
    ADD CONSTRAINT routine_grants_roles CHECK (
        roles <@ ARRAY['pgfence_producer', 'pgfence_worker', 'pgfence_operator']::text[]);
COMMIT;

\ir ../deploy/schema@v0.7.0.sql
