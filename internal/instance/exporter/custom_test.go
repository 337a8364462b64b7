package exporter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/exporter"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// A file as postgres_exporter's users write them, with CloudNativePG's target_databases.
const queryFile = `
pg_postmaster:
  query: "SELECT extract(epoch from pg_postmaster_start_time()) AS start_time_seconds"
  master: true
  metrics:
    - start_time_seconds:
        usage: "GAUGE"
        description: "Time at which postmaster started"
tables:
  query: "SELECT schemaname, count(*) AS count, 'x' AS ignored FROM pg_tables WHERE schemaname = 'public' GROUP BY schemaname"
  target_databases: ["*"]
  metrics:
    - schemaname:
        usage: "LABEL"
    - count:
        usage: "GAUGE"
        description: "Tables in the schema."
    - ignored:
        usage: "DISCARD"
`

func TestParseQueries(t *testing.T) {
	queries, err := exporter.ParseQueries([]byte(queryFile))
	if err != nil {
		t.Fatal(err)
	}
	want := []exporter.Query{{
		Name: "pg_postmaster", Prefix: "pg_postmaster", PrimaryOnly: true,
		SQL:     "SELECT extract(epoch from pg_postmaster_start_time()) AS start_time_seconds",
		Columns: []exporter.Column{{Name: "start_time_seconds", Usage: exporter.Gauge, Description: "Time at which postmaster started"}},
	}, {
		Name: "tables", Prefix: "tables", Databases: []string{"*"},
		SQL: "SELECT schemaname, count(*) AS count, 'x' AS ignored FROM pg_tables WHERE schemaname = 'public' GROUP BY schemaname",
		Columns: []exporter.Column{{Name: "schemaname", Usage: exporter.Label},
			{Name: "count", Usage: exporter.Gauge, Description: "Tables in the schema."}},
	}}
	if diff := cmp.Diff(want, queries); diff != "" {
		t.Errorf("queries (-want +got):\n%s", diff)
	}

	for name, tc := range map[string]struct{ file, wantError string }{
		"an option pgpilot does not implement": {"q:\n  query: SELECT 1 AS one\n  cache_seconds: 30\n  metrics:\n    - one: {usage: GAUGE}\n", `unknown field "cache_seconds"`},
		"an unknown usage":                     {"q:\n  query: SELECT 1 AS one\n  metrics:\n    - one: {usage: HISTOGRAM}\n", `q: column one: usage "HISTOGRAM"`},
		"no query":                             {"q:\n  metrics:\n    - one: {usage: GAUGE}\n", "q: no query"},
		"only labels":                          {"q:\n  query: SELECT 'a' AS a\n  metrics:\n    - a: {usage: LABEL}\n", "q: no GAUGE or COUNTER column"},
		"pgpilot's prefix":                     {"pgpilot_x:\n  query: SELECT 1 AS one\n  metrics:\n    - one: {usage: GAUGE}\n", "pgpilot_x: the prefix is pgpilot's own"},
		"a built-in query's name":              {"replication:\n  query: SELECT 1 AS one\n  metrics:\n    - one: {usage: GAUGE}\n", "replication: the prefix is pgpilot's own"},
		"an invalid metric name":               {"q-1:\n  query: SELECT 1 AS one\n  metrics:\n    - one: {usage: GAUGE}\n", `"q-1_one" is not a valid metric name`},
		"datname beside target_databases":      {"q:\n  query: SELECT current_database() AS datname, 1 AS one\n  target_databases: [app]\n  metrics:\n    - datname: {usage: LABEL}\n    - one: {usage: GAUGE}\n", "pgpilot labels each series with its database as datname"},
		"two columns in one item":              {"q:\n  query: SELECT 1 AS one, 2 AS two\n  metrics:\n    - {one: {usage: GAUGE}, two: {usage: GAUGE}}\n", "names 2"},
		"not YAML of queries":                  {"- just\n- a list\n", "cannot unmarshal"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := exporter.ParseQueries([]byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.wantError) {
				t.Errorf("error = %v, want one containing %q", err, tc.wantError)
			}
		})
	}
}

// Real PostgreSQL: a primary-only query runs on the primary and is skipped (not failed) on the
// standby; a query for every database reports each one's series, labelled datname, over
// connections that do not outlive the scrape (DROP DATABASE still works).
func TestExporterQueryFileOnAPrimaryAndAStandby(t *testing.T) {
	primary, standby := startPair(t)
	queries, err := exporter.ParseQueries([]byte(queryFile))
	if err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Connect(t, primary, agentapi.Superuser, superuserPassword, "postgres")
	app := pgtest.Connect(t, primary, agentapi.Superuser, superuserPassword, "app")
	for _, sql := range []string{"CREATE TABLE one (i int)", "CREATE TABLE two (i int)"} {
		if _, err := app.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Exec(context.Background(), "CREATE DATABASE scratch"); err != nil {
		t.Fatal(err)
	}
	p, s := newExporter(t, primary), newExporter(t, standby)
	p.SetExtraQueries(queries)
	s.SetExtraQueries(queries)

	onPrimary := scrape(t, p)
	onPrimary.expectNoQueryErrors(t)
	onPrimary.expect(t, "pg_postmaster_start_time_seconds", "", atLeast(1))
	onPrimary.expect(t, "tables_count", "datname=app,schemaname=public", eq(2))
	onPrimary.expectAbsent(t, "tables_ignored")
	if _, err := admin.Exec(context.Background(), "DROP DATABASE scratch"); err != nil {
		t.Fatalf("DROP DATABASE after a scrape: %v", err)
	}

	pgtest.Eventually(t, "the standby replays the tables", func() error {
		if v := scrape(t, s).value("tables_count", "datname=app,schemaname=public"); v != 2 {
			return fmt.Errorf("tables_count %v", v)
		}
		return nil
	})
	onStandby := scrape(t, s)
	onStandby.expectNoQueryErrors(t)
	onStandby.expectAbsent(t, "pg_postmaster_start_time_seconds")
	if _, ran := onStandby["pgpilot_query_error"]["query=pg_postmaster"]; ran {
		t.Error("the primary-only query ran on the standby")
	}
	if failing := p.Failing(); len(failing) != 0 {
		t.Errorf("failing queries = %v, want none", failing)
	}
}
