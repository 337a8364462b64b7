package exporter_test

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	gocmp "github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/exporter"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

const (
	superuserPassword = "exporter-test"
	monitorPassword   = "monitor-test"
	replicationPass   = "replication-test"
)

// Real PostgreSQL: a primary and a standby streaming from it, each scraped by its own exporter
// as a pg_monitor role. Every built-in metric is there with a plausible value, on the role
// that has it.
func TestExporterOnAPrimaryAndAStandby(t *testing.T) {
	primary, standby := startPair(t)
	p := scrape(t, newExporter(t, primary))
	s := scrape(t, newExporter(t, standby))

	common := []expectation{
		{"pgpilot_up", "", eq(1)},
		{"pgpilot_timeline", "", eq(1)},
		{"pgpilot_max_connections", "", atLeast(10)},
		{"pgpilot_settings_pending_restart", "", eq(0)},
		{"pgpilot_uptime_seconds", "", atLeast(0)},
		{"pgpilot_longest_transaction_seconds", "", atLeast(0)},
		{"pgpilot_database_size_bytes", "datname=postgres", atLeast(1 << 20)},
		{"pgpilot_database_xid_age", "datname=postgres", atLeast(1)},
		{"pgpilot_database_commits_total", "datname=postgres", atLeast(1)},
		{"pgpilot_database_deadlocks_total", "datname=postgres", eq(0)},
		{"pgpilot_database_conflicts_total", "datname=postgres", eq(0)},
		{"pgpilot_database_temp_bytes_total", "datname=postgres", atLeast(0)},
		{"pgpilot_backends", "state=active", atLeast(1)}, // the scrape itself
		{"pgpilot_backends", "state=idle in transaction", atLeast(0)},
		{"pgpilot_backends_waiting_on_locks", "state=active", eq(0)},
		{"pgpilot_checkpoints_timed_total", "", atLeast(0)},
		{"pgpilot_checkpoints_requested_total", "", atLeast(0)},
		{"pgpilot_archive_enabled", "", eq(0)},
		{"pgpilot_archive_failing", "", eq(0)},
		{"pgpilot_wal_directory_bytes", "", atLeast(16 << 20)},
	}
	for _, m := range []metrics{p, s} {
		m.expectAll(t, common)
		major := pgtest.Major(t)
		m.expectOne(t, "pgpilot_postgres_version_num", fmt.Sprintf("version=%d.", major), atLeast(float64(major*10000)))
		m.expectNoQueryErrors(t)
	}
	p.expectAll(t, []expectation{
		{"pgpilot_is_primary", "", eq(1)},
		{"pgpilot_streaming_replicas", "", eq(1)},
		{"pgpilot_replication_streaming", "application_name=db-1", eq(1)},
		{"pgpilot_replication_lag_bytes", "application_name=db-1", atLeast(0)},
		{"pgpilot_replication_lag_seconds", "application_name=db-1", atLeast(0)},
		{"pgpilot_replication_slot_active", "slot_name=db_1", eq(1)},
		{"pgpilot_replication_slot_retained_bytes", "slot_name=db_1", atLeast(0)},
	})
	p.expectAbsent(t, "pgpilot_wal_receiver_up")
	s.expectAll(t, []expectation{
		{"pgpilot_is_primary", "", eq(0)},
		{"pgpilot_wal_receiver_up", "", eq(1)},
		{"pgpilot_replay_pending_bytes", "", atLeast(0)},
	})
	s.expectAbsent(t, "pgpilot_streaming_replicas")
	s.expectAbsent(t, "pgpilot_replication_lag_bytes")
}

// A user's query that fails, or runs past the statement deadline, is reported by
// pgpilot_query_error and leaves every other metric in place; a good one adds its series.
func TestExporterCustomQueries(t *testing.T) {
	inst := startPrimary(t)
	e := newExporter(t, inst)
	// Each statement gets 2 s (half the scrape): the 5-s sleep is cut, and the rest of the
	// scrape has room on a loaded CI machine (a 2-s scrape ran out there in one run).
	e.Timeout = 4 * time.Second
	logged := &[]string{}
	e.Log = funcr.New(func(prefix, args string) { *logged = append(*logged, args) }, funcr.Options{})
	e.SetExtraQueries([]exporter.Query{
		{Name: "tables", Prefix: "custom", SQL: "SELECT 'pg_class' AS relation, count(*) AS rows FROM pg_class",
			Columns: []exporter.Column{{Name: "relation", Usage: exporter.Label}, {Name: "rows", Usage: exporter.Gauge, Description: "Rows."}}},
		{Name: "broken", Prefix: "custom", SQL: "SELECT count(*) AS n FROM no_such_table",
			Columns: []exporter.Column{{Name: "n", Usage: exporter.Gauge}}},
		{Name: "slow", Prefix: "custom", SQL: "SELECT 1 AS slept FROM pg_sleep(5)",
			Columns: []exporter.Column{{Name: "slept", Usage: exporter.Gauge}}},
		{Name: "wrong_column", Prefix: "custom", SQL: "SELECT 1 AS one",
			Columns: []exporter.Column{{Name: "two", Usage: exporter.Gauge}}},
	})
	start := time.Now()
	m := scrape(t, e)
	if took := time.Since(start); took > 4800*time.Millisecond {
		t.Errorf("the scrape took %s: the slow query was not cut at the statement deadline", took)
	}
	m.expect(t, "pgpilot_up", "", eq(1))
	m.expect(t, "custom_rows", "relation=pg_class", atLeast(100))
	m.expect(t, "pgpilot_query_error", "query=tables", eq(0))
	m.expect(t, "pgpilot_query_error", "query=broken", eq(1))
	m.expect(t, "pgpilot_query_error", "query=slow", eq(1))
	m.expect(t, "pgpilot_query_error", "query=wrong_column", eq(1))
	m.expect(t, "pgpilot_query_error", "query=databases", eq(0))
	m.expect(t, "pgpilot_database_size_bytes", "datname=postgres", atLeast(1<<20))
	m.expectAbsent(t, "custom_n")
	m.expectAbsent(t, "custom_slept")
	if diff := gocmp.Diff([]string{"broken", "slow", "wrong_column"}, e.Failing()); diff != "" {
		t.Errorf("failing queries (-want +got):\n%s", diff)
	}
	// The connection survived the cancelled statement: the next scrape works on it.
	scrape(t, e).expect(t, "pgpilot_up", "", eq(1))
	if len(*logged) != 3 {
		t.Errorf("logged %d times in two scrapes, want once per failing query:\n%s", len(*logged), strings.Join(*logged, "\n"))
	}
}

// Without a server the exporter says so (pgpilot_up 0) instead of failing the scrape, and
// reconnects once the server is back.
func TestExporterReportsAServerItCannotReach(t *testing.T) {
	inst := startPrimary(t)
	e := newExporter(t, inst)
	scrape(t, e).expect(t, "pgpilot_up", "", eq(1))
	if err := inst.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	scrape(t, e).expect(t, "pgpilot_up", "", eq(0))
	if err := inst.Start(); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "the exporter reconnects", func() error {
		if v := scrape(t, e).value("pgpilot_up", ""); v != 1 {
			return fmt.Errorf("pgpilot_up %v", v)
		}
		return nil
	})
}

// BenchmarkScrape is the cost of one scrape of the built-in queries on an idle primary.
func BenchmarkScrape(b *testing.B) {
	inst := startPrimary(b)
	e := newExporter(b, inst)
	registry := prometheus.NewRegistry()
	registry.MustRegister(e)
	cpu := pgtest.ProcessCPU(b)
	for b.Loop() {
		if _, err := registry.Gather(); err != nil {
			b.Fatal(err)
		}
	}
	// The agent's own CPU (PostgreSQL's is its children's, not counted), GC included.
	b.ReportMetric(float64(pgtest.ProcessCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
}

// startPrimary starts a primary with pgpilot's roles and a monitoring role; prepare, when given,
// changes the instance before it starts.
func startPrimary(t testing.TB, prepare ...func(*postgres.Instance)) *postgres.Instance {
	t.Helper()
	ctx := context.Background()
	inst := pgtest.NewInstance(t, "db-0")
	for _, p := range prepare {
		p(inst)
	}
	if err := inst.InitDB(ctx, superuserPassword); err != nil {
		t.Fatal(err)
	}
	if err := inst.Start(); err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Connect(t, inst, agentapi.Superuser, superuserPassword, "postgres")
	if err := postgres.EnsureRoles(ctx, admin, postgres.Roles{Superuser: agentapi.Superuser, SuperuserPassword: superuserPassword,
		ReplicationUser: agentapi.DefaultReplicationUser, ReplicationPassword: replicationPass,
		AppOwner: "app", AppPassword: "app-test", AppDatabase: "app"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE ROLE monitor LOGIN PASSWORD '"+monitorPassword+"' IN ROLE pg_monitor"); err != nil {
		t.Fatal(err)
	}
	return inst
}

func startPair(t *testing.T) (primary, standby *postgres.Instance) {
	t.Helper()
	primary = startPrimary(t)
	standby = pgtest.NewInstance(t, "db-1")
	conninfo := postgres.ConnInfo("host", "127.0.0.1", "port", strconv.Itoa(primary.Port), "user", agentapi.DefaultReplicationUser,
		"password", replicationPass, "application_name", "db-1")
	if err := standby.Clone(context.Background(), conninfo, "", "db_1"); err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(); err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Connect(t, primary, agentapi.Superuser, superuserPassword, "postgres")
	pgtest.Eventually(t, "the standby streams", func() error {
		var streaming bool
		err := admin.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE state = 'streaming')").Scan(&streaming)
		if err == nil && !streaming {
			err = fmt.Errorf("not streaming yet")
		}
		return err
	})
	return primary, standby
}

func newExporter(t testing.TB, inst *postgres.Instance) *exporter.Exporter {
	e := exporter.New(func(ctx context.Context, database string) (*pgx.Conn, error) {
		return postgres.Connect(ctx, inst.Port, "monitor", monitorPassword, cmp.Or(database, "postgres"))
	}, logr.Discard())
	t.Cleanup(e.Close)
	return e
}

// metrics are a scrape's series: name → "label=value,..." → value.
type metrics map[string]map[string]float64

func scrape(t testing.TB, e *exporter.Exporter) metrics {
	t.Helper()
	registry := prometheus.NewPedanticRegistry()
	registry.MustRegister(e)
	families, err := registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	m := metrics{}
	for _, f := range families {
		m[f.GetName()] = map[string]float64{}
		for _, s := range f.GetMetric() {
			m[f.GetName()][labelsOf(s)] = valueOf(s)
		}
	}
	return m
}

func labelsOf(s *dto.Metric) string {
	var parts []string
	for _, l := range s.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func valueOf(s *dto.Metric) float64 {
	switch {
	case s.Gauge != nil:
		return s.GetGauge().GetValue()
	case s.Counter != nil:
		return s.GetCounter().GetValue()
	}
	return s.GetUntyped().GetValue()
}

// expectation is a series (name and its labels, "" for none) and the check of its value.
type expectation struct {
	name, labels string
	check        check
}

func (m metrics) expectAll(t testing.TB, expectations []expectation) {
	t.Helper()
	for _, e := range expectations {
		m.expect(t, e.name, e.labels, e.check)
	}
}

type check struct {
	ok   func(float64) bool
	want string
}

func eq(v float64) check {
	return check{func(x float64) bool { return x == v }, fmt.Sprintf("= %v", v)}
}
func atLeast(v float64) check {
	return check{func(x float64) bool { return x >= v }, fmt.Sprintf(">= %v", v)}
}

func (m metrics) value(name, labels string) float64 { return m[name][labels] }

func (m metrics) expect(t testing.TB, name, labels string, c check) {
	t.Helper()
	v, ok := m[name][labels]
	if !ok {
		t.Errorf("%s{%s} missing; series of %s: %v", name, labels, name, m[name])
		return
	}
	if !c.ok(v) {
		t.Errorf("%s{%s} = %v, want %s", name, labels, v, c.want)
	}
}

// expectOne: name has one series, whose labels start with labelsPrefix.
func (m metrics) expectOne(t testing.TB, name, labelsPrefix string, c check) {
	t.Helper()
	if len(m[name]) != 1 {
		t.Errorf("%s: %v, want one series", name, m[name])
	}
	for labels := range m[name] {
		if !strings.HasPrefix(labels, labelsPrefix) {
			t.Errorf("%s{%s}, want labels starting %s", name, labels, labelsPrefix)
		}
		m.expect(t, name, labels, c)
	}
}

func (m metrics) expectAbsent(t testing.TB, name string) {
	t.Helper()
	if series, ok := m[name]; ok {
		t.Errorf("%s present: %v", name, series)
	}
}

func (m metrics) expectNoQueryErrors(t testing.TB) {
	t.Helper()
	for labels, v := range m["pgpilot_query_error"] {
		if v != 0 {
			t.Errorf("pgpilot_query_error{%s} = %v", labels, v)
		}
	}
	if len(m["pgpilot_query_error"]) < 10 {
		t.Errorf("pgpilot_query_error for %d queries, want one per built-in query", len(m["pgpilot_query_error"]))
	}
}

// A server that loads pg_stat_statements exports its top statements by time, no more than
// TopStatements whatever the workload, with their normalized text; one that does not exports
// none and reports no failing query.
func TestExporterTopStatements(t *testing.T) {
	ctx := context.Background()
	plain := startPrimary(t)
	m := scrape(t, newExporter(t, plain))
	m.expectNoQueryErrors(t)
	m.expectAbsent(t, "pgpilot_statement_calls_total")

	inst := startPrimary(t, func(inst *postgres.Instance) { inst.Settings["shared_preload_libraries"] = "pg_stat_statements" })
	admin := pgtest.Connect(t, inst, agentapi.Superuser, superuserPassword, "postgres")
	if _, err := admin.Exec(ctx, "CREATE TABLE t (id int)"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 * exporter.TopStatements {
		// Distinct statements: constants alone would be normalized into one.
		if _, err := admin.Exec(ctx, fmt.Sprintf("SELECT count(*) FROM t AS t%d WHERE id > $1", i), i); err != nil {
			t.Fatal(err)
		}
	}
	m = scrape(t, newExporter(t, inst))
	m.expectNoQueryErrors(t)
	if n := len(m["pgpilot_statement_calls_total"]); n != exporter.TopStatements {
		t.Errorf("%d statements exported, want the top %d: %v", n, exporter.TopStatements, m["pgpilot_statement_calls_total"])
	}
	for labels := range m["pgpilot_statement_seconds_total"] {
		query := labels[strings.Index(labels, "query=")+len("query="):]
		query = query[:strings.Index(query, ",queryid=")]
		if !strings.Contains(labels, "datname=") || !strings.Contains(labels, "user=postgres") || query == "" ||
			len(query) > exporter.TopStatementTextLength || strings.Contains(query, "\n") {
			t.Errorf("series {%s}, want the database, the role and the statement's text on one line, shortened", labels)
		}
	}
}
