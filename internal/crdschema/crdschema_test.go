package crdschema

import (
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func TestUndocumented(t *testing.T) {
	doc := func(props map[string]apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
		return apiextensionsv1.JSONSchemaProps{Description: "documented", Properties: props}
	}
	bare := func(props map[string]apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
		return apiextensionsv1.JSONSchemaProps{Properties: props}
	}
	tests := []struct {
		name    string
		schema  *apiextensionsv1.JSONSchemaProps
		missing []string
		checked int
	}{
		{name: "no schema", schema: nil},
		{name: "all documented", checked: 2, schema: &apiextensionsv1.JSONSchemaProps{
			Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": doc(map[string]apiextensionsv1.JSONSchemaProps{"a": doc(nil)})},
		}},
		{name: "root meta fields are Kubernetes' to document", checked: 0, schema: &apiextensionsv1.JSONSchemaProps{
			Properties: map[string]apiextensionsv1.JSONSchemaProps{"apiVersion": bare(nil), "kind": bare(nil), "metadata": bare(nil)},
		}},
		{name: "a nested kind field is ours", checked: 2, missing: []string{"Thing.spec.kind"}, schema: &apiextensionsv1.JSONSchemaProps{
			Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": doc(map[string]apiextensionsv1.JSONSchemaProps{"kind": bare(nil)})},
		}},
		{name: "list items and map values, sorted", checked: 6,
			missing: []string{"Thing.spec.b", "Thing.spec.list[].x", "Thing.spec.map{}.y"},
			schema: &apiextensionsv1.JSONSchemaProps{Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec": doc(map[string]apiextensionsv1.JSONSchemaProps{
					"map": {Description: "m", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{
						Schema: &apiextensionsv1.JSONSchemaProps{Properties: map[string]apiextensionsv1.JSONSchemaProps{"y": bare(nil)}},
					}},
					"list": {Description: "l", Items: &apiextensionsv1.JSONSchemaPropsOrArray{
						Schema: &apiextensionsv1.JSONSchemaProps{Properties: map[string]apiextensionsv1.JSONSchemaProps{"x": bare(nil)}},
					}},
					"b": bare(nil),
				}),
			}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			missing, checked := Undocumented("Thing", tt.schema)
			if !slices.Equal(missing, tt.missing) || checked != tt.checked {
				t.Errorf("Undocumented = %q, %d; want %q, %d", missing, checked, tt.missing, tt.checked)
			}
		})
	}
}
