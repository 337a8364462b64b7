package main

import (
	"context"
	"fmt"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"

	"github.com/pgpilot/pgpilot-operator/internal/crdschema"
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
			undocumented, fields := crdschema.Undocumented(crd.Spec.Names.Kind, version.Schema.OpenAPIV3Schema)
			for _, path := range undocumented {
				fail(r, "Document every field with a Go doc comment on the API type, then run make manifests bundle.",
					"%s %s: %s has no description", crd.Name, version.Name, path)
			}
			r.Log += fmt.Sprintf("%s %s: %d of %d fields documented\n", crd.Name, version.Name, fields-len(undocumented), fields)
		}
	}
}
