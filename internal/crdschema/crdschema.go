// Package crdschema checks the OpenAPI schemas of pgpilot's CustomResourceDefinitions. The API
// package's tests hold the generated CRDs to it and the scorecard holds every bundle, released
// ones included, to the same rule, so that the two cannot drift apart.
package crdschema

import (
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Undocumented lists, sorted, the fields of a CRD version's schema that have no description,
// and counts the fields it checked. A field missing one shows nothing in `kubectl explain`,
// the console's forms or its API reference. Paths start at kind: Kind.spec.a.b, list items as
// a[], map values as a{}. The root's apiVersion, kind and metadata are not checked: Kubernetes
// documents those from its own types.
func Undocumented(kind string, schema *apiextensionsv1.JSONSchemaProps) (missing []string, checked int) {
	if schema == nil {
		return nil, 0
	}
	walk(schema.Properties, kind, func(path string, p apiextensionsv1.JSONSchemaProps) {
		if isRootMetaField(path, kind) {
			return
		}
		checked++
		if p.Description == "" {
			missing = append(missing, path)
		}
	})
	sort.Strings(missing)
	return missing, checked
}

// walk calls fn for every property below props, with its path.
func walk(props map[string]apiextensionsv1.JSONSchemaProps, path string, fn func(string, apiextensionsv1.JSONSchemaProps)) {
	for name, prop := range props {
		field := path + "." + name
		fn(field, prop)
		walk(prop.Properties, field, fn)
		if prop.Items != nil && prop.Items.Schema != nil {
			walk(prop.Items.Schema.Properties, field+"[]", fn)
		}
		if prop.AdditionalProperties != nil && prop.AdditionalProperties.Schema != nil {
			walk(prop.AdditionalProperties.Schema.Properties, field+"{}", fn)
		}
	}
}

func isRootMetaField(path, kind string) bool {
	switch path {
	case kind + ".apiVersion", kind + ".kind", kind + ".metadata":
		return true
	}
	return false
}
