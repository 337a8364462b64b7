package agent_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// project lays files out as the kubelet projects a ConfigMap: the content in a timestamped
// directory, "..data" pointing to it (swapped in one rename), and a link per key.
func project(t *testing.T, dir string, version int, files map[string]string) {
	t.Helper()
	data := fmt.Sprintf("..v%d", version)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(dir, data), 0o755))
	for name, content := range files {
		must(os.WriteFile(filepath.Join(dir, data, name), []byte(content), 0o644))
		if _, err := os.Lstat(filepath.Join(dir, name)); os.IsNotExist(err) {
			must(os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
		}
	}
	must(os.Symlink(data, filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
}

const (
	goodQueries = `
app_tables:
  query: "SELECT count(*) AS count FROM pg_tables WHERE schemaname = 'public'"
  metrics:
    - count: {usage: GAUGE, description: "Tables in public."}
`
	failingQuery = goodQueries + `
app_broken:
  query: "SELECT count(*) AS n FROM no_such_table"
  metrics:
    - n: {usage: GAUGE}
`
)

// The agent reads the projected query files again when they change, keeps the queries it
// had when a change does not parse, and reports both problems to the operator and to Prometheus.
func TestAgentReloadsCustomQueries(t *testing.T) {
	dir := t.TempDir()
	project(t, dir, 1, map[string]string{"configmap.queries.queries.yaml": goodQueries})
	inst := pgtest.NewInstance(t, "db-0")
	cfg := agentConfig(t, "db-0", inst, inst.Port)
	cfg.CustomQueriesDir = dir
	primary := pgtest.StartAgent(t, cfg, inst, pgtest.NewMemoryLeases("db-0"))
	scrape := func(want ...string) error {
		code, body, err := get(primary.MetricsURL, "")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("metrics: %d (%v)", code, err)
		}
		for _, line := range want {
			if !strings.Contains(body, "\n"+line) {
				return fmt.Errorf("metrics have no %q", line)
			}
		}
		return nil
	}

	pgtest.Eventually(t, "the custom query's metric", func() error {
		return scrape("app_tables_count 0", "pgpilot_custom_queries 1", "pgpilot_custom_queries_load_error 0",
			`pgpilot_query_error{query="app_tables"} 0`)
	})

	project(t, dir, 2, map[string]string{"configmap.queries.queries.yaml": "app_tables:\n  query: [not, a, string]\n"})
	pgtest.Eventually(t, "the load error, with the queries loaded before still running", func() error {
		if err := scrape("app_tables_count 0", "pgpilot_custom_queries 1", "pgpilot_custom_queries_load_error 1"); err != nil {
			return err
		}
		s, err := status(primary)
		if err != nil {
			return err
		}
		if s.Metrics == nil || !strings.Contains(s.Metrics.LoadError, "configmap.queries.queries.yaml") {
			return fmt.Errorf("status.metrics = %+v, want the file's load error", s.Metrics)
		}
		return nil
	})

	project(t, dir, 3, map[string]string{"configmap.queries.queries.yaml": failingQuery})
	pgtest.Eventually(t, "the failing query, beside the working one", func() error {
		if err := scrape("app_tables_count 0", "pgpilot_custom_queries 2", "pgpilot_custom_queries_load_error 0",
			`pgpilot_query_error{query="app_broken"} 1`, "pgpilot_up 1"); err != nil {
			return err
		}
		s, err := status(primary)
		if err != nil {
			return err
		}
		if s.Metrics == nil || s.Metrics.LoadError != "" || !slices.Equal(s.Metrics.FailingQueries, []string{"app_broken"}) {
			return fmt.Errorf("status.metrics = %+v, want app_broken failing and no load error", s.Metrics)
		}
		return nil
	})
}
