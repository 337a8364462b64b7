package v1alpha1_test

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Every field of the generated CRD carries a description, so `kubectl explain` documents it.
func TestEveryCRDFieldIsDocumented(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated CRDs found (run make manifests): %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, version := range crd.Spec.Versions {
			var undocumented []string
			collectUndocumented(version.Schema.OpenAPIV3Schema.Properties, crd.Spec.Names.Kind, &undocumented)
			sort.Strings(undocumented)
			for _, path := range undocumented {
				t.Errorf("%s %s: %s has no description", crd.Name, version.Name, path)
			}
		}
	}
}

func collectUndocumented(props map[string]apiextensionsv1.JSONSchemaProps, path string, out *[]string) {
	for name, prop := range props {
		field := path + "." + name
		if prop.Description == "" && !documentedByKubernetes(field) {
			*out = append(*out, field)
		}
		collectUndocumented(prop.Properties, field, out)
		if prop.Items != nil && prop.Items.Schema != nil {
			collectUndocumented(prop.Items.Schema.Properties, field+"[]", out)
		}
		if prop.AdditionalProperties != nil && prop.AdditionalProperties.Schema != nil {
			collectUndocumented(prop.AdditionalProperties.Schema.Properties, field+"{}", out)
		}
	}
}

// documentedByKubernetes: kubectl explain takes these from the API server's own types.
func documentedByKubernetes(field string) bool {
	switch field {
	case "PostgresCluster.apiVersion", "PostgresCluster.kind", "PostgresCluster.metadata":
		return true
	}
	return false
}
