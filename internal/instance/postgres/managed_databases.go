package postgres

import (
	"context"
	"fmt"
	"slices"

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
	plans := make([]databasePlan, len(req.Databases))
	for i, want := range req.Databases {
		plans[i] = planDatabase(want, existing[want.Name], roles, req.ForbiddenDatabases)
	}
	// Made once here: the databases are made at once, and two sessions creating one table "if
	// not exists" at the same moment may both try (one fails on a unique index).
	if slices.ContainsFunc(plans, func(p databasePlan) bool { return p.create != "" }) {
		if err := ensureMadeDatabasesTable(ctx, conn); err != nil {
			return nil, 0, err
		}
	}
	outcomes := make([]databaseOutcome, len(req.Databases))
	eachManagedDatabase(conn, connect, len(req.Databases), func(admin *adminConn, i int) {
		want := req.Databases[i]
		outcomes[i] = reconcileDatabase(ctx, admin, connect, want, plans[i], existing[want.Name], roles, quiet)
	})
	results := make([]agentapi.DatabaseResult, len(req.Databases))
	statements := 0
	for i, want := range req.Databases {
		result := outcomes[i].result
		if outcomes[i].readItems {
			quiet.note(want, existing[want.Name], result, outcomes[i].statements)
		}
		if settled[want.Name] && result.State == agentapi.RoleApplied && changedAnything(result) {
			result.State = agentapi.RoleDrift
		}
		results[i] = result
		statements += outcomes[i].statements
	}
	return results, statements, nil
}

// databaseOutcome is what reconcileDatabase did: the result, how many statements ran, and
// whether the schemas and extensions were read (not taken from quiet).
type databaseOutcome struct {
	result     agentapi.DatabaseResult
	statements int
	readItems  bool
}

// reconcileDatabase applies one database's plan over admin's connection, then its schemas and
// extensions over one to the database, unless quiet holds their results.
func reconcileDatabase(ctx context.Context, admin *adminConn, connect Connector, want agentapi.ManagedDatabase, plan databasePlan,
	existing *existingDatabase, roles map[string]bool, quiet QuietDatabases) databaseOutcome {
	var conn *pgx.Conn
	if plan.runsStatements() {
		var err error
		if conn, err = admin.get(ctx); err != nil {
			return databaseOutcome{result: agentapi.DatabaseResult{Name: want.Name, State: agentapi.RoleError, Message: err.Error()}}
		}
	}
	result, n := applyDatabasePlan(ctx, conn, want.Name, plan)
	outcome := databaseOutcome{result: result, statements: n}
	if result.State == agentapi.RoleError || want.Absent || quiet.reuse(want, existing, &outcome.result) {
		return outcome
	}
	m, err := reconcileDatabaseItems(ctx, connect, want, roles, &outcome.result)
	outcome.statements += m
	outcome.readItems = true
	if err != nil {
		outcome.result.State, outcome.result.Message = agentapi.RoleError, err.Error()
	}
	return outcome
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
		n, err = 3, makeDatabase(ctx, conn, name, plan.create)
	case plan.drop != "":
		n, err = 1, execOne(ctx, conn, plan.drop)
	case len(plan.alter) > 0:
		n, err = len(plan.alter), execAs(ctx, conn, "", plan.alter)
	}
	if err == nil && plan.record {
		n, err = n+1, recordMadeDatabase(ctx, conn, name)
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
