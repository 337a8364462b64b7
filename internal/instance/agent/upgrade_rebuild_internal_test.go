package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// A clone's bytes are its files', in every directory, links and directories not counted.
func TestDirectoryBytesCountsTheFilesACloneWrote(t *testing.T) {
	dir := t.TempDir()
	for path, size := range map[string]int{"PG_VERSION": 3, "base/5/16384": 8192, "base/5/16384_fsm": 24576, "pg_wal/000000010000000000000003": 1 << 20} {
		full := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/nowhere", filepath.Join(dir, "pg_tblspc")); err != nil {
		t.Fatal(err)
	}
	if got, err := directoryBytes(dir); err != nil || got != 3+8192+24576+1<<20 {
		t.Fatalf("directoryBytes = %d, %v; want %d", got, err, 3+8192+24576+1<<20)
	}
}
