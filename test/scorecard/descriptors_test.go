package main

import (
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func TestResolveDescriptorPaths(t *testing.T) {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	spec := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"storage": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": str}},
		"tolerations": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"key": str}}}},
		"parameters": {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: &str}},
	}}
	for path, wantErr := range map[string]string{
		"storage":             "",
		"storage.size":        "",
		"tolerations":         "",
		"tolerations[0].key":  "",
		"parameters.anything": "",
		"storage.sizes":       `no field "sizes" under storage`,
		"nope":                `no field "nope" under the top level`,
		"storage[0].size":     "storage is not a list",
		"tolerations[0].nope": `no field "nope" under tolerations`,
	} {
		err := resolve(&spec, path)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("resolve(%q): %v", path, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("resolve(%q) = %v, want an error containing %q", path, err, wantErr)
		}
	}
}

func TestDroppedFields(t *testing.T) {
	want := map[string]any{"instances": 3.0, "storage": map[string]any{"size": "1Gi"}, "hba": []any{"a"}}
	got := map[string]any{"instances": 3.0, "storage": map[string]any{"size": "1Gi", "reclaimPolicy": "Retain"}, "hba": []any{"a"}}
	if dropped := droppedFields(want, got); len(dropped) != 0 {
		t.Errorf("defaults added by the server are not drops: %v", dropped)
	}
	delete(got["storage"].(map[string]any), "size")
	got["instances"] = 2.0
	got["hba"] = []any{}
	dropped := droppedFields(want, got)
	wantDropped := []string{"spec.hba", "spec.instances (3, the server has 2)", "spec.storage.size"}
	if !slices.Equal(dropped, wantDropped) {
		t.Errorf("dropped %q, want %q", dropped, wantDropped)
	}
}
