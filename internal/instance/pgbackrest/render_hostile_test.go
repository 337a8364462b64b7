package pgbackrest_test

import (
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/internal/instance/pgbackrest"
)

func renderable(o pgbackrest.Options) pgbackrest.Options {
	o.Stanza = "db"
	o.DataDir, o.SocketDir, o.StateDir, o.Port = "/data", "/run", "/state", 5432
	return o
}

// Every value a spec reaches pgbackrest.conf with stays one option: no line break or NUL gets
// through, whatever the API server let in (a region "us-east-1\nrepo1-storage-verify-tls=n"
// turned certificate checks off before the CRD's patterns).
func TestRenderRefusesValuesThatEndTheirLine(t *testing.T) {
	for _, hostile := range []pgbackrest.Repository{
		{Endpoint: "s3", Bucket: "b", Region: "us-east-1\nrepo1-storage-verify-tls=n"},
		{Endpoint: "s3", Bucket: "b", Region: "x\r[global:archive-push]"},
		{Endpoint: "s3", Bucket: "b", Path: "/pgpilot/ns/db\nrepo1-path=/elsewhere"},
		{Endpoint: "s3\x00", Bucket: "b"},
	} {
		if out, err := pgbackrest.Render(renderable(pgbackrest.Options{Repository: hostile})); err == nil {
			t.Errorf("%+v rendered:\n%s", hostile, out)
		}
	}
	out, err := pgbackrest.Render(renderable(pgbackrest.Options{Repository: pgbackrest.Repository{
		Endpoint: "s3.eu-west-1.amazonaws.com", Bucket: "b", Region: "eu-west-1", Path: "/pgpilot/ns/db"}}))
	if err != nil || !strings.Contains(out, "repo1-s3-region=eu-west-1\n") {
		t.Fatalf("a plain repository: %v\n%s", err, out)
	}
}

// FuzzRender: whatever the repository's strings, a rendered file has exactly the two sections
// and one option per line, each of a name pgpilot writes.
func FuzzRender(f *testing.F) {
	f.Add("s3", "bucket", "/pgpilot/ns/db", "us-east-1")
	f.Add("s3", "b", "/p", "us-east-1\nrepo1-storage-verify-tls=n")
	f.Add("s3]\n[x", "b", "/p\r", "r")
	f.Fuzz(func(t *testing.T, endpoint, bucket, path, region string) {
		out, err := pgbackrest.Render(renderable(pgbackrest.Options{Repository: pgbackrest.Repository{
			Endpoint: endpoint, Bucket: bucket, Path: path, Region: region}}))
		if err != nil {
			return
		}
		sections, seen := 0, map[string]bool{}
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			switch {
			case line == "":
			case line == "[global]" || line == "[db]":
				sections++
			case strings.HasPrefix(line, "["):
				t.Fatalf("a section of the input's making: %q\n%s", line, out)
			default:
				name, _, ok := strings.Cut(line, "=")
				if !ok || !knownOption(name) || seen[name] {
					t.Fatalf("an option of the input's making: %q\n%s", line, out)
				}
				seen[name] = true
			}
		}
		if sections != 2 {
			t.Fatalf("%d sections\n%s", sections, out)
		}
	})
}

func knownOption(name string) bool {
	return map[string]bool{"repo1-type": true, "repo1-s3-endpoint": true, "repo1-s3-bucket": true, "repo1-s3-region": true,
		"repo1-s3-uri-style": true, "repo1-path": true, "archive-async": true, "spool-path": true, "lock-path": true,
		"log-path": true, "log-level-console": true, "log-level-file": true, "process-max": true, "compress-type": true,
		"start-fast": true, "delta": true, "pg1-path": true, "pg1-socket-path": true, "pg1-port": true, "pg1-user": true}[name]
}
