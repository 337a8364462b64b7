package olm_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/controller"
)

// checkDescriptionClaims holds what OperatorHub shows users against what the operator does:
// each feature the description states with a figure or a protocol is read back from the code
// or the shipped files that make it so, and nothing is described as missing that exists.
func checkDescriptionClaims(t *testing.T, csv *operatorsv1alpha1.ClusterServiceVersion) {
	t.Helper()
	description := csv.Spec.Description
	if strings.Contains(description, "not implemented") {
		t.Error("the description says something is not implemented; say what pgpilot does")
	}

	// TLS 1.3 required on every network connection to PostgreSQL, replication by certificate.
	cluster := &pgv1.PostgresCluster{}
	cluster.Name = "example"
	conf, hba := pgbuilder.PostgresqlConf(cluster), pgbuilder.PgHBAConf(cluster, agentapi.TLSPolicy{Required: true})
	if strings.Contains(description, "TLS 1.3") && !strings.Contains(conf, "ssl_min_protocol_version = 'TLSv1.3'") &&
		!strings.Contains(conf, "ssl_min_protocol_version = TLSv1.3") {
		t.Errorf("the description claims TLS 1.3, the instances' postgresql.conf does not require it:\n%s", conf)
	}
	for _, line := range strings.Split(hba, "\n") {
		if strings.HasPrefix(line, "host ") && !strings.Contains(line, "127.0.0.1/32") && !strings.Contains(line, "::1/128") &&
			!strings.HasSuffix(line, " reject") {
			t.Errorf("the description claims TLS on every network connection; pg_hba.conf accepts %q", line)
		}
	}
	if strings.Contains(description, "client certificate for replication") &&
		!strings.Contains(hba, fmt.Sprintf("hostssl replication %s all cert", agentapi.DefaultReplicationUser)) {
		t.Errorf("the description claims replication by client certificate; pg_hba.conf:\n%s", hba)
	}

	// The alerts the repository ships.
	rules, err := os.ReadFile(repoPath("config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := len(regexp.MustCompile(`(?m)^\s*- alert:`).FindAll(rules, -1))
	if m := regexp.MustCompile(`PrometheusRule of (\d+) alerts`).FindStringSubmatch(description); m == nil || m[1] != fmt.Sprint(alerts) {
		t.Errorf("the description counts %v alerts; config/prometheus/rules.yaml has %d", m, alerts)
	}

	checkVersionClaims(t, csv)
}

// checkVersionClaims: the majors the description names are the ones pgpilot ships images of
// (images/postgresql/majors), each with the manager's image for it, and the default is the
// operator's.
func checkVersionClaims(t *testing.T, csv *operatorsv1alpha1.ClusterServiceVersion) {
	t.Helper()
	description := csv.Spec.Description
	images := map[string]string{}
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				images[e.Name] = e.Value
			}
		}
	}
	recipe, err := os.ReadFile(repoPath("images", "postgresql", "majors"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped []string
	for _, m := range regexp.MustCompile(`(?m)^(\d+)\s`).FindAllStringSubmatch(string(recipe), -1) {
		shipped = append(shipped, m[1])
	}
	var supported []string
	for _, major := range controller.SupportedPostgresMajors {
		supported = append(supported, fmt.Sprint(major))
		image := images[controller.PostgresImageVariable(major)]
		if image == "" || !strings.Contains(description, "`"+strings.TrimSuffix(image, fmt.Sprint(major))) {
			t.Errorf("the description does not name the manager's image of PostgreSQL %d (%q)", major, image)
		}
	}
	if strings.Join(shipped, ",") != strings.Join(supported, ",") {
		t.Errorf("images/postgresql/majors ships %v, the operator supports %v", shipped, supported)
	}
	names := strings.Join(supported[:len(supported)-1], ", ") + " and " + supported[len(supported)-1]
	if !strings.Contains(description, "PostgreSQL "+names) {
		t.Errorf("the description does not say PostgreSQL %s", names)
	}
	if !strings.Contains(description, fmt.Sprintf("%d when unset", controller.DefaultPostgresMajor)) {
		t.Errorf("the description does not name the default major %d", controller.DefaultPostgresMajor)
	}
}
