package olm_test

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/pgpilot/pgpilot-operator/internal/fbc"
	pgversion "github.com/pgpilot/pgpilot-operator/internal/version"
)

const packageName = "pgpilot-operator"

// loadCatalog reads catalog/ strictly: an unknown field in the hand-written channels is a typo.
func loadCatalog(t *testing.T) *fbc.Catalog {
	t.Helper()
	c, err := fbc.Load(fbc.Strict, repoPath("catalog"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// bundleObjects decodes a catalog bundle's inline manifests.
func bundleObjects(t *testing.T, b fbc.Bundle) []*unstructured.Unstructured {
	t.Helper()
	objs, err := b.Objects()
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// opm validates the catalog.
func TestCatalogValidates(t *testing.T) {
	run(t, repoRoot, nil, opm(t), "validate", "catalog")
}

// releases are the catalog's versions, oldest first: each replaces the one before it and skips
// everything from 0.1.0 on, so that OLM upgrades any of them to the newest in one step.
func releases() []string { return []string{"0.1.0", "0.2.0", pgversion.Version} }

// The catalog holds the package with channels stable and candidate, each the chain of releases
// by replaces and skipRange, and bundles that name their bundle image (OLM unpacks it) and carry
// their manifests inline too.
func TestCatalogUpgradeGraph(t *testing.T) {
	c := loadCatalog(t)
	if v := pgversion.Version; v == "0.1.0" || v == "0.2.0" {
		t.Fatalf("VERSION %s is released already: bump it", v)
	}

	if len(c.Packages) != 1 || c.Packages[0].Name != packageName || c.Packages[0].DefaultChannel != "stable" {
		t.Fatalf("packages %+v, want %s with default channel stable", c.Packages, packageName)
	}
	svg, err := os.ReadFile(repoPath("config", "manifests", "bases", "pgpilot-icon.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if icon := c.Packages[0].Icon; icon.MediaType != "image/svg+xml" || icon.Data != base64.StdEncoding.EncodeToString(svg) {
		t.Error("the package icon must be config/manifests/bases/pgpilot-icon.svg (make catalog)")
	}

	if len(c.Channels) != 2 {
		var names []string
		for _, ch := range c.Channels {
			names = append(names, ch.Name)
		}
		t.Errorf("channels %v, want stable and candidate", names)
	}
	var want []fbc.ChannelEntry
	for i, v := range releases() {
		e := fbc.ChannelEntry{Name: packageName + ".v" + v}
		if i > 0 {
			e.Replaces, e.SkipRange = want[i-1].Name, ">=0.1.0 <"+v
		}
		want = append(want, e)
	}
	for _, name := range []string{"stable", "candidate"} {
		ch, ok := c.Channel(packageName, name)
		if !ok {
			t.Errorf("no channel %s in package %s", name, packageName)
			continue
		}
		if !equality.Semantic.DeepEqual(ch.Entries, want) {
			t.Errorf("channel %s entries\n%+v\nwant\n%+v", name, ch.Entries, want)
		}
	}

	for _, e := range want {
		name := e.Name
		b, ok := c.Bundle(name)
		if !ok {
			t.Errorf("no bundle %s", name)
			continue
		}
		wantVersion := strings.TrimPrefix(name, packageName+".v")
		if bundleImage := strings.ReplaceAll(makeVar(t, "BUNDLE_IMAGE_TEMPLATE"), "{{.Version}}", wantVersion); b.Image != bundleImage || b.Package != packageName {
			t.Errorf("bundle %s: image %q package %q, want %s in %s", name, b.Image, b.Package, bundleImage, packageName)
		}
		kinds := map[string]int{}
		objs := bundleObjects(t, b)
		for _, obj := range objs {
			kinds[obj.GetKind()]++
		}
		csv := csvOf(t, objs)
		if kinds["ClusterServiceVersion"] != 1 || kinds["CustomResourceDefinition"] != len(csv.Spec.CustomResourceDefinitions.Owned) {
			t.Errorf("bundle %s carries %v inline, want its CSV and the CRDs it owns", name, kinds)
		}
		if csv.Name != name || csv.Spec.Version.String() != wantVersion {
			t.Errorf("bundle %s holds CSV %s version %s", name, csv.Name, csv.Spec.Version.String())
		}
		image := "ghcr.io/pgpilot/pgpilot-operator:v" + wantVersion
		if csv.Annotations["containerImage"] != image || !slices.ContainsFunc(b.RelatedImages, func(r fbc.RelatedImage) bool {
			return r.Image == image
		}) {
			t.Errorf("bundle %s: containerImage %s and relatedImages %v, want %s", name, csv.Annotations["containerImage"], b.RelatedImages, image)
		}
	}
}

// The current version's catalog entry is `opm render ./bundle`, byte for byte (make catalog).
func TestCatalogHasTheBundle(t *testing.T) {
	version := pgversion.Version
	rendered := run(t, repoRoot, nil, opm(t), "render", "./bundle", "--alpha-image-ref-template",
		makeVar(t, "BUNDLE_IMAGE_TEMPLATE"), "-o", "yaml")
	file := repoPath("catalog", packageName, "bundles", packageName+".v"+version+".yaml")
	committed, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rendered, committed) {
		t.Errorf("%s is not `opm render ./bundle` with the bundle image: run make catalog", file)
	}
}

// releaseSource unpacks an earlier release's source (hack/releases/TAG.tar.gz, which every
// clone carries, even one without tags or history) and returns it with the commit `git archive`
// recorded in its header.
func releaseSource(t *testing.T, tag string) (dir, commit string) {
	t.Helper()
	archive := repoPath("hack", "releases", tag+".tar.gz")
	dir = t.TempDir()
	run(t, repoRoot, nil, "tar", "-xzf", archive, "-C", dir)
	commit = strings.TrimSpace(string(run(t, repoRoot, nil, "sh", "-c", `gzip -dc "$1" | git get-tar-commit-id`, "sh", archive)))
	if out, err := runErr(repoRoot, nil, "git", "rev-parse", "--verify", "-q", tag+"^{commit}"); err == nil {
		if tagged := strings.TrimSpace(string(out)); tagged != commit {
			t.Errorf("this clone's tag %s is %s, hack/releases/%s.tar.gz holds %s", tag, tagged, tag, commit)
		}
	}
	return dir, commit
}

// fileAt reads a file of a release's source.
func fileAt(t *testing.T, dir string, path ...string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(append([]string{dir}, path...)...))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// v010Commit is the commit tagged v0.1.0, which the catalog's 0.1.0 entry was rendered from.
const v010Commit = "d8313d8c820b8be9c265727965b74767d4b8e8e9"

// The 0.1.0 entry is a real build of the v0.1.0 tag: that commit's CRD, RBAC and manager.
func TestCatalogV010IsTheTaggedRelease(t *testing.T) {
	source, commit := releaseSource(t, "v0.1.0")
	if commit != v010Commit {
		t.Errorf("hack/releases/v0.1.0.tar.gz holds %s, the catalog's 0.1.0 was rendered from %s", commit, v010Commit)
	}
	b, ok := loadCatalog(t).Bundle(packageName + ".v0.1.0")
	if !ok {
		t.Fatal("no 0.1.0 bundle in the catalog")
	}
	objs := bundleObjects(t, b)
	csv := csvOf(t, objs)

	var tagCRD map[string]any
	if err := yaml.Unmarshal(fileAt(t, source, "config", "crd", "bases", "postgres.pgpilot.io_postgresclusters.yaml"), &tagCRD); err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		if obj.GetKind() == "CustomResourceDefinition" {
			got := obj.DeepCopy().Object
			unstructured.RemoveNestedField(got, "status")
			unstructured.RemoveNestedField(got, "metadata", "creationTimestamp")
			if !equality.Semantic.DeepEqual(got, tagCRD) {
				t.Error("the 0.1.0 CRD is not the one committed at v0.1.0")
			}
		}
	}

	var tagRole rbacv1.ClusterRole
	if err := yaml.Unmarshal(fileAt(t, source, "config", "rbac", "role.yaml"), &tagRole); err != nil {
		t.Fatal(err)
	}
	strategy := csv.Spec.InstallStrategy.StrategySpec
	if len(strategy.ClusterPermissions) != 1 || len(strategy.ClusterPermissions[0].Rules) < len(tagRole.Rules) ||
		!equality.Semantic.DeepEqual(strategy.ClusterPermissions[0].Rules[:len(tagRole.Rules)], tagRole.Rules) {
		t.Error("the 0.1.0 clusterPermissions do not start with the manager-role committed at v0.1.0")
	}

	var tagManager struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name    string   `json:"name"`
						Command []string `json:"command"`
						Args    []string `json:"args"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	docs := yamlDocs(t, fileAt(t, source, "config", "manager", "manager.yaml"))
	if err := yaml.Unmarshal(docs[len(docs)-1], &tagManager); err != nil {
		t.Fatal(err)
	}
	manager := container(t, strategy.DeploymentSpecs[0].Spec, "manager")
	want := tagManager.Spec.Template.Spec.Containers[0]
	if !slices.Equal(manager.Command, want.Command) || !slices.Equal(manager.Args, append([]string{"--metrics-bind-address=:8443"}, want.Args...)) {
		t.Errorf("0.1.0 manager runs %v %v, want the v0.1.0 manager.yaml's %v %v (plus the metrics address)",
			manager.Command, manager.Args, want.Command, want.Args)
	}
	if manager.Image != "ghcr.io/pgpilot/pgpilot-operator:v0.1.0" {
		t.Errorf("0.1.0 manager image %s", manager.Image)
	}
}

// v020Commit is the commit tagged v0.2.0.
const v020Commit = "af16f0b96d997fe7f91aae7b5cdafd9d7552c3bb"

// The 0.2.0 entry is the one released: byte for byte the catalog entry committed at the v0.2.0
// tag, whose bundle/ CI rendered it from; and the archive builds that version.
func TestCatalogV020IsTheTaggedRelease(t *testing.T) {
	source, commit := releaseSource(t, "v0.2.0")
	if commit != v020Commit {
		t.Errorf("hack/releases/v0.2.0.tar.gz holds %s, want the v0.2.0 commit %s", commit, v020Commit)
	}
	if v := strings.TrimSpace(string(fileAt(t, source, "internal", "version", "VERSION"))); v != "0.2.0" {
		t.Errorf("the v0.2.0 source says VERSION %s", v)
	}
	entry := filepath.Join("catalog", packageName, "bundles", packageName+".v0.2.0.yaml")
	released := fileAt(t, source, entry)
	committed, err := os.ReadFile(repoPath(entry))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(released, committed) {
		t.Errorf("%s is not the entry released at v0.2.0 (make catalog-release RELEASE=v0.2.0)", entry)
	}
}

// Every bundle of the catalog, 0.1.0 included, passes the same validation as bundle/, and the
// offline pgpilot scorecard checks (its descriptors fit its own CRD, every field documented).
func TestCatalogBundlesValidate(t *testing.T) {
	annotations, err := os.ReadFile(repoPath("bundle", "metadata", "annotations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	scorecardTests := buildScorecardTests(t)
	for _, b := range loadCatalog(t).Bundles {
		t.Run(b.Name, func(t *testing.T) {
			dir := t.TempDir()
			for _, sub := range []string{"manifests", "metadata"} {
				if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, "metadata", "annotations.yaml"), annotations, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, obj := range bundleObjects(t, b) {
				data, err := yaml.Marshal(obj.Object)
				if err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(dir, "manifests", obj.GetName()+"."+strings.ToLower(obj.GetKind())+".yaml")
				if err := os.WriteFile(file, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			validateBundle(t, dir)
			for _, test := range []string{"crd-fields-documented", "descriptors-match-schema"} {
				checkResult(t, run(t, repoRoot, nil, scorecardTests, "--bundle", dir, test))
			}
		})
	}
}
