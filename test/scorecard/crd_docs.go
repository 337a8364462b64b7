package main

import (
	"context"
	"fmt"
	"sort"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// checkCRDFieldsDocumented requires a description on every field of every CRD in the bundle,
// since `kubectl explain`, the console's forms and its API reference show nothing else.
// Only apiVersion, kind and metadata may go without: Kubernetes documents those itself.
func checkCRDFieldsDocumented(_ context.Context, b *bundle, _ options, r *scapiv1alpha3.TestResult) {
	if len(b.crds) == 0 {
		fail(r, "", "the bundle has no CRDs")
		return
	}
	for _, crd := range b.crds {
		for _, version := range crd.Spec.Versions {
			if version.Schema == nil || version.Schema.OpenAPIV3Schema == nil {
				fail(r, "", "%s %s has no schema", crd.Name, version.Name)
				continue
			}
			var undocumented []string
			fields := 0
			walkFields(version.Schema.OpenAPIV3Schema.Properties, crd.Spec.Names.Kind, func(path string, p apiextensionsv1.JSONSchemaProps) {
				if isRootMetaField(path, crd.Spec.Names.Kind) {
					return
				}
				fields++
				if p.Description == "" {
					undocumented = append(undocumented, path)
				}
			})
			sort.Strings(undocumented)
			for _, path := range undocumented {
				fail(r, "Document every field with a Go doc comment on the API type, then run make manifests bundle.",
					"%s %s: %s has no description", crd.Name, version.Name, path)
			}
			r.Log += fmt.Sprintf("%s %s: %d of %d fields documented\n", crd.Name, version.Name, fields-len(undocumented), fields)
		}
	}
}

// walkFields calls fn for every property below props, with its path: Kind.spec.a.b, list items
// as a[], map values as a{}.
func walkFields(props map[string]apiextensionsv1.JSONSchemaProps, path string, fn func(string, apiextensionsv1.JSONSchemaProps)) {
	for name, prop := range props {
		field := path + "." + name
		fn(field, prop)
		walkFields(prop.Properties, field, fn)
		if prop.Items != nil && prop.Items.Schema != nil {
			walkFields(prop.Items.Schema.Properties, field+"[]", fn)
		}
		if prop.AdditionalProperties != nil && prop.AdditionalProperties.Schema != nil {
			walkFields(prop.AdditionalProperties.Schema.Properties, field+"{}", fn)
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
