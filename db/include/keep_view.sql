-- Included (\ir) by the scripts that change the type of a column a view reads (which
-- PostgreSQL refuses while the view exists): pg_temp.keep_view(name) notes the view's
-- definition, options, comment, owner and grants; the script drops the view, changes the
-- column, and pg_temp.restore_view(name) makes the view again as it was. Temporary
-- functions: they go with the psql session. (Their names are the scripts' own
-- constants; what they run comes from the catalog.)

CREATE TABLE pg_temp.kept_views (name text PRIMARY KEY, def text, options text[], note text, owner name, acl aclitem[]);

-- Column grants and column comments are not kept: keep_view refuses a view that has
-- any, rather than lose them.
CREATE FUNCTION pg_temp.keep_view(name text) RETURNS void
LANGUAGE plpgsql AS $f$
BEGIN
    IF EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = name::regclass AND a.attnum > 0
                  AND (a.attacl IS NOT NULL OR col_description(a.attrelid, a.attnum) IS NOT NULL)) THEN
        RAISE EXCEPTION 'view % has column grants or column comments, which keep_view does not keep', name;
    END IF;
    INSERT INTO pg_temp.kept_views
    SELECT name, pg_get_viewdef(c.oid), c.reloptions, obj_description(c.oid, 'pg_class'),
           (SELECT r.rolname FROM pg_roles r WHERE r.oid = c.relowner), c.relacl
      FROM pg_class c WHERE c.oid = name::regclass AND c.relkind = 'v';
END $f$;

CREATE FUNCTION pg_temp.restore_view(name text) RETURNS void
LANGUAGE plpgsql AS $f$
DECLARE
    v record;
    g record;
BEGIN
    DELETE FROM pg_temp.kept_views k WHERE k.name = restore_view.name RETURNING * INTO STRICT v;
    EXECUTE format('CREATE VIEW %s%s AS %s', v.name,
                   CASE WHEN v.options IS NOT NULL THEN format(' WITH (%s)', array_to_string(v.options, ', ')) ELSE '' END,
                   v.def);
    EXECUTE format('COMMENT ON VIEW %s IS %L', v.name, v.note);
    EXECUTE format('ALTER VIEW %s OWNER TO %I', v.name, v.owner);
    EXECUTE format('REVOKE ALL ON TABLE %s FROM PUBLIC', v.name);
    FOR g IN SELECT a.grantee, a.privilege_type, a.is_grantable FROM aclexplode(v.acl) a
              WHERE a.grantee <> (SELECT r.oid FROM pg_roles r WHERE r.rolname = v.owner) LOOP
        EXECUTE format('GRANT %s ON TABLE %s TO %s%s', g.privilege_type, v.name,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END,  -- (quoted as needed)
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END $f$;
