package v1alpha1_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// The CRD's rules on spec.postgresql.parameters are exactly one per managed parameter: a name
// added to the list without its marker, or a marker without the name, fails here.
func TestCRDRejectsExactlyTheManagedParameters(t *testing.T) {
	crd := loadCRD(t)
	for _, version := range crd.Spec.Versions {
		parameters := version.Schema.OpenAPIV3Schema.Properties["spec"].Properties["postgresql"].Properties["parameters"]
		rules := map[string]string{}
		for _, v := range parameters.XValidations {
			rules[v.Rule] = v.Message
		}
		for _, name := range pgv1.ManagedParameters {
			rule := fmt.Sprintf("!('%s' in self)", name)
			message, ok := rules[rule]
			if !ok {
				t.Errorf("%s: no rule %s", version.Name, rule)
				continue
			}
			if want := pgv1.ManagedParameterMessage(name); message != want {
				t.Errorf("%s: rule %s says %q, want %q", version.Name, rule, message, want)
			}
			delete(rules, rule)
		}
		for rule := range rules {
			t.Errorf("%s: rule %s on parameters is not for a managed parameter (add it to ManagedParameters)", version.Name, rule)
		}
		// PostgreSQL compares setting names case-insensitively, so one rule on postgresql
		// rejects the other spellings (WAL_LEVEL) of the very same list.
		var otherCase string
		for _, v := range version.Schema.OpenAPIV3Schema.Properties["spec"].Properties["postgresql"].XValidations {
			if strings.Contains(v.Message, "in other letter case") {
				otherCase = v.Rule
			}
		}
		quoted := make([]string, len(pgv1.ManagedParameters))
		for i, name := range pgv1.ManagedParameters {
			quoted[i] = "'" + name + "'"
		}
		if want := "[" + strings.Join(quoted, ", ") + "]"; !strings.Contains(otherCase, want) {
			t.Errorf("%s: the other-case rule on postgresql is %q, want it to test the list %s", version.Name, otherCase, want)
		}
	}
}

// The CRD's name-length rule is MaxClusterNameLength, the limit the builder's test proves.
func TestCRDLimitsTheNameToMaxClusterNameLength(t *testing.T) {
	crd := loadCRD(t)
	want := fmt.Sprintf("self.metadata.name.size() <= %d", pgv1.MaxClusterNameLength)
	for _, version := range crd.Spec.Versions {
		found := false
		for _, v := range version.Schema.OpenAPIV3Schema.XValidations {
			found = found || v.Rule == want
		}
		if !found {
			t.Errorf("%s: no rule %q on the PostgresCluster type", version.Name, want)
		}
	}
}

func loadCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "postgres.pgpilot.io_postgresclusters.yaml"))
	if err != nil {
		t.Fatalf("generated CRD (run make manifests): %v", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}
