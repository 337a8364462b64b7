package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/pgpilot/pgpilot-operator/internal/yamldocs"
)

// bundle is what the tests read from a bundle directory's manifests/.
type bundle struct {
	csv  *operatorsv1alpha1.ClusterServiceVersion
	crds []*apiextensionsv1.CustomResourceDefinition
}

func loadBundle(dir string) (*bundle, error) {
	files, err := filepath.Glob(filepath.Join(dir, "manifests", "*"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no manifests in %s", filepath.Join(dir, "manifests"))
	}
	sort.Strings(files)
	b := &bundle{}
	for _, file := range files {
		if err := b.add(file); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
	}
	if b.csv == nil {
		return nil, fmt.Errorf("no ClusterServiceVersion in %s", filepath.Join(dir, "manifests"))
	}
	return b, nil
}

func (b *bundle) add(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	// loadBundle names the file in every error.
	docs, err := yamldocs.Split(data)
	if err != nil {
		return err
	}
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return err
		}
		switch u.GetKind() {
		case operatorsv1alpha1.ClusterServiceVersionKind:
			if b.csv != nil {
				return errors.New("more than one ClusterServiceVersion")
			}
			b.csv = &operatorsv1alpha1.ClusterServiceVersion{}
			if err := yaml.UnmarshalStrict(doc, b.csv); err != nil {
				return err
			}
		case "CustomResourceDefinition":
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(doc, crd); err != nil {
				return err
			}
			b.crds = append(b.crds, crd)
		}
	}
	return nil
}

// crd returns the bundle's CRD called name, or nil.
func (b *bundle) crd(name string) *apiextensionsv1.CustomResourceDefinition {
	for _, crd := range b.crds {
		if crd.Name == name {
			return crd
		}
	}
	return nil
}

// versionSchema returns the OpenAPI schema of version of crd, or nil.
func versionSchema(crd *apiextensionsv1.CustomResourceDefinition, version string) *apiextensionsv1.JSONSchemaProps {
	for _, v := range crd.Spec.Versions {
		if v.Name == version && v.Schema != nil {
			return v.Schema.OpenAPIV3Schema
		}
	}
	return nil
}
