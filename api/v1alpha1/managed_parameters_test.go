package v1alpha1_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// The CRD's rules on spec.postgresql.parameters are exactly one per managed and per forbidden
// parameter, and the preload libraries' rule: a name added to a list without its marker, or a
// marker without the name, fails here.
func TestCRDRejectsExactlyTheManagedAndForbiddenParameters(t *testing.T) {
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
		for _, name := range pgv1.ForbiddenParameters {
			rule := fmt.Sprintf("!('%s' in self)", name)
			if message, ok := rules[rule]; !ok || message != pgv1.ForbiddenParameterMessage(name) {
				t.Errorf("%s: rule %s says %q (present: %v), want %q", version.Name, rule, message, ok, pgv1.ForbiddenParameterMessage(name))
			}
			delete(rules, rule)
		}
		libraries := strings.Join(pgv1.PreloadLibraries, "|")
		preload := "!('shared_preload_libraries' in self) || self['shared_preload_libraries'].matches('^ *(" + libraries +
			") *(, *(" + libraries + ") *)*$')"
		if message, ok := rules[preload]; !ok || message != pgv1.PreloadLibrariesMessage {
			t.Errorf("%s: no rule %s saying %q (got %q)", version.Name, preload, pgv1.PreloadLibrariesMessage, message)
		}
		delete(rules, preload)
		for rule := range rules {
			t.Errorf("%s: rule %s on parameters is not for a managed or forbidden parameter (add it to a list)", version.Name, rule)
		}
		// PostgreSQL compares setting names case-insensitively, so one rule on postgresql
		// rejects the other spellings (WAL_LEVEL) of the very same list.
		var otherCase string
		for _, v := range version.Schema.OpenAPIV3Schema.Properties["spec"].Properties["postgresql"].XValidations {
			if strings.Contains(v.Message, "in other letter case") {
				otherCase = v.Rule
			}
		}
		restricted := append(append(slices.Clone(pgv1.ManagedParameters), pgv1.ForbiddenParameters...), "shared_preload_libraries")
		quoted := make([]string, len(restricted))
		for i, name := range restricted {
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
