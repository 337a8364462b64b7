package agent_test

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

const (
	dashboardFile = "../../../config/grafana/pgpilot.json"
	rulesFile     = "../../../config/prometheus/rules.yaml"
	// instanceRules is the group of rules.yaml about the instances (the agents' metrics); the
	// operator's group reads the operator's.
	instanceRules = "pgpilot.instances"
)

// prometheusSeries are made by Prometheus itself for each target, not by an exporter.
var prometheusSeries = []string{"up"}

// The Grafana dashboard and the instance alerts name only metrics agents really export: every
// metric name in their PromQL, as Prometheus' own parser reads it, is in a live scrape of an
// archiving primary with a backup and a replication slot, and of a standby streaming from it.
func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	named := namedMetrics(t)
	if len(named) < 30 {
		t.Fatalf("the dashboard and the instance alerts name %d metrics: %v; were they read?", len(named), named)
	}

	s3 := pgtest.StartS3(t)
	repo := s3.Repository("/pgtest/default/dash")
	// Loading pg_stat_statements, as a cluster pgpilot creates does: its agent creates the
	// extension where the exporter reads the top statements.
	primary := startArchivingAgent(t, s3, "dash", agentapi.BackupConfig{Repository: &repo, Compression: "lz4"},
		func(_ *testing.T, inst *postgres.Instance) {
			inst.Settings["shared_preload_libraries"] = "pg_stat_statements"
		})
	standbyInst := pgtest.NewInstance(t, "dash-1")
	cfg := agentConfig(t, "dash-1", standbyInst, primary.Instance.Port)
	cfg.ClusterName, cfg.InitialPrimary = "dash", "dash-0"
	cfg.CustomQueriesDir = t.TempDir() // a pod always has one, spec.monitoring.customQueries or not
	// With certificates (its metrics report them), streaming from a primary without: a cluster
	// in the middle of an upgrade from 0.2.0.
	certificates := pgtest.IssueCertificates(t)
	pgtest.InstallCertificates(t, standbyInst, &cfg, certificates.Files)
	standby := pgtest.StartAgent(t, cfg, standbyInst, pgtest.NewMemoryLeases("dash-0"))
	super := pgtest.Connect(t, primary.Instance, "postgres", "super", "postgres")
	if _, err := super.Exec(t.Context(), "SELECT pg_create_physical_replication_slot('dashboard_check')"); err != nil {
		t.Fatal(err)
	}
	waitForStanza(t, primary)
	if code, body, err := postJSON(primary.URL+agentapi.PathBackups, agentapi.BackupRequest{Name: "first", Type: "full"}); err != nil || code != http.StatusAccepted {
		t.Fatalf("start backup = %d %s (%v), want 202", code, body, err)
	}
	waitForBackup(t, primary, "first")

	pgtest.Eventually(t, "every metric the dashboard and the instance alerts name, in a live scrape", func() error {
		exported := map[string]bool{}
		if err := addScraped(exported, func() (int, string, error) { return get(primary.MetricsURL, "") }); err != nil {
			return err
		}
		// The standby has certificates: its metrics answer the metrics client certificate only.
		if err := addScraped(exported, func() (int, string, error) { return standby.Scrape(certificates.MetricsTLS(t)) }); err != nil {
			return err
		}
		var missing []string
		for _, name := range named {
			if !exported[name] && !slices.Contains(prometheusSeries, name) {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("named but not exported: %v", missing)
		}
		return nil
	})
}

// addScraped adds the names of the series url serves, with a histogram's and a summary's
// _bucket, _sum and _count.
func addScraped(names map[string]bool, read func() (int, string, error)) error {
	code, body, err := read()
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("scrape: %d (%v)", code, err)
	}
	text := expfmt.NewTextParser(model.UTF8Validation)
	families, err := text.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("scrape: %w", err)
	}
	for name, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		names[name] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name+"_sum"], names[name+"_count"] = true, true
		}
	}
	return nil
}

// namedMetrics: every metric name the dashboard's panels and variables and the instance
// alerts select, sorted.
func namedMetrics(t *testing.T) []string {
	t.Helper()
	exprs := append(dashboardExprs(t), instanceAlertExprs(t)...)
	// Grafana's variables, as Grafana would fill them in before sending the query.
	fill := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m")
	p := parser.NewParser(parser.Options{})
	seen := map[string]bool{}
	for _, e := range exprs {
		expr, err := p.ParseExpr(fill.Replace(e))
		if err != nil {
			t.Fatalf("PromQL %q: %v", e, err)
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				seen[selectedName(t, vs)] = true
			}
			return nil
		})
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func selectedName(t *testing.T, vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	t.Fatalf("selector %s names no metric", vs)
	return ""
}

// labelValues is a Grafana variable's query: label_values(SELECTOR, LABEL).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)

func dashboardExprs(t *testing.T) []string {
	t.Helper()
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	readYAMLOrJSON(t, dashboardFile, &d)
	var exprs []string
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("%s: variable query %q is not label_values(SELECTOR, LABEL)", dashboardFile, s)
		}
		exprs = append(exprs, m[1])
	}
	return exprs
}

func instanceAlertExprs(t *testing.T) []string {
	t.Helper()
	var rule struct {
		Spec struct {
			Groups []struct {
				Name  string
				Rules []struct{ Alert, Expr string }
			}
		}
	}
	readYAMLOrJSON(t, rulesFile, &rule)
	var exprs []string
	for _, g := range rule.Spec.Groups {
		if g.Name == instanceRules {
			for _, r := range g.Rules {
				exprs = append(exprs, r.Expr)
			}
		}
	}
	if len(exprs) == 0 {
		t.Fatalf("%s has no rules in group %s", rulesFile, instanceRules)
	}
	return exprs
}

func readYAMLOrJSON(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
