package fbc

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const packageDoc = `---
schema: olm.package
name: op
defaultChannel: stable
icon: {base64data: PHN2Zy8+, mediatype: image/svg+xml}
`

const channelDoc = `---
# hand-written
schema: olm.channel
package: op
name: stable
entries:
- name: op.v0.1.0
- name: op.v0.2.0
  replaces: op.v0.1.0
  skipRange: '>=0.1.0 <0.2.0'
`

var bundleDoc = `---
schema: olm.bundle
name: op.v0.2.0
package: op
image: example.com/op-bundle:v0.2.0
relatedImages: [{name: op, image: example.com/op:v0.2.0}]
properties:
- type: olm.package
  value: {packageName: op, version: 0.2.0}
- type: olm.bundle.object
  value: {data: ` + base64.StdEncoding.EncodeToString([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"}}`)) + `}
`

func TestLoad(t *testing.T) {
	tests := []struct {
		name     string
		files    map[string]string
		mode     Mode
		packages int
		channels int
		bundles  int
		wantErr  string
	}{
		{name: "a whole catalog, walked", mode: Strict, packages: 1, channels: 1, bundles: 1,
			files: map[string]string{"package.yaml": packageDoc + channelDoc, "bundles/op.v0.2.0.yaml": bundleDoc}},
		{name: "strict: unknown field", mode: Strict, wantErr: `unknown field "replace"`,
			files: map[string]string{"channels.yaml": strings.Replace(channelDoc, "replaces", "replace", 1)}},
		{name: "lenient: unknown field ignored", mode: Lenient, channels: 1,
			files: map[string]string{"channels.yaml": strings.Replace(channelDoc, "replaces", "replace", 1)}},
		{name: "strict: unknown schema", mode: Strict, wantErr: `unexpected schema "olm.deprecations"`,
			files: map[string]string{"x.yaml": packageDoc + "---\nschema: olm.deprecations\npackage: op\n"}},
		{name: "lenient: unknown schema skipped", mode: Lenient, packages: 1,
			files: map[string]string{"x.yaml": packageDoc + "---\nschema: olm.deprecations\npackage: op\n"}},
		{name: "errors name the file and document", mode: Lenient, wantErr: "x.yaml: document 2",
			files: map[string]string{"x.yaml": packageDoc + "---\nschema: olm.channel\nentries: {}\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tt.files {
				path := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c, err := Load(tt.mode, dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Packages) != tt.packages || len(c.Channels) != tt.channels || len(c.Bundles) != tt.bundles {
				t.Errorf("read %d packages, %d channels, %d bundles; want %d, %d, %d",
					len(c.Packages), len(c.Channels), len(c.Bundles), tt.packages, tt.channels, tt.bundles)
			}
		})
	}
}

func TestModel(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "catalog.yaml")
	if err := os.WriteFile(file, []byte(packageDoc+channelDoc+bundleDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(Strict, file)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Packages[0]; p.DefaultChannel != "stable" || p.Icon.MediaType != "image/svg+xml" || p.Icon.Data != "PHN2Zy8+" {
		t.Errorf("package %+v", p)
	}
	ch, ok := c.Channel("op", "stable")
	if !ok || ch.Entries[1].Replaces != "op.v0.1.0" || ch.Entries[1].SkipRange != ">=0.1.0 <0.2.0" {
		t.Errorf("channel %+v, %v", ch, ok)
	}
	if _, ok := c.Channel("other", "stable"); ok {
		t.Error("found channel stable of package other")
	}
	for _, tt := range []struct {
		bundle string
		listed bool
	}{{"op.v0.1.0", true}, {"op.v0.2.0", true}, {"op.v0.3.0", false}} {
		if ch.Lists(tt.bundle) != tt.listed {
			t.Errorf("Lists(%s) = %v", tt.bundle, !tt.listed)
		}
	}
	b, ok := c.Bundle("op.v0.2.0")
	if !ok || b.Image != "example.com/op-bundle:v0.2.0" || b.RelatedImages[0].Image != "example.com/op:v0.2.0" {
		t.Fatalf("bundle %+v, %v", b, ok)
	}
	objs, err := b.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].GetKind() != "ConfigMap" || objs[0].GetName() != "cm" {
		t.Errorf("objects %v, want the one ConfigMap cm", objs)
	}
	if _, ok := c.Bundle("op.v9"); ok {
		t.Error("found bundle op.v9")
	}
}
