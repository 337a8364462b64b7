package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"

	pgversion "github.com/pgpilot/pgpilot-operator/internal/version"
)

// The current version's catalog entry is rendered from bundle/ (make catalog), so writing it
// back out must give bundle/ again: every manifest, object for object, and its annotations.
func TestRoundTripsTheCurrentBundle(t *testing.T) {
	out := t.TempDir()
	catalogFile := filepath.Join("..", "..", "..", "catalog", "pgpilot-operator", "bundles",
		"pgpilot-operator.v"+pgversion.Version+".yaml")
	if err := run(catalogFile, out); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join("..", "..", "..", "bundle")
	for _, dir := range []string{"manifests", "metadata"} {
		want := readObjects(t, filepath.Join(bundle, dir))
		got := readObjects(t, filepath.Join(out, dir))
		if dir == "metadata" {
			// bundle.Dockerfile's annotations also name the SDK and the scorecard config.
			for key := range want["annotations.yaml"]["annotations"].(map[string]any) {
				if _, ok := got["annotations.yaml"]["annotations"].(map[string]any)[key]; !ok {
					delete(want["annotations.yaml"]["annotations"].(map[string]any), key)
				}
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: wrote %d files, bundle/ has %d", dir, len(got), len(want))
		}
		for name, obj := range want {
			if !reflect.DeepEqual(got[name], obj) {
				t.Errorf("%s/%s differs from bundle/%s/%s", dir, name, dir, name)
			}
		}
	}
}

func readObjects(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	objects := map[string]map[string]any{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(data, &obj); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		objects[e.Name()] = obj
	}
	return objects
}
