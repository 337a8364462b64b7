package olm_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `make bundle catalog` reproduces the committed bundle, catalog and config exactly: nothing in
// them depends on time or on the machine, and nobody edited generated files by hand. It runs
// in a copy of the working tree, so the tree itself is never touched.
func TestMakeBundleCatalogLeavesNoDiff(t *testing.T) {
	// Make sure the tools are there first (and fail clearly if not).
	operatorSDK(t)
	opm(t)

	files := strings.Split(strings.TrimRight(string(run(t, repoRoot, nil,
		"git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")), "\x00"), "\x00")
	copyDir := filepath.Join(t.TempDir(), "src")
	for _, f := range files {
		if f == "" {
			continue
		}
		src, dst := repoPath(f), filepath.Join(copyDir, f)
		info, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if info.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, dst); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	// Reuse the installed kustomize and controller-gen rather than installing them again.
	if err := os.MkdirAll(filepath.Join(copyDir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(repoPath("bin"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "kustomize") || strings.HasPrefix(e.Name(), "controller-gen") {
			target := repoPath("bin", e.Name())
			if resolved, err := filepath.EvalSymlinks(target); err == nil {
				target = resolved
			}
			if err := os.Symlink(target, filepath.Join(copyDir, "bin", e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}

	run(t, copyDir, nil, "make", "bundle", "catalog")

	for _, path := range []string{"bundle", "bundle.Dockerfile", "catalog", "config"} {
		diff, err := runErr(repoRoot, nil, "diff", "-ru", repoPath(path), filepath.Join(copyDir, path))
		if err != nil {
			t.Errorf("`make bundle catalog` changes %s: run it and commit the result\n%s", path, truncate(string(diff), 4000))
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "\n... (truncated)"
}
