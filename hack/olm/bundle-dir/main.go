// Command bundle-dir writes a released bundle back out of the file-based catalog, as the
// directory a bundle image holds (manifests/, metadata/annotations.yaml), so that a release
// kept only in catalog/ (its manifests are inline as olm.bundle.object) can be served as the
// bundle image its catalog entry names.
//
//	go run ./hack/olm/bundle-dir CATALOG_FILE OUT_DIR
//
// The channels in the annotations are the catalog's channels that list the bundle.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/pgpilot/pgpilot-operator/internal/fbc"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: bundle-dir CATALOG_BUNDLE_FILE OUT_DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "bundle-dir:", err)
		os.Exit(1)
	}
}

func run(bundleFile, out string) error {
	// The package and channels live next to the bundle files (catalog/<package>/*.yaml).
	siblings, err := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(bundleFile)), "*.yaml"))
	if err != nil {
		return err
	}
	// Lenient: a released entry is written back as it is, whatever a later opm added to it.
	catalog, err := fbc.Load(fbc.Lenient, append([]string{bundleFile}, siblings...)...)
	if err != nil {
		return err
	}
	if len(catalog.Bundles) == 0 {
		return fmt.Errorf("%s holds no olm.bundle", bundleFile)
	}
	if len(catalog.Bundles) > 1 {
		return fmt.Errorf("%s holds more than one bundle", bundleFile)
	}
	bundle := catalog.Bundles[0]
	if err := writeManifests(bundle, filepath.Join(out, "manifests")); err != nil {
		return err
	}
	return writeAnnotations(bundle, catalog, filepath.Join(out, "metadata"))
}

// writeManifests writes every manifest the bundle carries inline into one YAML file per object,
// named as operator-sdk names bundle files.
func writeManifests(bundle fbc.Bundle, dir string) error {
	objects, err := bundle.ObjectData()
	if err != nil {
		return err
	}
	if len(objects) == 0 {
		return fmt.Errorf("bundle %s carries no manifests inline (%s)", bundle.Name, fbc.PropertyBundleObject)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, data := range objects {
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(data); err != nil {
			return fmt.Errorf("bundle %s: %s: %w", bundle.Name, fbc.PropertyBundleObject, err)
		}
		manifest, err := yaml.JSONToYAML(data)
		if err != nil {
			return fmt.Errorf("bundle %s: %s as YAML: %w", bundle.Name, obj.GetName(), err)
		}
		if err := os.WriteFile(filepath.Join(dir, manifestFileName(obj)), manifest, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func manifestFileName(obj *unstructured.Unstructured) string {
	gvk := obj.GroupVersionKind()
	switch gvk.Kind {
	case "ClusterServiceVersion":
		return strings.SplitN(obj.GetName(), ".", 2)[0] + ".clusterserviceversion.yaml"
	case "CustomResourceDefinition":
		plural, group, _ := strings.Cut(obj.GetName(), ".")
		return group + "_" + plural + ".yaml"
	}
	groupVersion := gvk.Version
	if gvk.Group != "" {
		groupVersion = gvk.Group + "_" + gvk.Version
	}
	return fmt.Sprintf("%s_%s_%s.yaml", obj.GetName(), groupVersion, strings.ToLower(gvk.Kind))
}

// writeAnnotations writes the registry+v1 bundle annotations bundle.Dockerfile turns into labels.
func writeAnnotations(bundle fbc.Bundle, catalog *fbc.Catalog, dir string) error {
	var channels []string
	defaultChannel := ""
	for _, p := range catalog.Packages {
		if p.Name == bundle.Package {
			defaultChannel = p.DefaultChannel
		}
	}
	for _, ch := range catalog.Channels {
		if ch.Package == bundle.Package && ch.Lists(bundle.Name) {
			channels = append(channels, ch.Name)
		}
	}
	if len(channels) == 0 || defaultChannel == "" {
		return fmt.Errorf("no channel or default channel of package %s lists %s", bundle.Package, bundle.Name)
	}
	slices.Sort(channels)
	annotations := map[string]map[string]string{"annotations": {
		"operators.operatorframework.io.bundle.mediatype.v1":       "registry+v1",
		"operators.operatorframework.io.bundle.manifests.v1":       "manifests/",
		"operators.operatorframework.io.bundle.metadata.v1":        "metadata/",
		"operators.operatorframework.io.bundle.package.v1":         bundle.Package,
		"operators.operatorframework.io.bundle.channels.v1":        strings.Join(channels, ","),
		"operators.operatorframework.io.bundle.channel.default.v1": defaultChannel,
	}}
	data, err := yaml.Marshal(annotations)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "annotations.yaml"), data, 0o644)
}
