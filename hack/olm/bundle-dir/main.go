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
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// meta is the part of a catalog document (olm.package, olm.channel, olm.bundle) used here.
type meta struct {
	Schema         string         `json:"schema"`
	Name           string         `json:"name"`
	Package        string         `json:"package"`
	DefaultChannel string         `json:"defaultChannel"`
	Entries        []channelEntry `json:"entries"`
	Properties     []struct {
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	} `json:"properties"`
}

// channelEntry is one bundle an olm.channel lists.
type channelEntry struct {
	Name string `json:"name"`
}

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
	docs, err := readDocs(bundleFile)
	if err != nil {
		return err
	}
	// The package and channels live next to the bundle files (catalog/<package>/*.yaml).
	siblings, err := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(bundleFile)), "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range siblings {
		more, err := readDocs(f)
		if err != nil {
			return err
		}
		docs = append(docs, more...)
	}
	var bundle *meta
	for i := range docs {
		if docs[i].Schema == "olm.bundle" {
			if bundle != nil {
				return fmt.Errorf("%s holds more than one bundle", bundleFile)
			}
			bundle = &docs[i]
		}
	}
	if bundle == nil {
		return fmt.Errorf("%s holds no olm.bundle", bundleFile)
	}
	if err := writeManifests(bundle, filepath.Join(out, "manifests")); err != nil {
		return err
	}
	return writeAnnotations(bundle, docs, filepath.Join(out, "metadata"))
}

func readDocs(file string) ([]meta, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var docs []meta
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m meta
		if err := decoder.Decode(&m); errors.Is(err, io.EOF) {
			return docs, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if m.Schema != "" {
			docs = append(docs, m)
		}
	}
}

// writeManifests decodes every olm.bundle.object property (base64 JSON, as `opm render` stores
// them) into one YAML file per object, named as operator-sdk names bundle files.
func writeManifests(bundle *meta, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	written := 0
	for _, p := range bundle.Properties {
		if p.Type != "olm.bundle.object" {
			continue
		}
		var value struct {
			Data []byte `json:"data"` // base64 in the catalog; encoding/json decodes it
		}
		if err := json.Unmarshal(p.Value, &value); err != nil {
			return fmt.Errorf("olm.bundle.object: %w", err)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(value.Data); err != nil {
			return fmt.Errorf("olm.bundle.object: %w", err)
		}
		data, err := yaml.JSONToYAML(value.Data)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, manifestFileName(obj)), data, 0o644); err != nil {
			return err
		}
		written++
	}
	if written == 0 {
		return fmt.Errorf("bundle %s carries no manifests inline (olm.bundle.object)", bundle.Name)
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
func writeAnnotations(bundle *meta, docs []meta, dir string) error {
	var channels []string
	defaultChannel := ""
	for _, d := range docs {
		switch {
		case d.Schema == "olm.package" && d.Name == bundle.Package:
			defaultChannel = d.DefaultChannel
		case d.Schema == "olm.channel" && d.Package == bundle.Package &&
			slices.Contains(d.Entries, channelEntry{Name: bundle.Name}):
			channels = append(channels, d.Name)
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
