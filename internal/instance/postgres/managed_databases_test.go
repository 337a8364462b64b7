package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// Declared databases are made with their schemas and trusted extensions (owned by the database's
// owner), a second pass runs no statement, changes by hand are put back and reported as drift,
// an extension the image does not ship or that is not trusted is reported without a statement,
// and nothing holding data is dropped against the server's refusal: a schema with a table, a
// database with a client.
func TestReconcileDatabasesCreatesRepairsAndNeverDropsData(t *testing.T) {
	ctx := context.Background()
	inst := initialised(t)
	admin := startedAsSuperuser(t, inst)
	exec(t, admin, "CREATE ROLE shop_owner; CREATE ROLE etl")
	exec(t, admin, "CREATE DATABASE payroll OWNER etl") // by hand: pgpilot may not take it
	connect := superuserConnector(inst)
	shop := agentapi.ManagedDatabase{Name: "shop", Owner: "shop_owner", ConnectionLimit: 10,
		Schemas: []agentapi.ManagedSchema{{Name: "sales", Owner: "etl"}, {Name: "staging", Owner: "shop_owner"}},
		Extensions: []agentapi.ManagedExtension{{Name: "hstore", Version: "1.7"}, {Name: "citext", Schema: "staging"},
			{Name: "postgis"}, {Name: "pg_stat_statements"}}}
	request := agentapi.CatalogRequest{ForbiddenDatabases: []string{"app"}, Databases: []agentapi.ManagedDatabase{
		shop,
		{Name: "legacy", Owner: "shop_owner", Encoding: "LATIN1", Locale: "C", ConnectionLimit: -1},
		{Name: "app", Owner: "shop_owner", ConnectionLimit: -1},
		{Name: "ghost", Owner: "shop_owner", Absent: true},
		{Name: "payroll", Owner: "shop_owner", ConnectionLimit: -1},
	}}
	results := reconcileDatabases(t, admin, connect, request, nil, 10)
	expectDatabaseStates(t, results, "shop=Error legacy=Applied app=Error ghost=Absent payroll=Error")
	if !strings.Contains(results[4].Message, "owned by etl, and pgpilot did not make it") {
		t.Errorf("payroll: %q", results[4].Message)
	}
	// Asked absent, a database pgpilot did not make is kept, whatever its owner.
	request.Databases[4].Absent = true
	results = reconcileDatabases(t, admin, connect, request, nil, 0)
	expectDatabaseStates(t, results, "payroll=Kept")
	expectValue(t, admin, "SELECT count(*)::text FROM pg_database WHERE datname = 'payroll'", "1")
	request.Databases = request.Databases[:4]
	expectItems(t, results[0].Schemas, "sales=Applied staging=Applied")
	expectItems(t, results[0].Extensions, "hstore=Applied citext=Applied postgis=Error pg_stat_statements=Error")
	if !strings.Contains(results[0].Message, "does not ship extension postgis") || !strings.Contains(results[0].Extensions[3].Message, "not trusted") {
		t.Errorf("shop: %q; pg_stat_statements: %q", results[0].Message, results[0].Extensions[3].Message)
	}
	if results[0].Extensions[0].Version != "1.7" {
		t.Errorf("hstore reported at %q, want 1.7", results[0].Extensions[0].Version)
	}
	db := pgtest.Connect(t, inst, "postgres", superuserPassword, "shop")
	expectValue(t, db, "SELECT string_agg(extname || ':' || extowner::regrole::text || ':' || extnamespace::regnamespace::text, ',' ORDER BY extname) FROM pg_extension WHERE extname <> 'plpgsql'",
		"citext:shop_owner:staging,hstore:shop_owner:public")
	expectValue(t, admin, "SELECT pg_encoding_to_char(encoding) || ' ' || datcollate || ' ' || datconnlimit FROM pg_database WHERE datname = 'legacy'", "LATIN1 C -1")

	// The refused items leave the declaration: a pass then finds everything as declared.
	request.Databases[0].Extensions = request.Databases[0].Extensions[:2]
	results = reconcileDatabases(t, admin, connect, request, nil, 0)
	expectDatabaseStates(t, results, "shop=Applied legacy=Applied")
	settled := map[string]bool{"shop": true, "legacy": true}

	// By hand: another owner, another connection limit, the schema's owner and the extension's
	// schema changed; and the declaration asks for hstore 1.8.
	exec(t, admin, "ALTER DATABASE shop OWNER TO etl; ALTER DATABASE shop CONNECTION LIMIT 1")
	exec(t, db, "ALTER SCHEMA sales OWNER TO shop_owner; ALTER EXTENSION citext SET SCHEMA public")
	results = reconcileDatabases(t, admin, connect, request, settled, 4)
	expectDatabaseStates(t, results, "shop=Drift legacy=Applied")
	expectItems(t, results[0].Schemas, "sales=Drift staging=Applied")
	expectItems(t, results[0].Extensions, "hstore=Applied citext=Drift")
	if got := strings.Join(results[0].Changed, ","); got != "owner,connection limit" {
		t.Errorf("shop changed %q", got)
	}
	request.Databases[0].Extensions[0].Version = "1.8"
	results = reconcileDatabases(t, admin, connect, request, settled, 1)
	if e := results[0].Extensions[0]; e.Version != "1.8" || strings.Join(e.Changed, ",") != "version 1.7 to 1.8" {
		t.Errorf("hstore: %+v", e)
	}

	// A schema with a table and a database with a client are not dropped, and say why.
	exec(t, db, "CREATE TABLE sales.orders (id int); INSERT INTO sales.orders VALUES (1)")
	request.Databases[0].Schemas[0].Absent = true
	request.Databases[1].Absent = true
	legacy := pgtest.Connect(t, inst, "postgres", superuserPassword, "legacy")
	results = reconcileDatabases(t, admin, connect, request, nil, 2)
	expectDatabaseStates(t, results, "shop=Error legacy=Error")
	expectItems(t, results[0].Schemas, "sales=Error staging=Applied")
	if !strings.Contains(results[0].Schemas[0].Message, "depend") || !strings.Contains(results[1].Message, "other users") {
		t.Errorf("sales: %q; legacy: %q", results[0].Schemas[0].Message, results[1].Message)
	}
	expectValue(t, db, "SELECT count(*)::text FROM sales.orders", "1")
	_ = legacy.Close(ctx)
	results = reconcileDatabases(t, admin, connect, request, nil, 2)
	expectDatabaseStates(t, results, "legacy=Absent")
}

// An agent stopped between a CREATE DATABASE and the database's record (CREATE DATABASE takes no
// transaction) left a database it made that its record does not hold: the next pass records it,
// so that the database is pgpilot's to drop when its Database asks, not kept against its
// reclaimPolicy as one made by hand. A name noted for a database never made is forgotten.
func TestADatabaseMadeByAnAgentStoppedBeforeItsRecordIsStillPgpilots(t *testing.T) {
	inst := initialised(t)
	admin := startedAsSuperuser(t, inst)
	exec(t, admin, "CREATE ROLE shop_owner")
	connect := superuserConnector(inst)
	first := agentapi.ManagedDatabase{Name: "first", Owner: "shop_owner", ConnectionLimit: -1}
	reconcileDatabases(t, admin, connect, agentapi.CatalogRequest{Databases: []agentapi.ManagedDatabase{first}}, nil, 3)

	// What an agent killed after its CREATE DATABASE of half leaves, and one killed before its
	// CREATE DATABASE of never.
	exec(t, admin, "INSERT INTO pgpilot.databases_being_made VALUES ('half'), ('never')")
	exec(t, admin, "CREATE DATABASE half OWNER shop_owner CONNECTION LIMIT -1")
	half := agentapi.ManagedDatabase{Name: "half", Owner: "shop_owner", ConnectionLimit: -1}
	second := agentapi.ManagedDatabase{Name: "second", Owner: "shop_owner", ConnectionLimit: -1}
	request := agentapi.CatalogRequest{Databases: []agentapi.ManagedDatabase{first, half, second}}
	results := reconcileDatabases(t, admin, connect, request, nil, 1+3)
	expectDatabaseStates(t, results, "first=Applied half=Applied second=Applied")
	expectValue(t, admin, "SELECT string_agg(name, ',' ORDER BY name) FROM pgpilot.databases", "first,half,second")
	expectValue(t, admin, "SELECT count(*)::text FROM pgpilot.databases_being_made", "0")
	reconcileDatabases(t, admin, connect, request, nil, 0)

	request.Databases[1].Absent = true
	results = reconcileDatabases(t, admin, connect, request, nil, 1)
	expectDatabaseStates(t, results, "half=Absent")
	expectValue(t, admin, "SELECT count(*)::text FROM pg_database WHERE datname = 'half'", "0")
}

func reconcileDatabases(t *testing.T, conn *pgx.Conn, connect postgres.Connector, request agentapi.CatalogRequest, settled map[string]bool, wantStatements int) []agentapi.DatabaseResult {
	t.Helper()
	results, statements, err := postgres.ReconcileDatabases(context.Background(), conn, connect, request, settled, nil)
	if err != nil {
		t.Fatal(err)
	}
	if statements != wantStatements {
		t.Errorf("%d statements, want %d: %+v", statements, wantStatements, results)
	}
	return results
}

// expectDatabaseStates checks "name=State …" against the results that name.
func expectDatabaseStates(t *testing.T, results []agentapi.DatabaseResult, want string) {
	t.Helper()
	items := make([]agentapi.ItemResult, len(results))
	for i, r := range results {
		items[i] = agentapi.ItemResult{Name: r.Name, State: r.State, Message: r.Message, Changed: r.Changed}
	}
	expectItems(t, items, want)
}

func expectItems(t *testing.T, results []agentapi.ItemResult, want string) {
	t.Helper()
	states := map[string]string{}
	for _, r := range results {
		states[r.Name] = r.State
	}
	for _, pair := range strings.Fields(want) {
		name, state, _ := strings.Cut(pair, "=")
		if states[name] != state {
			t.Errorf("%s: %s, want %s (%+v)", name, states[name], state, results)
		}
	}
}

func expectValue(t *testing.T, conn *pgx.Conn, query, want string) {
	t.Helper()
	var got string
	if err := conn.QueryRow(context.Background(), query).Scan(&got); err != nil || got != want {
		t.Errorf("%s: %q (%v), want %q", query, got, err, want)
	}
}
