// Package fbc reads OLM file-based catalogs (catalog/): the olm.package and olm.bundle documents
// `opm render` writes and the hand-written olm.channel documents next to them. The tests of the
// catalog and the tool that turns a released catalog entry back into a bundle directory read
// the same documents, so they share this model of them. operator-framework/api has no types for
// these schemas, and operator-registry's declcfg, which has, would bring its large dependency
// tree into go.mod for a handful of fields.
package fbc

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/pgpilot/pgpilot-operator/internal/yamldocs"
)

// The schemas of catalog documents, and the property that carries a bundle's manifests inline.
const (
	SchemaPackage        = "olm.package"
	SchemaChannel        = "olm.channel"
	SchemaBundle         = "olm.bundle"
	PropertyBundleObject = "olm.bundle.object"
)

// Package is an olm.package document.
type Package struct {
	Schema         string `json:"schema"`
	Name           string `json:"name"`
	DefaultChannel string `json:"defaultChannel"`
	Icon           Icon   `json:"icon"`
}

// Icon is the icon the console shows for a package.
type Icon struct {
	Data      string `json:"base64data"`
	MediaType string `json:"mediatype"`
}

// Channel is an olm.channel document: the upgrade graph of one channel of a package.
type Channel struct {
	Schema  string         `json:"schema"`
	Name    string         `json:"name"`
	Package string         `json:"package"`
	Entries []ChannelEntry `json:"entries"`
}

// ChannelEntry is one bundle a channel lists, with the edges OLM upgrades it along.
type ChannelEntry struct {
	Name      string   `json:"name"`
	Replaces  string   `json:"replaces"`
	Skips     []string `json:"skips"`
	SkipRange string   `json:"skipRange"`
}

// Bundle is an olm.bundle document.
type Bundle struct {
	Schema        string         `json:"schema"`
	Name          string         `json:"name"`
	Package       string         `json:"package"`
	Image         string         `json:"image"`
	Properties    []Property     `json:"properties"`
	RelatedImages []RelatedImage `json:"relatedImages"`
}

// Property is one of a bundle's properties; Value's shape depends on Type.
type Property struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// RelatedImage is an image a bundle runs, for mirroring into disconnected clusters.
type RelatedImage struct {
	Name  string `json:"name"`
	Image string `json:"image"`
}

// Catalog is the documents of a file-based catalog, in the order read.
type Catalog struct {
	Packages []Package
	Channels []Channel
	Bundles  []Bundle
}

// Mode says what Load makes of what this model does not know.
type Mode int

const (
	// Lenient skips documents of other schemas and ignores unknown fields, for a tool that needs
	// only part of a catalog and should not break on what opm adds to it.
	Lenient Mode = iota
	// Strict rejects both, so that a typo in a hand-written channel (replace: for replaces:) is
	// an error rather than an edge of the upgrade graph silently lost.
	Strict
)

// Load reads the catalog documents in paths; a directory stands for every file below it.
func Load(mode Mode, paths ...string) (*Catalog, error) {
	c := &Catalog{}
	for _, root := range paths {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			return c.addFile(path, mode)
		})
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Catalog) addFile(path string, mode Mode) error {
	docs, err := yamldocs.ReadFile(path)
	if err != nil {
		return err
	}
	for i, doc := range docs {
		if err := c.add(doc, mode); err != nil {
			return fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
	}
	return nil
}

func (c *Catalog) add(doc []byte, mode Mode) error {
	unmarshal := yaml.Unmarshal
	if mode == Strict {
		unmarshal = yaml.UnmarshalStrict
	}
	var meta struct {
		Schema string `json:"schema"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return err
	}
	switch meta.Schema {
	case SchemaPackage:
		var p Package
		if err := unmarshal(doc, &p); err != nil {
			return err
		}
		c.Packages = append(c.Packages, p)
	case SchemaChannel:
		var ch Channel
		if err := unmarshal(doc, &ch); err != nil {
			return err
		}
		c.Channels = append(c.Channels, ch)
	case SchemaBundle:
		var b Bundle
		if err := unmarshal(doc, &b); err != nil {
			return err
		}
		c.Bundles = append(c.Bundles, b)
	default:
		if mode == Strict {
			return fmt.Errorf("unexpected schema %q", meta.Schema)
		}
	}
	return nil
}

// Bundle returns the bundle called name.
func (c *Catalog) Bundle(name string) (Bundle, bool) {
	i := slices.IndexFunc(c.Bundles, func(b Bundle) bool { return b.Name == name })
	if i < 0 {
		return Bundle{}, false
	}
	return c.Bundles[i], true
}

// Channel returns the channel called name of package pkg.
func (c *Catalog) Channel(pkg, name string) (Channel, bool) {
	i := slices.IndexFunc(c.Channels, func(ch Channel) bool { return ch.Package == pkg && ch.Name == name })
	if i < 0 {
		return Channel{}, false
	}
	return c.Channels[i], true
}

// Lists reports whether the channel has an entry for the bundle called name.
func (ch Channel) Lists(name string) bool {
	return slices.ContainsFunc(ch.Entries, func(e ChannelEntry) bool { return e.Name == name })
}

// ObjectData is the JSON of every manifest the bundle carries inline, in catalog order.
func (b Bundle) ObjectData() ([][]byte, error) {
	var objects [][]byte
	for _, p := range b.Properties {
		if p.Type != PropertyBundleObject {
			continue
		}
		var value struct {
			Data []byte `json:"data"` // base64 in the catalog, as opm writes it
		}
		if err := json.Unmarshal(p.Value, &value); err != nil {
			return nil, fmt.Errorf("bundle %s: %s: %w", b.Name, PropertyBundleObject, err)
		}
		objects = append(objects, value.Data)
	}
	return objects, nil
}

// Objects decodes the manifests the bundle carries inline.
func (b Bundle) Objects() ([]*unstructured.Unstructured, error) {
	data, err := b.ObjectData()
	if err != nil {
		return nil, err
	}
	objects := make([]*unstructured.Unstructured, 0, len(data))
	for _, d := range data {
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(d, &u.Object); err != nil {
			return nil, fmt.Errorf("bundle %s: %s: %w", b.Name, PropertyBundleObject, err)
		}
		objects = append(objects, u)
	}
	return objects, nil
}
