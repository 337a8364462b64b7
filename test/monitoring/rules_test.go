// Package monitoring tests pgpilot's alert rules (config/prometheus/rules.yaml) with promtool,
// from Debian's prometheus package (hack/host-packages.sh installs it): the rules must load,
// each alert must fire at its threshold and not below, and resolve (alerts_test.yaml), and
// each must carry a severity, a summary, a description and a runbook that exists.
package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const runbookBase = "https://github.com/pgpilot/pgpilot-operator/blob/main/docs/runbooks/"

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

// rulesFile writes the PrometheusRule's groups as a Prometheus rules file next to the promtool
// tests, in a temporary directory, and returns that directory and the alerts.
func rulesFile(t *testing.T) (string, []rule) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var object struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta `json:"metadata"`
		Spec            ruleGroups        `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(data, &object); err != nil {
		t.Fatal(err)
	}
	if object.Kind != "PrometheusRule" {
		t.Fatalf("config/prometheus/rules.yaml is a %q, want a PrometheusRule", object.Kind)
	}
	dir := t.TempDir()
	groups, err := yaml.Marshal(object.Spec)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"rules.yaml": groups, "alerts_test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var alerts []rule
	for _, g := range object.Spec.Groups {
		alerts = append(alerts, g.Rules...)
	}
	return dir, alerts
}

func promtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	binary, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (hack/host-packages.sh installs Debian's prometheus package): %v", err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

func TestRulesLoad(t *testing.T) {
	dir, _ := rulesFile(t)
	promtool(t, dir, "check", "rules", "rules.yaml")
}

func TestAlertsFireAtTheirThresholdsAndResolve(t *testing.T) {
	dir, _ := rulesFile(t)
	promtool(t, dir, "test", "rules", "alerts_test.yaml")
}

// Every alert says how bad it is and what happened, and links a runbook that exists; every
// alert has a promtool test that sees it fire and sees it silent.
func TestAlertsHaveRunbooksAndTests(t *testing.T) {
	_, alerts := rulesFile(t)
	tested := alertTests(t)
	if len(alerts) < 13 {
		t.Errorf("%d alerts, want the 13 or more of the issue", len(alerts))
	}
	for _, a := range alerts {
		if a.Alert == "" {
			t.Errorf("a recording rule in the alerts file: %s", a.Expr)
			continue
		}
		if s := a.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", a.Alert, s)
		}
		for _, key := range []string{"summary", "description"} {
			if a.Annotations[key] == "" {
				t.Errorf("%s: no %s", a.Alert, key)
			}
		}
		if url := a.Annotations["runbook_url"]; url != runbookBase+a.Alert+".md" {
			t.Errorf("%s: runbook_url %q, want %s%s.md", a.Alert, url, runbookBase, a.Alert)
		}
		runbook, err := os.ReadFile(filepath.Join("..", "..", "docs", "runbooks", a.Alert+".md"))
		if err != nil {
			t.Errorf("%s: %v", a.Alert, err)
		}
		for _, section := range []string{"## Meaning", "## Impact", "## Diagnosis", "## Mitigation"} {
			if err == nil && !strings.Contains(string(runbook), section) {
				t.Errorf("docs/runbooks/%s.md has no %q section", a.Alert, section)
			}
		}
		if c := tested[a.Alert]; c.firing == 0 || c.silent == 0 {
			t.Errorf("%s: %d firing and %d silent checks in alerts_test.yaml, want both", a.Alert, c.firing, c.silent)
		}
	}
}

type checks struct{ firing, silent int }

// alertTests counts, per alert, the promtool checks that expect it firing and silent.
func alertTests(t *testing.T) map[string]checks {
	t.Helper()
	data, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	counts := map[string]checks{}
	for _, test := range file.Tests {
		for _, check := range test.AlertRuleTest {
			c := counts[check.Alertname]
			if len(check.ExpAlerts) > 0 {
				c.firing++
			} else {
				c.silent++
			}
			counts[check.Alertname] = c
		}
	}
	return counts
}
