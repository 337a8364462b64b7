package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// ReconcileDatabases brings the server's databases, and their declared schemas and extensions,
// in line with req.Databases: each database, schema and extension in its own statements, so that
// one the server refuses is reported and the others are applied all the same. conn is to the
// postgres database; connect opens one to each managed database for its schemas and extensions.
// A database whose declaration is the one settled in an earlier pass and that needed changes
// drifted; one that quiet holds with no row written since is not connected to
// (managed_databases_quiet.go), and quiet is brought up to date. It returns each database's
// result and how many statements ran.
func ReconcileDatabases(ctx context.Context, conn *pgx.Conn, connect Connector, req agentapi.CatalogRequest, settled map[string]bool, quiet QuietDatabases) ([]agentapi.DatabaseResult, int, error) {
	names, owners := make([]string, 0, len(req.Databases)), make([]string, 0, len(req.Databases))
	for _, db := range req.Databases {
		names, owners = append(names, db.Name), append(owners, db.Owner)
		for _, schema := range db.Schemas {
			owners = append(owners, schema.Owner)
		}
	}
	roles, err := existingRoleNames(ctx, conn, owners)
	if err != nil {
		return nil, 0, err
	}
	existing, err := readDatabases(ctx, conn, names)
	if err != nil {
		return nil, 0, err
	}
	if err := readMadeDatabases(ctx, conn, existing); err != nil {
		return nil, 0, err
	}
	quiet.forget(req.Databases)
	results := make([]agentapi.DatabaseResult, len(req.Databases))
	statements := 0
	for i, want := range req.Databases {
		plan := planDatabase(want, existing[want.Name], roles, req.ForbiddenDatabases)
		result, n := applyDatabasePlan(ctx, conn, want.Name, plan)
		statements += n
		if result.State != agentapi.RoleError && !want.Absent && !quiet.reuse(want, existing[want.Name], &result) {
			n, err := reconcileDatabaseItems(ctx, connect, want, roles, &result)
			statements += n
			if err != nil {
				result.State, result.Message = agentapi.RoleError, err.Error()
			}
			quiet.note(want, existing[want.Name], result, n)
		}
		if settled[want.Name] && result.State == agentapi.RoleApplied && changedAnything(result) {
			result.State = agentapi.RoleDrift
		}
		results[i] = result
	}
	return results, statements, nil
}

// applyDatabasePlan runs the database's own statements; its result's state is Applied, Absent
// (declared absent and gone) or Error.
func applyDatabasePlan(ctx context.Context, conn *pgx.Conn, name string, plan databasePlan) (agentapi.DatabaseResult, int) {
	result := agentapi.DatabaseResult{Name: name, State: agentapi.RoleApplied, Changed: plan.changed}
	var err error
	n := 0
	switch {
	case plan.refused != "":
		return agentapi.DatabaseResult{Name: name, State: agentapi.RoleError, Message: plan.refused}, 0
	case plan.absent:
		return agentapi.DatabaseResult{Name: name, State: agentapi.ItemAbsent}, 0
	case plan.kept:
		return agentapi.DatabaseResult{Name: name, State: agentapi.DatabaseKept,
			Message: "pgpilot did not make this database: it never drops it, and lets its Database go"}, 0
	case plan.create != "":
		n, err = 2, execOne(ctx, conn, plan.create) // CREATE DATABASE takes no transaction
		if err == nil {
			err = recordMadeDatabase(ctx, conn, name)
		}
	case plan.drop != "":
		n, err = 1, execOne(ctx, conn, plan.drop)
	case len(plan.alter) > 0:
		n, err = len(plan.alter), execAs(ctx, conn, "", plan.alter)
	}
	switch {
	case err != nil:
		result.State, result.Message = agentapi.RoleError, err.Error()
	case plan.problem != "":
		result.State, result.Message = agentapi.RoleError, plan.problem
	case plan.drop != "":
		result.State = agentapi.ItemAbsent
	}
	return result, n
}

// reconcileDatabaseItems applies the database's schemas, then its extensions (which may go in a
// declared schema), over a connection to it, and adds their results to result.
func reconcileDatabaseItems(ctx context.Context, connect Connector, want agentapi.ManagedDatabase, roles map[string]bool, result *agentapi.DatabaseResult) (int, error) {
	if len(want.Schemas) == 0 && len(want.Extensions) == 0 {
		return 0, nil
	}
	conn, err := connect(ctx, want.Name)
	if err != nil {
		return 0, fmt.Errorf("connect to database %s: %w", want.Name, err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	schemas, extensions, available, err := readDatabaseItems(ctx, conn, want)
	if err != nil {
		return 0, err
	}
	statements := 0
	for _, schema := range want.Schemas {
		plan := planSchema(schema, schemas[schema.Name], roles)
		statements += len(plan.statements)
		result.Schemas = append(result.Schemas, applyItemPlan(ctx, conn, schema.Name, plan))
	}
	extensionStatements := 0
	for _, extension := range want.Extensions {
		plan := planExtension(extension, extensions[extension.Name], available[extension.Name], want.Owner)
		extensionStatements += len(plan.statements) + len(plan.superuser)
		result.Extensions = append(result.Extensions, applyItemPlan(ctx, conn, extension.Name, plan))
	}
	if item := firstItemError(result); item != "" && result.State == agentapi.RoleApplied {
		result.State, result.Message = agentapi.RoleError, item
	}
	if extensionStatements > 0 { // the versions read before are stale
		if extensions, err = readExtensions(ctx, conn, declaredExtensionNames(want)); err != nil {
			return statements + extensionStatements, err
		}
	}
	for i := range result.Extensions {
		if installed := extensions[result.Extensions[i].Name]; installed != nil && result.Extensions[i].State != agentapi.ItemAbsent {
			result.Extensions[i].Version = installed.Version
		}
	}
	return statements + extensionStatements, nil
}

func applyItemPlan(ctx context.Context, conn *pgx.Conn, name string, plan itemPlan) agentapi.ItemResult {
	switch {
	case plan.refused != "":
		return agentapi.ItemResult{Name: name, State: agentapi.RoleError, Message: plan.refused}
	case plan.absent:
		return agentapi.ItemResult{Name: name, State: agentapi.ItemAbsent}
	case len(plan.statements)+len(plan.superuser) == 0:
		return agentapi.ItemResult{Name: name, State: agentapi.RoleApplied}
	}
	err := execAs(ctx, conn, plan.role, plan.statements)
	if err == nil && len(plan.superuser) > 0 {
		err = execAs(ctx, conn, "", plan.superuser)
	}
	if err != nil {
		return agentapi.ItemResult{Name: name, State: agentapi.RoleError, Changed: plan.changed, Message: err.Error()}
	}
	if plan.changed[0] == changedDropped {
		return agentapi.ItemResult{Name: name, State: agentapi.ItemAbsent, Changed: plan.changed}
	}
	return agentapi.ItemResult{Name: name, State: agentapi.RoleApplied, Changed: plan.changed}
}

func firstItemError(result *agentapi.DatabaseResult) string {
	for _, item := range result.Schemas {
		if item.State == agentapi.RoleError {
			return "schema " + item.Name + ": " + item.Message
		}
	}
	for _, item := range result.Extensions {
		if item.State == agentapi.RoleError {
			return "extension " + item.Name + ": " + item.Message
		}
	}
	return ""
}

func changedAnything(result agentapi.DatabaseResult) bool {
	changed := len(result.Changed) > 0
	for _, items := range [][]agentapi.ItemResult{result.Schemas, result.Extensions} {
		for i := range items {
			if len(items[i].Changed) > 0 {
				changed = true
				items[i].State = agentapi.RoleDrift
			}
		}
	}
	return changed
}

func execOne(ctx context.Context, conn *pgx.Conn, statement string) error {
	_, err := conn.Exec(ctx, statement)
	return err
}

// execAs runs statements in one transaction, as role when it is set.
func execAs(ctx context.Context, conn *pgx.Conn, role string, statements []string) error {
	if role != "" {
		statements = append([]string{"SET LOCAL ROLE " + pgx.Identifier{role}.Sanitize()}, statements...)
	}
	return execInTransaction(ctx, conn, statements)
}

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

// madeDatabasesTable records the databases pgpilot made, by OID, in the postgres database: only
// those does it drop, or give another owner. It lives with the data (replicated, carried by
// pg_upgrade), not in the agent's memory, so that a new primary knows them too.
const madeDatabasesTable = "pgpilot.databases"

// readMadeDatabases marks the existing databases pgpilot made.
func readMadeDatabases(ctx context.Context, conn *pgx.Conn, existing map[string]*existingDatabase) error {
	if len(existing) == 0 {
		return nil
	}
	var found bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", madeDatabasesTable).Scan(&found); err != nil || !found {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT d.datname::text FROM `+madeDatabasesTable+` m JOIN pg_database d ON d.oid = m.oid`)
	if err != nil {
		return fmt.Errorf("read the databases pgpilot made: %w", err)
	}
	made, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read the databases pgpilot made: %w", err)
	}
	for _, name := range made {
		if db := existing[name]; db != nil {
			db.Made = true
		}
	}
	return nil
}

// recordMadeDatabase adds the database just made to pgpilot's record (one statement counted
// with the CREATE DATABASE), and forgets databases dropped since.
func recordMadeDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	_, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS pgpilot;
		REVOKE ALL ON SCHEMA pgpilot FROM PUBLIC;
		CREATE TABLE IF NOT EXISTS `+madeDatabasesTable+` (oid oid PRIMARY KEY, name name NOT NULL);
		DELETE FROM `+madeDatabasesTable+` m WHERE NOT EXISTS (SELECT FROM pg_database d WHERE d.oid = m.oid);
		INSERT INTO `+madeDatabasesTable+` SELECT oid, datname FROM pg_database WHERE datname = `+quoteLiteral(name)+`
			ON CONFLICT DO NOTHING`)
	if err != nil {
		return fmt.Errorf("record database %s as made by pgpilot: %w", name, err)
	}
	return nil
}
