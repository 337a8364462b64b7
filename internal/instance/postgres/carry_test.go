package postgres_test

import (
	"bytes"
	"context"
	"debug/elf"
	"maps"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// What a carry reads from the dynamic loader's own list is what ldd lists, for the executables
// and a dozen modules of the server the tests run (ldd takes seconds for all), and for modules
// alone (which name no loader).
func TestLinkedLibrariesAreWhatLddLists(t *testing.T) {
	bin := pgtest.BinDir(t)
	executables, _ := filepath.Glob(filepath.Join(bin, "*"))
	modules, _ := filepath.Glob(filepath.Join(bin, "..", "lib", "*.so"))
	if len(executables) == 0 || len(modules) == 0 {
		t.Fatalf("no server files under %s: %d executables, %d modules", bin, len(executables), len(modules))
	}
	modules = modules[:min(len(modules), 12)]
	for name, files := range map[string][]string{
		"executables and modules": append(executables, modules...),
		"modules alone":           modules,
	} {
		got, err := postgres.LinkedLibraries(context.Background(), files, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := lddLists(files)
		if len(want) == 0 || !maps.Equal(got, want) {
			t.Errorf("%s: the loader's list\n%v\nldd's\n%v", name, got, want)
		}
	}
}

// A library the loader cannot find is what a carry links: the loader names it as ldd does, and
// goes on to the others (its --list option stops at the first).
func TestMissingLibrariesAreWhatLddFindsMissing(t *testing.T) {
	server := filepath.Join(pgtest.BinDir(t), "postgres")
	f, err := elf.Open(server)
	if err != nil {
		t.Fatal(err)
	}
	needed, err := f.ImportedLibraries()
	_ = f.Close()
	if err != nil || len(needed) < 2 {
		t.Fatalf("%s links %v (%v): want two libraries or more", server, needed, err)
	}
	// A copy of the server that links the first of them under a name no library has.
	content, err := os.ReadFile(server)
	if err != nil {
		t.Fatal(err)
	}
	gone := "X" + needed[0][1:]
	copied := filepath.Join(t.TempDir(), "postgres")
	patched := bytes.Replace(content, []byte(needed[0]+"\x00"), []byte(gone+"\x00"), 1)
	if err := os.WriteFile(copied, patched, 0o755); err != nil {
		t.Fatal(err)
	}
	missing, err := postgres.MissingLibraries(context.Background(), []string{copied}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := osexec.Command("ldd", copied).Output()
	if want := []string{gone}; !slices.Equal(missing, want) || !bytes.Contains(out, []byte(gone+" => not found")) {
		t.Errorf("missing %v, want %v; ldd said:\n%s", missing, want, out)
	}
	resolved, err := postgres.LinkedLibraries(context.Background(), []string{copied}, nil)
	if err != nil || resolved[needed[1]] == "" {
		t.Errorf("the other libraries are still listed: %v (%v), want %s among them", resolved, err, needed[1])
	}
	// Found on the path the carry gives its server, as Link makes it: nothing missing.
	path := t.TempDir()
	if err := os.Symlink(lddLists([]string{server})[needed[0]], filepath.Join(path, gone)); err != nil {
		t.Fatal(err)
	}
	missing, err = postgres.MissingLibraries(context.Background(), []string{copied}, []string{"LD_LIBRARY_PATH=" + path})
	if err != nil || len(missing) > 0 {
		t.Errorf("with %s linked on LD_LIBRARY_PATH, still missing %v (%v)", gone, missing, err)
	}
}

// lddLists is the library path ldd finds for each soname the files link.
func lddLists(files []string) map[string]string {
	found := map[string]string{}
	for _, file := range files {
		out, _ := osexec.Command("ldd", file).Output()
		postgres.ParseLddOutput(out, func(soname, path string) {
			if strings.HasPrefix(path, "/") {
				found[soname] = path
			}
		})
	}
	return found
}
