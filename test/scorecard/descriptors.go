package main

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

const markerSuggestion = "Add or fix the +operator-sdk:csv:customresourcedefinitions markers in api/, " +
	"then run make bundle."

// checkDescriptorsMatchSchema checks the owned CRDs' spec and status descriptors against the
// CRD schemas, which operator-sdk's olm-spec-descriptors test does not: every descriptor path
// must exist in the schema (a renamed field leaves a stale descriptor that the console shows
// as empty), every top-level spec and status field must have a descriptor, and every
// x-descriptor must be an OLM descriptor URN.
func checkDescriptorsMatchSchema(_ context.Context, b *bundle, _ options, r *scapiv1alpha3.TestResult) {
	owned := b.csv.Spec.CustomResourceDefinitions.Owned
	if len(owned) == 0 {
		fail(r, "", "the CSV owns no CRDs")
		return
	}
	for _, desc := range owned {
		crd := b.crd(desc.Name)
		if crd == nil {
			fail(r, "", "the CSV owns %s, which is not in the bundle", desc.Name)
			continue
		}
		root := versionSchema(crd, desc.Version)
		if root == nil {
			fail(r, "", "%s has no version %s with a schema", desc.Name, desc.Version)
			continue
		}
		id := desc.Kind + " " + desc.Version
		specDescs := descriptorsOf(desc.SpecDescriptors)
		statusDescs := descriptorsOf(desc.StatusDescriptors)
		checkSection(r, id, "spec", root, specDescs)
		checkSection(r, id, "status", root, statusDescs)
		r.Log += fmt.Sprintf("%s: %d spec and %d status descriptors checked against the schema\n",
			id, len(specDescs), len(statusDescs))
	}
}

type descriptor struct {
	path         string
	xDescriptors []string
}

func descriptorsOf[T operatorsv1alpha1.SpecDescriptor | operatorsv1alpha1.StatusDescriptor](list []T) []descriptor {
	out := make([]descriptor, 0, len(list))
	for _, d := range list {
		switch d := any(d).(type) {
		case operatorsv1alpha1.SpecDescriptor:
			out = append(out, descriptor{d.Path, d.XDescriptors})
		case operatorsv1alpha1.StatusDescriptor:
			out = append(out, descriptor{d.Path, d.XDescriptors})
		}
	}
	return out
}

var urnPattern = regexp.MustCompile(`^urn:alm:descriptor:[A-Za-z0-9.:_/-]+$`)

func checkSection(r *scapiv1alpha3.TestResult, id, section string, root *apiextensionsv1.JSONSchemaProps, descs []descriptor) {
	sectionSchema, ok := root.Properties[section]
	if !ok {
		if len(descs) > 0 {
			fail(r, markerSuggestion, "%s has %s descriptors but no %s", id, section, section)
		}
		return
	}
	described := map[string]bool{}
	for _, d := range descs {
		described[d.path] = true
		if err := resolve(&sectionSchema, d.path); err != nil {
			fail(r, markerSuggestion, "%s: %s descriptor %q: %v", id, section, d.path, err)
		}
		for _, x := range d.xDescriptors {
			if !urnPattern.MatchString(x) {
				fail(r, markerSuggestion, "%s: %s descriptor %q: x-descriptor %q is not an urn:alm:descriptor URN",
					id, section, d.path, x)
			}
		}
	}
	var missing []string
	for name := range sectionSchema.Properties {
		if !described[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		fail(r, markerSuggestion, "%s: %s.%s has no %s descriptor", id, section, name, section)
	}
}

var indexSuffix = regexp.MustCompile(`\[[0-9]+\]$`)

// resolve follows a descriptor path (a.b[0].c) through a schema and says where it leaves it.
func resolve(s *apiextensionsv1.JSONSchemaProps, path string) error {
	cur := s
	walked := ""
	for _, segment := range strings.Split(path, ".") {
		name := indexSuffix.ReplaceAllString(segment, "")
		next, ok := cur.Properties[name]
		if !ok {
			if cur.AdditionalProperties != nil && cur.AdditionalProperties.Schema != nil {
				next, ok = *cur.AdditionalProperties.Schema, true
			}
		}
		if !ok {
			where := "the top level"
			if walked != "" {
				where = walked
			}
			return fmt.Errorf("the schema has no field %q under %s", name, where)
		}
		walked = strings.TrimPrefix(walked+"."+name, ".")
		cur = &next
		if name != segment {
			if cur.Items == nil || cur.Items.Schema == nil {
				return fmt.Errorf("%s is not a list", walked)
			}
			cur = cur.Items.Schema
		}
	}
	return nil
}
