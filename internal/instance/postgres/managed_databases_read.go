package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// What a pass reads of the managed databases: the roles that may own them, the databases
// themselves (from the postgres database) and, in each, the declared schemas and extensions.

func existingRoleNames(ctx context.Context, conn *pgx.Conn, names []string) (map[string]bool, error) {
	rows, err := conn.Query(ctx, "SELECT rolname FROM pg_roles WHERE rolname = ANY($1)", names)
	if err != nil {
		return nil, fmt.Errorf("read roles: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read roles: %w", err)
	}
	roles := map[string]bool{}
	for _, name := range found {
		roles[name] = true
	}
	return roles, nil
}

func readDatabases(ctx context.Context, conn *pgx.Conn, names []string) (map[string]*existingDatabase, error) {
	// The rows written in each database, its catalogs' included (managed_databases_quiet.go).
	rows, err := conn.Query(ctx, `SELECT datname, pg_get_userbyid(datdba), pg_encoding_to_char(encoding),
		datcollate, datctype, datconnlimit, current_setting('track_counts')::bool, oid,
		pg_stat_get_db_tuples_inserted(oid) + pg_stat_get_db_tuples_updated(oid) + pg_stat_get_db_tuples_deleted(oid),
		coalesce(pg_stat_get_db_stat_reset_time(oid)::text, ''), pg_postmaster_start_time()::text
		FROM pg_database WHERE datname = ANY($1)`, names)
	if err != nil {
		return nil, fmt.Errorf("read databases: %w", err)
	}
	defer rows.Close()
	databases := map[string]*existingDatabase{}
	for rows.Next() {
		var name string
		var counted bool
		db := &existingDatabase{}
		w := &db.writes
		if err := rows.Scan(&name, &db.Owner, &db.Encoding, &db.Collate, &db.Ctype, &db.ConnectionLimit,
			&counted, &w.oid, &w.rows, &w.statsReset, &w.started); err != nil {
			return nil, fmt.Errorf("read databases: %w", err)
		}
		if !counted {
			*w = databaseWrites{}
		}
		databases[name] = db
	}
	return databases, rows.Err()
}

// readDatabaseItems reads, in the database conn is to, the declared schemas' owners and
// installed extensions in one round trip, and what the image ships of the extensions only when
// one is not installed as declared: the unchanged pass, every minute in every managed database,
// costs one statement and no read of the image's files.
func readDatabaseItems(ctx context.Context, conn *pgx.Conn, want agentapi.ManagedDatabase) (map[string]*string, map[string]*existingExtension, map[string]*availableExtension, error) {
	schemaNames := make([]string, 0, len(want.Schemas))
	for _, s := range want.Schemas {
		schemaNames = append(schemaNames, s.Name)
	}
	rows, err := conn.Query(ctx, `SELECT 'schema', nspname::text, pg_get_userbyid(nspowner)::text, '' FROM pg_namespace WHERE nspname = ANY($1::text[])
		UNION ALL SELECT 'extension', e.extname::text, e.extversion, n.nspname::text FROM pg_extension e
		JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = ANY($2::text[])`,
		pgx.QueryExecModeExec, schemaNames, declaredExtensionNames(want))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read schemas and extensions: %w", err)
	}
	schemas, extensions := map[string]*string{}, map[string]*existingExtension{}
	var kind, name, ownerOrVersion, schema string
	_, err = pgx.ForEachRow(rows, []any{&kind, &name, &ownerOrVersion, &schema}, func() error {
		if kind == "schema" {
			owner := ownerOrVersion
			schemas[name] = &owner
		} else {
			extensions[name] = &existingExtension{Version: ownerOrVersion, Schema: schema}
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read schemas and extensions: %w", err)
	}
	var unsettled []string
	for _, e := range want.Extensions {
		if !e.Absent && !installedAsAsked(e, extensions[e.Name]) {
			unsettled = append(unsettled, e.Name)
		}
	}
	if len(unsettled) == 0 {
		return schemas, extensions, nil, nil
	}
	available, err := readAvailableExtensions(ctx, conn, unsettled)
	return schemas, extensions, available, err
}

func declaredExtensionNames(want agentapi.ManagedDatabase) []string {
	names := make([]string, 0, len(want.Extensions))
	for _, e := range want.Extensions {
		names = append(names, e.Name)
	}
	return names
}

// readExtensions reads which of the named extensions are installed in the database conn is to.
func readExtensions(ctx context.Context, conn *pgx.Conn, names []string) (map[string]*existingExtension, error) {
	rows, err := conn.Query(ctx, `SELECT e.extname, e.extversion, n.nspname FROM pg_extension e
		JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = ANY($1)`, names)
	if err != nil {
		return nil, fmt.Errorf("read extensions: %w", err)
	}
	extensions := map[string]*existingExtension{}
	var name, version, schema string
	_, err = pgx.ForEachRow(rows, []any{&name, &version, &schema}, func() error {
		extensions[name] = &existingExtension{Version: version, Schema: schema}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read extensions: %w", err)
	}
	return extensions, nil
}

func readAvailableExtensions(ctx context.Context, conn *pgx.Conn, names []string) (map[string]*availableExtension, error) {
	rows, err := conn.Query(ctx, `SELECT v.name, v.version, v.trusted, a.default_version
		FROM pg_available_extension_versions v JOIN pg_available_extensions a ON a.name = v.name
		WHERE v.name = ANY($1)`, names)
	if err != nil {
		return nil, fmt.Errorf("read available extensions: %w", err)
	}
	defer rows.Close()
	available := map[string]*availableExtension{}
	for rows.Next() {
		var name, version, defaultVersion string
		var trusted bool
		if err := rows.Scan(&name, &version, &trusted, &defaultVersion); err != nil {
			return nil, fmt.Errorf("read available extensions: %w", err)
		}
		if available[name] == nil {
			available[name] = &availableExtension{DefaultVersion: defaultVersion, Trusted: map[string]bool{}}
		}
		available[name].Trusted[version] = trusted
	}
	return available, rows.Err()
}
