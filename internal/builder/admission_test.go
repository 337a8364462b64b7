package builder

import (
	"os"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Every field of the PostgresCluster schema that names a Secret must be among the references
// the admission policy checks; a new one added to the API without it would be a way around it.
func TestSecretReferencePathsCoverTheSchema(t *testing.T) {
	data, err := os.ReadFile("../../config/crd/bases/postgres.pgpilot.io_postgresclusters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatal(err)
	}
	var found []string
	var walk func(path string, schema apiextensionsv1.JSONSchemaProps)
	walk = func(path string, schema apiextensionsv1.JSONSchemaProps) {
		if schema.Items != nil && schema.Items.Schema != nil {
			walk(path+"[]", *schema.Items.Schema)
		}
		for name, property := range schema.Properties {
			child := path + ".?" + name
			if strings.Contains(strings.ToLower(name), "secret") {
				if property.Type == "object" {
					child += ".?name"
				}
				found = append(found, child)
				continue
			}
			walk(child, property)
		}
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	walk("spec", spec)

	queries := spec.Properties["monitoring"].Properties["customQueries"]
	if queries.MaxItems == nil || *queries.MaxItems != maxCustomQueries {
		t.Errorf("spec.monitoring.customQueries allows %v items; the policy checks %d", queries.MaxItems, maxCustomQueries)
	}
	covered := append(slices.Clone(SecretReferencePaths), "spec.?monitoring.?customQueries[].?secret.?name", "spec.?roles[].?passwordSecret.?name")
	for _, path := range found {
		if !slices.Contains(covered, path) {
			t.Errorf("the schema names a Secret at %s, which the admission policy does not check", path)
		}
	}
	if len(found) != len(covered) {
		t.Errorf("the schema has %d Secret references, the policy checks %d: %v", len(found), len(covered), found)
	}
}
