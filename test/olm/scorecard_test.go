package olm_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	pgversion "github.com/pgpilot/pgpilot-operator/internal/version"
)

// The tests operator-sdk's scorecard-test image runs; pgpilot's own run from SCORECARD_IMG.
var (
	builtinTests = []string{"basic-check-spec", "olm-bundle-validation", "olm-crds-have-validation",
		"olm-crds-have-resources", "olm-spec-descriptors", "olm-status-descriptors"}
	pgpilotTests = []string{"alm-examples-accepted", "crd-fields-documented", "descriptors-match-schema"}
)

const (
	builtinImage   = "quay.io/operator-framework/scorecard-test:v1.42.2"
	pgpilotCommand = "pgpilot-scorecard-tests"
)

func scorecardConfig(t *testing.T) scapiv1alpha3.Configuration {
	t.Helper()
	data, err := os.ReadFile(repoPath("bundle", "tests", "scorecard", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg scapiv1alpha3.Configuration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// scorecardTests returns the tests of the bundle's scorecard configuration run by image.
func scorecardTests(cfg scapiv1alpha3.Configuration, image string) []string {
	var names []string
	for _, stage := range cfg.Stages {
		for _, test := range stage.Tests {
			if test.Image == image {
				names = append(names, test.Entrypoint[len(test.Entrypoint)-1])
			}
		}
	}
	return names
}

// The scorecard configuration holds the basic and olm suites and pgpilot's own tests, each
// with an image and an entrypoint `operator-sdk scorecard` can run in a cluster.
func TestScorecardConfiguration(t *testing.T) {
	cfg := scorecardConfig(t)
	pgpilotImage := makeVar(t, "IMAGE_TAG_BASE") + "-scorecard:v" + pgversion.Version
	seen := map[string]bool{}
	for _, stage := range cfg.Stages {
		for _, test := range stage.Tests {
			name := test.Entrypoint[len(test.Entrypoint)-1]
			seen[name] = true
			switch test.Image {
			case builtinImage:
				if !slices.Equal(test.Entrypoint, []string{"scorecard-test", name}) || !slices.Contains(builtinTests, name) {
					t.Errorf("built-in test %v is not one of %v", test.Entrypoint, builtinTests)
				}
			case pgpilotImage:
				if !slices.Equal(test.Entrypoint, []string{pgpilotCommand, name}) || !slices.Contains(pgpilotTests, name) {
					t.Errorf("pgpilot test %v is not one of %v", test.Entrypoint, pgpilotTests)
				}
				if test.Labels["suite"] != "pgpilot" {
					t.Errorf("pgpilot test %s has labels %v, want suite=pgpilot", name, test.Labels)
				}
			default:
				t.Errorf("test %v runs image %s, want %s or %s", test.Entrypoint, test.Image, builtinImage, pgpilotImage)
			}
		}
	}
	for _, name := range append(slices.Clone(builtinTests), pgpilotTests...) {
		if !seen[name] {
			t.Errorf("the scorecard configuration lacks %s", name)
		}
	}
}

// podBundleRoot provides an empty /bundle to bind-mount bundles onto: scorecard-test reads the
// bundle from that hard-coded path only, and does not follow a symlinked root.
func podBundleRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the built-in scorecard tests need root: scorecard-test reads the bundle from /bundle only, " +
			"and the test bind-mounts it there in a private mount namespace")
	}
	info, err := os.Lstat("/bundle")
	switch {
	case os.IsNotExist(err):
		if err := os.Mkdir("/bundle", 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove("/bundle") })
	case err != nil:
		t.Fatal(err)
	case !info.IsDir():
		t.Fatal("/bundle exists and is not a directory")
	default:
		if entries, _ := os.ReadDir("/bundle"); len(entries) > 0 {
			t.Fatal("/bundle exists and is not empty: cannot use it as a mount point")
		}
	}
}

// runInPodBundleRoot runs command with bundleDir bind-mounted on /bundle, in a mount namespace
// of its own (the mount never shows outside it).
func runInPodBundleRoot(t *testing.T, bundleDir string, command ...string) []byte {
	t.Helper()
	abs, err := filepath.Abs(bundleDir)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$0" /bundle && exec "$@"`, abs}, command...)
	return run(t, repoRoot, nil, "unshare", args...)
}

// checkResult parses a scorecard TestStatus and fails unless every result passed.
func checkResult(t *testing.T, out []byte) {
	t.Helper()
	var status scapiv1alpha3.TestStatus
	if err := json.Unmarshal(out, &status); err != nil {
		t.Fatalf("not a scorecard TestStatus (%v):\n%s", err, out)
	}
	if len(status.Results) != 1 {
		t.Fatalf("%d results, want 1:\n%s", len(status.Results), out)
	}
	r := status.Results[0]
	if r.State != scapiv1alpha3.PassState {
		t.Errorf("%s: state %s\nerrors: %s\nsuggestions: %s\nlog:\n%s", r.Name, r.State,
			strings.Join(r.Errors, "\n  "), strings.Join(r.Suggestions, "\n  "), r.Log)
	} else {
		t.Logf("%s: %s (suggestions: %v)", r.Name, r.State, r.Suggestions)
	}
}

// operator-sdk's built-in scorecard tests (basic and olm suites) pass on the bundle. They are
// the ones `operator-sdk scorecard` runs from quay.io/operator-framework/scorecard-test; here the
// same binary runs them without a cluster.
func TestScorecardBuiltinTests(t *testing.T) {
	tests := scorecardTests(scorecardConfig(t), builtinImage)
	if len(tests) != len(builtinTests) {
		t.Fatalf("the configuration runs built-in tests %v, want %v", tests, builtinTests)
	}
	binary := scorecardTest(t)
	podBundleRoot(t)
	for _, name := range tests {
		t.Run(name, func(t *testing.T) {
			checkResult(t, runInPodBundleRoot(t, repoPath("bundle"), binary, name))
		})
	}
	// scorecard-test exits 0 whatever the outcome: only the state tells. It does report a failure.
	t.Run("a bundle without owned resources fails", func(t *testing.T) {
		dir := mutatedBundle(t, func(csv, _ map[string]any) { delete(ownedDescription(csv), "resources") })
		out := runInPodBundleRoot(t, dir, binary, "olm-crds-have-resources")
		var status scapiv1alpha3.TestStatus
		if err := json.Unmarshal(out, &status); err != nil || len(status.Results) != 1 ||
			status.Results[0].State != scapiv1alpha3.FailState {
			t.Errorf("olm-crds-have-resources on a bundle without resources: %s", out)
		}
	})
}

// buildScorecardTests builds test/scorecard, the program in SCORECARD_IMG.
func buildScorecardTests(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), pgpilotCommand)
	run(t, repoRoot, []string{"CGO_ENABLED=0"}, "go", "build", "-o", out, "./test/scorecard")
	return out
}

// scorecardUser is a kubeconfig for a user who may create pgpilot's objects in namespace, and do
// nothing else: what the scorecard service account needs for alm-examples-accepted.
func scorecardUser(t *testing.T, namespace string) string {
	t.Helper()
	plane := controlPlane(t)
	c, err := client.New(plane.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "scorecard", Namespace: namespace},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"postgres.pgpilot.io"},
				Resources: []string{"postgresclusters", "backups", "scheduledbackups", "databases"}, Verbs: []string{"create"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "scorecard", Namespace: namespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "scorecard"},
			Subjects:   []rbacv1.Subject{{Kind: "User", Name: "scorecard-" + namespace}},
		},
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, err := plane.Kubeconfig(envtest.User{Name: "scorecard-" + namespace})
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// runPgpilotTest runs one of pgpilot's scorecard tests as the scorecard pod would: the bundle,
// a namespace and credentials allowed to create PostgresClusters there.
func runPgpilotTest(t *testing.T, binary, kubeconfig, namespace, bundleDir, name string) scapiv1alpha3.TestResult {
	t.Helper()
	out := run(t, repoRoot, []string{"KUBECONFIG=" + kubeconfig, "SCORECARD_NAMESPACE=" + namespace},
		binary, "--bundle", bundleDir, name)
	var status scapiv1alpha3.TestStatus
	if err := json.Unmarshal(out, &status); err != nil || len(status.Results) != 1 {
		t.Fatalf("not a scorecard TestStatus with one result (%v):\n%s", err, out)
	}
	return status.Results[0]
}

// pgpilot's own scorecard tests pass on the bundle: every alm-examples object is accepted by a
// real kube-apiserver with the bundle's CRD (server-side dry run), every CRD field is
// documented, and the descriptors match the CRD schema.
func TestScorecardPgpilotTests(t *testing.T) {
	tests := scorecardTests(scorecardConfig(t), makeVar(t, "IMAGE_TAG_BASE")+"-scorecard:v"+pgversion.Version)
	if !slices.Equal(tests, pgpilotTests) {
		t.Fatalf("the configuration runs pgpilot tests %v, want %v", tests, pgpilotTests)
	}
	binary := buildScorecardTests(t)
	kubeconfig := scorecardUser(t, "scorecard")
	for _, name := range tests {
		t.Run(name, func(t *testing.T) {
			r := runPgpilotTest(t, binary, kubeconfig, "scorecard", repoPath("bundle"), name)
			if r.State != scapiv1alpha3.PassState {
				t.Errorf("%s: %s\nerrors: %s\nlog:\n%s", name, r.State, strings.Join(r.Errors, "\n  "), r.Log)
			} else {
				t.Logf("%s: pass\n%s", name, r.Log)
			}
		})
	}
	// The built-in scorecard-test binary reads /bundle; so does pgpilot's by default.
	t.Run("reads /bundle by default", func(t *testing.T) {
		podBundleRoot(t)
		out := runInPodBundleRoot(t, repoPath("bundle"), binary, "crd-fields-documented")
		checkResult(t, out)
	})
}

// mutatedBundle copies the bundle and lets mutate change its CSV and CRD (as maps).
func mutatedBundle(t *testing.T, mutate func(csv, crd map[string]any)) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(repoPath("bundle"))); err != nil {
		t.Fatal(err)
	}
	csvFile := filepath.Join(dir, "manifests", "pgpilot-operator.clusterserviceversion.yaml")
	crdFile := filepath.Join(dir, "manifests", "postgres.pgpilot.io_postgresclusters.yaml")
	csv, crd := readMap(t, csvFile), readMap(t, crdFile)
	mutate(csv, crd)
	writeMap(t, csvFile, csv)
	writeMap(t, crdFile, crd)
	return dir
}

func readMap(t *testing.T, file string) map[string]any {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func writeMap(t *testing.T, file string, m map[string]any) {
	data, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editExample changes the alm-examples PostgresCluster "example" (config/samples' first).
func editExample(t *testing.T, csv map[string]any, edit func(example *unstructured.Unstructured)) {
	annotations := csv["metadata"].(map[string]any)["annotations"].(map[string]any)
	var examples []map[string]any
	if err := json.Unmarshal([]byte(annotations["alm-examples"].(string)), &examples); err != nil {
		t.Fatal(err)
	}
	for i := range examples {
		if u := (&unstructured.Unstructured{Object: examples[i]}); u.GetKind() == "PostgresCluster" && u.GetName() == "example" {
			edit(u)
		}
	}
	data, err := json.Marshal(examples)
	if err != nil {
		t.Fatal(err)
	}
	annotations["alm-examples"] = string(data)
}

func ownedDescription(csv map[string]any) map[string]any {
	spec := csv["spec"].(map[string]any)
	for _, owned := range spec["customresourcedefinitions"].(map[string]any)["owned"].([]any) {
		if owned.(map[string]any)["kind"] == "PostgresCluster" {
			return owned.(map[string]any)
		}
	}
	panic("the CSV owns no PostgresCluster")
}

// pgpilot's scorecard tests are not vacuous: each fails on a bundle with the defect it is for.
func TestScorecardPgpilotTestsCatchDefects(t *testing.T) {
	binary := buildScorecardTests(t)
	kubeconfig := scorecardUser(t, "scorecard-defects")
	cases := []struct {
		name, test, wantError string
		mutate                func(t *testing.T, csv, crd map[string]any)
	}{{
		name: "example sets a parameter pgpilot manages", test: "alm-examples-accepted",
		wantError: "postgresql.parameters.port is managed by pgpilot and cannot be set",
		mutate: func(t *testing.T, csv, _ map[string]any) {
			editExample(t, csv, func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "5433", "spec", "postgresql", "parameters", "port")
			})
		},
	}, {
		name: "example has a field the CRD lacks", test: "alm-examples-accepted",
		wantError: `unknown field "spec.replicas"`,
		mutate: func(t *testing.T, csv, _ map[string]any) {
			editExample(t, csv, func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "replicas")
			})
		},
	}, {
		name: "example out of range", test: "alm-examples-accepted",
		wantError: "spec.instances",
		mutate: func(t *testing.T, csv, _ map[string]any) {
			editExample(t, csv, func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, int64(12), "spec", "instances")
			})
		},
	}, {
		name: "undocumented field", test: "crd-fields-documented",
		wantError: "PostgresCluster.spec.storage.size has no description",
		mutate: func(t *testing.T, _, crd map[string]any) {
			versions := crd["spec"].(map[string]any)["versions"].([]any)
			props := versions[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
			storage := props["properties"].(map[string]any)["spec"].(map[string]any)["properties"].(map[string]any)["storage"].(map[string]any)
			delete(storage["properties"].(map[string]any)["size"].(map[string]any), "description")
		},
	}, {
		name: "stale descriptor path", test: "descriptors-match-schema",
		wantError: `spec descriptor "storage.sizes": the schema has no field "sizes" under storage`,
		mutate: func(t *testing.T, csv, _ map[string]any) {
			for _, d := range ownedDescription(csv)["specDescriptors"].([]any) {
				if d.(map[string]any)["path"] == "storage.size" {
					d.(map[string]any)["path"] = "storage.sizes"
				}
			}
		},
	}, {
		name: "field without a descriptor", test: "descriptors-match-schema",
		wantError: "spec.scheduling has no spec descriptor",
		mutate: func(t *testing.T, csv, _ map[string]any) {
			owned := ownedDescription(csv)
			var kept []any
			for _, d := range owned["specDescriptors"].([]any) {
				if d.(map[string]any)["path"] != "scheduling" {
					kept = append(kept, d)
				}
			}
			owned["specDescriptors"] = kept
		},
	}, {
		name: "not a descriptor URN", test: "descriptors-match-schema",
		wantError: `x-descriptor "podCount" is not an urn:alm:descriptor URN`,
		mutate: func(t *testing.T, csv, _ map[string]any) {
			for _, d := range ownedDescription(csv)["specDescriptors"].([]any) {
				if d.(map[string]any)["path"] == "instances" {
					d.(map[string]any)["x-descriptors"] = []any{"podCount"}
				}
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := mutatedBundle(t, func(csv, crd map[string]any) { tc.mutate(t, csv, crd) })
			r := runPgpilotTest(t, binary, kubeconfig, "scorecard-defects", dir, tc.test)
			if r.State != scapiv1alpha3.FailState {
				t.Fatalf("%s passed a bundle with a defect (%s): %+v", tc.test, tc.name, r)
			}
			if !strings.Contains(strings.Join(r.Errors, "\n"), tc.wantError) {
				t.Errorf("%s errors:\n%s\nwant one containing %q", tc.test, strings.Join(r.Errors, "\n"), tc.wantError)
			}
		})
	}
}

// The API server accepts the CSV's Deployment as OLM will create it, downward-API
// WATCH_NAMESPACE included.
func TestCSVDeploymentIsAcceptedByTheAPIServer(t *testing.T) {
	plane := controlPlane(t)
	c, err := client.New(plane.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "operators"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for _, d := range bundleCSV(t).Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: ns}, Spec: d.Spec}
		if err := c.Create(ctx, dep, client.DryRunAll); err != nil {
			t.Errorf("deployment %s: %v", d.Name, err)
		}
	}
}
