package pgbackrest

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	base := Options{Stanza: "db", DataDir: "/var/lib/postgresql/data/pgdata", SocketDir: "/run/postgresql", Port: 5432,
		StateDir:   "/var/lib/postgresql/data/pgbackrest",
		Repository: Repository{Endpoint: "s3.example.test", Bucket: "backups", Region: "eu-west-1"}}
	for _, tc := range []struct {
		name        string
		change      func(*Options)
		want, avoid []string
	}{
		{"defaults", func(*Options) {}, []string{
			"[global]\n", "repo1-type=s3\n", "repo1-s3-endpoint=s3.example.test\n", "repo1-s3-bucket=backups\n",
			"repo1-s3-region=eu-west-1\n", "repo1-s3-uri-style=host\n", "repo1-path=/\n", "archive-async=y\n",
			"spool-path=/var/lib/postgresql/data/pgbackrest/spool\n", "process-max=1\n", "compress-type=lz4\n",
			"\n[db]\n", "pg1-path=/var/lib/postgresql/data/pgdata\n", "pg1-port=5432\n", "pg1-socket-path=/run/postgresql\n",
			"pg1-user=postgres\n"},
			[]string{"repo1-storage-port", "repo1-storage-ca-file", "repo1-retention-full", "archive-timeout", "key"}},
		{"port, CA, path style, retention, parallelism", func(o *Options) {
			o.Repository.Port, o.Repository.CAFile, o.Repository.URIStyle, o.Repository.Path = 9000, "/etc/ca.crt", "path", "/pg/ns/db"
			o.RetentionFull, o.ProcessMax, o.CompressType, o.ArchiveTimeout = 3, 4, "zst", 15*time.Second
		}, []string{"archive-timeout=15\n", "repo1-storage-port=9000\n", "repo1-storage-ca-file=/etc/ca.crt\n", "repo1-s3-uri-style=path\n",
			"repo1-path=/pg/ns/db\n", "repo1-retention-full=3\n", "process-max=4\n", "compress-type=zst\n"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.change(&o)
			got, err := Render(o)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("missing %q in:\n%s", w, got)
				}
			}
			for _, a := range tc.avoid {
				if strings.Contains(got, a) {
					t.Errorf("unexpected %q in:\n%s", a, got)
				}
			}
		})
	}
}

// testdata/info.json is what pgBackRest printed in the integration test
// (PGPILOT_UPDATE_TESTDATA=1 go test ./internal/instance/pgbackrest/ rewrites it).
func TestParseInfo(t *testing.T) {
	data, err := os.ReadFile("testdata/info.json")
	if err != nil {
		t.Fatal(err)
	}
	info, err := ParseInfo(data, "db")
	if err != nil {
		t.Fatal(err)
	}
	if info.Status.Code != 0 || len(info.Backups) != 2 || len(info.Archive) != 1 {
		t.Fatalf("parsed %+v", info)
	}
	full, incr := info.Backups[0], info.Backups[1]
	if full.Type != Full || incr.Type != Incr || !strings.HasPrefix(incr.Label, full.Label+"_") ||
		full.Timestamp.Stop < full.Timestamp.Start || full.LSN.Start == "" || full.Archive.Stop == "" ||
		full.Info.Size == 0 || full.Info.Repository.Size == 0 {
		t.Errorf("backups %+v", info.Backups)
	}
	if info.Archive[0].ID != "15-1" || info.Archive[0].Min > info.Archive[0].Max {
		t.Errorf("archive %+v", info.Archive)
	}
	if _, err := ParseInfo(data, "other"); err == nil {
		t.Error("a stanza that is not there was found")
	}
	if _, err := ParseInfo([]byte("ERROR: [041]"), "db"); err == nil {
		t.Error("output that is not JSON was parsed")
	}
}

func TestParseDeltaReport(t *testing.T) {
	out := []byte(`P02 DETAIL: restore file /d/pgdata/base/5/16390 - exists and matches backup (21.4MB, 18.34%) checksum d9fe
P02 DETAIL: restore file /d/pgdata/base/5/1255 (792KB, 19.01%) checksum 50bd
P01 DETAIL: restore file /d/pgdata/base/5/16385 - exists and matches backup (73MB, 81.46%) checksum 44b4
P01 DETAIL: restore file /d/pgdata/global/pg_control.pgbackrest.tmp (8KB, 100.00%) checksum 1a2b
P00 DETAIL: remove invalid files/links/paths from '/d/pgdata'
P00 INFO: restore size = 116.5MB, file total = 1920`)
	got := parseDeltaReport(out)
	want := DeltaReport{Copied: 792<<10 + 8<<10, Kept: 22439526 + 73<<20} // 21.4 MiB, as pgBackRest rounds it
	if got != want {
		t.Fatalf("parseDeltaReport() = %+v, want %+v", got, want)
	}
}
