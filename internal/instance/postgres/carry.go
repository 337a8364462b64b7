package postgres

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A major upgrade runs pg_upgrade of the new major in the new major's image, and pg_upgrade runs
// the old major's server. pgpilot's images sit on three Debian releases, so the old binaries are
// carried over from the old image (an init container of the old image runs Carry) together with
// the shared libraries they link: the new release lacks some of them (ICU, LDAP and libxml2 of
// older sonames). The C library is not carried: the new release's is newer, and glibc runs
// binaries built against an older one.

// Carried is an older major's server binaries, copied out of its image into dir.
type Carried struct {
	Dir   string
	Major int
}

// BinDir is where the carried server binaries are, in Debian's layout under Dir: the server
// finds its share and lib directories relative to it.
func (c Carried) BinDir() string { return filepath.Join(c.libDir(), "bin") }

func (c Carried) libDir() string {
	return filepath.Join(c.Dir, "usr/lib/postgresql", strconv.Itoa(c.Major))
}

func (c Carried) shareDir() string {
	return filepath.Join(c.Dir, "usr/share/postgresql", strconv.Itoa(c.Major))
}

// allLibraries holds every library the binaries linked in their own image; missingLibraries
// links to those of them the image they run in lacks (Link).
func (c Carried) allLibraries() string     { return filepath.Join(c.Dir, "lib-all") }
func (c Carried) missingLibraries() string { return filepath.Join(c.Dir, "lib") }

// FindCarried is the server carried into dir, if dir is set and holds one (of one major).
func FindCarried(dir string) (Carried, bool, error) {
	if dir == "" {
		return Carried{}, false, nil
	}
	majors, err := filepath.Glob(filepath.Join(dir, "usr/lib/postgresql/*"))
	if err != nil || len(majors) == 0 {
		return Carried{}, false, err
	}
	if len(majors) > 1 {
		return Carried{}, false, fmt.Errorf("%s holds %d carried majors, want one", dir, len(majors))
	}
	major, err := strconv.Atoi(filepath.Base(majors[0]))
	if err != nil {
		return Carried{}, false, fmt.Errorf("carried major %s: %w", majors[0], err)
	}
	return Carried{Dir: dir, Major: major}, true, nil
}

// UseCarried makes the instance run the carried server when its data directory is of the
// carried major: an instance rolled to the new major's image ahead of its upgrade runs its old
// data until then. It says whether it did.
func (i *Instance) UseCarried(ctx context.Context, c Carried) (bool, error) {
	dataMajor, err := i.DataMajor()
	if err != nil || dataMajor != c.Major {
		return false, err
	}
	if err := c.Link(ctx); err != nil {
		return false, err
	}
	i.BinDir, i.Env = c.BinDir(), append(slices.Clip(i.Env), c.Env()...)
	return true, nil
}

// LeaveCarried makes the instance run the image's server in binDir again, once its data
// directory was upgraded to that major.
func (i *Instance) LeaveCarried(c Carried, binDir string) {
	carriedEnv := c.Env()
	i.BinDir = binDir
	i.Env = slices.DeleteFunc(slices.Clone(i.Env), func(e string) bool { return slices.Contains(carriedEnv, e) })
}

// Env is the environment the carried binaries run with. Only libraries the running image lacks
// are on the path, so the new major's binaries, which inherit it through pg_upgrade, load their
// own.
func (c Carried) Env() []string { return []string{"LD_LIBRARY_PATH=" + c.missingLibraries()} }

// systemLibraries come with the C library: never carried, the running image's are used.
var systemLibraries = []string{"libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so",
	"libresolv.so", "libutil.so", "libanl.so", "ld-linux"}

// Carry copies major's server binaries, its lib and share directories and the libraries they
// link from this root (the old image) into dest. JIT is left behind (LLVM alone is bigger than
// the rest): the carried server runs only during the upgrade, with jit off.
func Carry(ctx context.Context, major int, dest string) (Carried, error) {
	c := Carried{Dir: dest, Major: major}
	source := Carried{Dir: "/", Major: major}
	if err := copyTree(source.libDir(), c.libDir(), skipJIT); err != nil {
		return c, fmt.Errorf("carry PostgreSQL %d: %w", major, err)
	}
	if err := copyTree(source.shareDir(), c.shareDir(), nil); err != nil {
		return c, fmt.Errorf("carry PostgreSQL %d: %w", major, err)
	}
	linked, err := linkedLibraries(ctx, c.elfFiles(), nil)
	if err != nil {
		return c, err
	}
	if err := os.MkdirAll(c.allLibraries(), 0o755); err != nil {
		return c, err
	}
	for soname, path := range linked {
		if isSystemLibrary(soname) {
			continue
		}
		if err := copyFile(path, filepath.Join(c.allLibraries(), soname), 0o644); err != nil {
			return c, fmt.Errorf("carry library %s: %w", soname, err)
		}
	}
	return c, os.MkdirAll(c.missingLibraries(), 0o755)
}

// Link makes the carried binaries run in this image: each library the dynamic loader cannot
// find here is linked from the carried ones, until nothing is missing (a carried library may
// need another this image lacks).
func (c Carried) Link(ctx context.Context) error {
	for range 8 {
		missing, err := missingLibraries(ctx, c.elfFiles(), c.Env())
		if err != nil || len(missing) == 0 {
			return err
		}
		for _, soname := range missing {
			source := filepath.Join(c.allLibraries(), soname)
			if _, err := os.Stat(source); err != nil {
				return fmt.Errorf("PostgreSQL %d's binaries need %s, which neither this image nor the carried libraries have", c.Major, soname)
			}
			link := filepath.Join(c.missingLibraries(), soname)
			if err := os.Symlink(source, link); err != nil && !os.IsExist(err) {
				return err
			}
		}
	}
	return fmt.Errorf("PostgreSQL %d's carried libraries: still missing some after 8 passes", c.Major)
}

// elfFiles are the executables and loadable modules the carried server may run.
func (c Carried) elfFiles() []string {
	files, _ := filepath.Glob(filepath.Join(c.BinDir(), "*"))
	modules, _ := filepath.Glob(filepath.Join(c.libDir(), "lib", "*.so"))
	return append(files, modules...)
}

func skipJIT(rel string, d fs.DirEntry) bool {
	return rel == "lib/bitcode" || strings.HasPrefix(d.Name(), "llvmjit")
}

func isSystemLibrary(soname string) bool {
	for _, prefix := range systemLibraries {
		if strings.HasPrefix(soname, prefix) {
			return true
		}
	}
	return false
}

// linkedLibraries asks the dynamic loader (ldd) which library file each soname the files link
// resolves to.
func linkedLibraries(ctx context.Context, files, env []string) (map[string]string, error) {
	resolved := map[string]string{}
	err := eachLddLine(ctx, files, env, func(soname, path string) {
		if strings.HasPrefix(path, "/") {
			resolved[soname] = path
		}
	})
	return resolved, err
}

func missingLibraries(ctx context.Context, files, env []string) ([]string, error) {
	seen := map[string]bool{}
	var missing []string
	err := eachLddLine(ctx, files, env, func(soname, path string) {
		if path == "not found" && !seen[soname] {
			seen[soname] = true
			missing = append(missing, soname)
		}
	})
	return missing, err
}

// eachLddLine lists the libraries each ELF file links, as ldd does, and calls line with its
// "soname => path" pairs. It runs the dynamic loader the executables name (PT_INTERP) in ldd's
// tracing mode itself: ldd is a shell script around that, which cost six times the CPU
// (PostgreSQL 15's 115 files: 6.6 s against 1.1 s), paid by every start of an upgrading instance,
// twice or more. (The loader's --list is not that mode: it stops at the first library it cannot
// find, the very ones a carry looks for.) Files that are not dynamically linked are skipped.
func eachLddLine(ctx context.Context, files, env []string, line func(soname, path string)) error {
	files, loader := dynamicELF(files)
	for _, file := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		out, err := lddCommand(ctx, loader, file, env).Output()
		if err != nil && !bytes.Contains(out, []byte("=>")) {
			continue // statically linked or not loadable here at all: nothing to resolve
		}
		parseLddOutput(out, line)
	}
	return nil
}

// lddCommand lists file's libraries: the loader in ldd's tracing mode, or ldd without one.
func lddCommand(ctx context.Context, loader, file string, env []string) *exec.Cmd {
	if loader == "" {
		cmd := exec.CommandContext(ctx, "ldd", file)
		cmd.Env = append(cmd.Environ(), env...)
		return cmd
	}
	cmd := exec.CommandContext(ctx, loader, file)
	cmd.Env = append(cmd.Environ(), append([]string{"LD_TRACE_LOADED_OBJECTS=1"}, env...)...)
	return cmd
}

// parseLddOutput calls line with each "soname => path" pair of ldd's output (the loader's list).
func parseLddOutput(out []byte, line func(soname, path string)) {
	scanner := bufio.NewScanner(bytes.NewReader(out))
	for scanner.Scan() {
		soname, rest, ok := strings.Cut(strings.TrimSpace(scanner.Text()), " => ")
		if !ok {
			continue
		}
		path, _, _ := strings.Cut(rest, " (")
		line(soname, strings.TrimSpace(path))
	}
}

// dynamicELF keeps the ELF files of files, and names the dynamic loader the first executable
// among them asks for (shared libraries name none; ldd finds it then).
func dynamicELF(files []string) ([]string, string) {
	var kept []string
	loader := ""
	for _, file := range files {
		f, err := elf.Open(file)
		if err != nil {
			continue // not ELF: a script
		}
		kept = append(kept, file)
		if loader == "" {
			loader = interpreter(f)
		}
		_ = f.Close()
	}
	return kept, loader
}

func interpreter(f *elf.File) string {
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			name, err := io.ReadAll(prog.Open())
			if err != nil {
				return ""
			}
			return strings.TrimRight(string(name), "\x00")
		}
	}
	return ""
}

// copyTree copies the regular files, directories and symlinks under src to dst, leaving out what
// skip says (relative path, entry).
func copyTree(src, dst string, skip func(rel string, d fs.DirEntry) bool) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if skip != nil && rel != "." && skip(rel, d) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if !filepath.IsAbs(link) {
				return os.Symlink(link, target)
			}
			// An absolute link points into the old image, which is not there at run time.
			return copyFile(path, target, 0o644)
		default:
			return copyFile(path, target, info.Mode().Perm())
		}
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
