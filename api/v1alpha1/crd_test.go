package v1alpha1_test

import (
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/pgpilot/pgpilot-operator/internal/crdschema"
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
			if version.Schema == nil || version.Schema.OpenAPIV3Schema == nil {
				t.Errorf("%s %s has no schema", crd.Name, version.Name)
				continue
			}
			missing, _ := crdschema.Undocumented(crd.Spec.Names.Kind, version.Schema.OpenAPIV3Schema)
			for _, path := range missing {
				t.Errorf("%s %s: %s has no description", crd.Name, version.Name, path)
			}
		}
	}
}
