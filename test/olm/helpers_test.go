// Package olm_test checks pgpilot's OLM packaging: the bundle (bundle/) is what `make bundle`
// generates, passes operator-sdk's validators without a warning, passes every scorecard test
// of its configuration (operator-sdk's built-in ones through the scorecard-test binary, and
// pgpilot's own from test/scorecard against a real kube-apiserver), and the file-based catalog
// (catalog/) validates with opm and holds the upgrade graph.
//
// The tools come from OPERATOR_SDK, SCORECARD_TEST and OPM (paths to the binaries) or, when
// unset, from hack/toolchain.sh, which builds them from the Go module proxy the first time.
// A missing tool is a failure, never a skip.
package olm_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/pgpilot/pgpilot-operator/internal/yamldocs"
	"github.com/pgpilot/pgpilot-operator/test/controlplane"
)

// repoRoot is the repository's top directory (tests run in test/olm).
var repoRoot = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}()

func repoPath(elem ...string) string {
	return filepath.Join(append([]string{repoRoot}, elem...)...)
}

var (
	toolsMu sync.Mutex
	tools   = map[string]string{}
)

// tool returns the path of binary, from the environment variable env or from the cache folder
// `hack/toolchain.sh toolchain` prints (building it if needed).
func tool(t *testing.T, env, toolchain, binary string) string {
	t.Helper()
	toolsMu.Lock()
	defer toolsMu.Unlock()
	if path, ok := tools[binary]; ok {
		return path
	}
	path := os.Getenv(env)
	if path != "" {
		if !filepath.IsAbs(path) {
			path = repoPath(path)
		}
	} else {
		cmd := exec.Command(repoPath("hack", "toolchain.sh"), toolchain)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("hack/toolchain.sh %s failed (set %s to a %s binary instead): %v\n%s",
				toolchain, env, binary, err, stderr.String())
		}
		path = filepath.Join(strings.TrimSpace(string(out)), binary)
	}
	if info, err := os.Stat(path); err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		t.Fatalf("%s is not an executable %s (from %s or hack/toolchain.sh %s): %v", path, binary, env, toolchain, err)
	}
	tools[binary] = path
	return path
}

func operatorSDK(t *testing.T) string {
	return tool(t, "OPERATOR_SDK", "operator-sdk", "operator-sdk")
}

func scorecardTest(t *testing.T) string {
	return tool(t, "SCORECARD_TEST", "operator-sdk", "scorecard-test")
}

func opm(t *testing.T) string {
	return tool(t, "OPM", "opm", "opm")
}

// run runs a command in dir and returns its stdout; it fails the test with the output when the
// command fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	out, err := runErr(dir, env, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runErr(dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w\nstdout:\n%s\nstderr:\n%s",
			name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes(), nil
}

var (
	cpOnce sync.Once
	cp     *controlplane.ControlPlane
	cpErr  error
)

// controlPlane starts one kube-apiserver (with etcd and kube-controller-manager) for the
// package, with the bundle's CRDs installed; TestMain stops it.
func controlPlane(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	cpOnce.Do(func() {
		cp, cpErr = controlplane.Start(repoPath("bundle", "manifests"))
	})
	if cpErr != nil {
		t.Fatalf("start the test control plane: %v", cpErr)
	}
	return cp
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cp != nil {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
		}
	}
	os.Exit(code)
}

// makeVar reads a variable as the Makefile computes it (`make print-NAME`), so the tests and the
// Makefile's targets agree on names such as BUNDLE_IMAGE_TEMPLATE.
func makeVar(t *testing.T, name string) string {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "-s", "print-"+name)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make print-%s: %v", name, err)
	}
	value := strings.TrimSpace(string(out))
	if value == "" {
		t.Fatalf("the Makefile sets no %s", name)
	}
	return value
}

// yamlDocs splits a YAML stream into its non-empty documents.
func yamlDocs(t *testing.T, data []byte) [][]byte {
	t.Helper()
	docs, err := yamldocs.Split(data)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// manifests reads the objects of a bundle's manifests/ folder.
func manifests(t *testing.T, bundleDir string) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(bundleDir, "manifests", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", bundleDir, err)
	}
	var objs []*unstructured.Unstructured
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range yamlDocs(t, data) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			objs = append(objs, u)
		}
	}
	return objs
}

func convert(t *testing.T, from any, to any) {
	t.Helper()
	data, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(to); err != nil {
		t.Fatalf("decode %T: %v", to, err)
	}
}

func csvOf(t *testing.T, objs []*unstructured.Unstructured) *operatorsv1alpha1.ClusterServiceVersion {
	t.Helper()
	var csv *operatorsv1alpha1.ClusterServiceVersion
	for _, u := range objs {
		if u.GetKind() == "ClusterServiceVersion" {
			if csv != nil {
				t.Fatal("more than one ClusterServiceVersion")
			}
			csv = &operatorsv1alpha1.ClusterServiceVersion{}
			convert(t, u.Object, csv)
		}
	}
	if csv == nil {
		t.Fatal("no ClusterServiceVersion")
	}
	return csv
}

func bundleCSV(t *testing.T) *operatorsv1alpha1.ClusterServiceVersion {
	return csvOf(t, manifests(t, repoPath("bundle")))
}

type validateOutput struct {
	Passed  bool `json:"passed"`
	Outputs []struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"outputs"`
}
