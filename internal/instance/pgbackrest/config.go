// Package pgbackrest runs pgBackRest for the instance agent: its configuration, the archive
// command PostgreSQL calls, and the commands that create a stanza, take and list backups and
// restore one. The repository's keys never reach a file: pgBackRest reads them from its
// environment (PGBACKREST_REPO1_S3_KEY and _KEY_SECRET).
package pgbackrest

import (
	"cmp"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Repository is an S3-compatible bucket holding backups and archived WAL.
type Repository struct {
	// Endpoint is the S3 server's host name or address, without scheme or port.
	Endpoint string
	// Port of the S3 server; 0 means 443.
	Port   int
	Bucket string
	// Path inside the bucket, e.g. /pgpilot/<namespace>/<cluster>.
	Path   string
	Region string
	// URIStyle is "host" (bucket.endpoint) or "path" (endpoint/bucket).
	URIStyle string
	// CAFile verifies the server's certificate; empty means the system's roots.
	CAFile string
}

// Options is everything pgBackRest needs on an instance besides the keys.
type Options struct {
	Stanza     string
	Repository Repository
	DataDir    string
	// SocketDir and Port reach the local PostgreSQL.
	SocketDir string
	Port      int
	User      string
	// StateDir holds pgBackRest's spool (asynchronous archiving), locks and logs; on the data
	// volume, so a queued WAL segment survives a restart.
	StateDir string
	// ProcessMax is the parallelism of backups, restores and asynchronous archiving.
	ProcessMax int
	// CompressType: none, gz, lz4 or zst.
	CompressType string
	// RetentionFull keeps this many full backups (and the WAL they need); 0 keeps all.
	RetentionFull int
	// RetentionFullType: count (the default) or time, when RetentionFull is days.
	RetentionFullType string
	// ArchiveTimeout bounds how long one archive_command waits for its segment to reach the
	// repository; 0 means pgBackRest's default (60 s). It is also how soon a failing repository
	// shows in pg_stat_archiver.
	ArchiveTimeout time.Duration
}

// Render is pgbackrest.conf for o. A value that would end its line (a line break, a NUL) is
// refused: it would be read as more options, or a section, of the user's choosing. The CRD's
// patterns refuse such values first; this holds for objects stored before them.
func Render(o Options) (string, error) {
	global := map[string]string{
		"repo1-type":         "s3",
		"repo1-s3-endpoint":  o.Repository.Endpoint,
		"repo1-s3-bucket":    o.Repository.Bucket,
		"repo1-s3-region":    o.Repository.Region,
		"repo1-s3-uri-style": cmp.Or(o.Repository.URIStyle, "host"),
		"repo1-path":         cmp.Or(o.Repository.Path, "/"),
		"archive-async":      "y",
		"spool-path":         filepath.Join(o.StateDir, "spool"),
		"lock-path":          filepath.Join(o.StateDir, "lock"),
		"log-path":           filepath.Join(o.StateDir, "log"),
		"log-level-console":  "info",
		"log-level-file":     "off",
		"process-max":        strconv.Itoa(max(o.ProcessMax, 1)),
		"compress-type":      cmp.Or(o.CompressType, "lz4"),
		"start-fast":         "y",
		"delta":              "y",
	}
	if o.Repository.Port != 0 {
		global["repo1-storage-port"] = strconv.Itoa(o.Repository.Port)
	}
	if o.Repository.CAFile != "" {
		global["repo1-storage-ca-file"] = o.Repository.CAFile
	}
	if o.ArchiveTimeout > 0 {
		global["archive-timeout"] = strconv.Itoa(int(o.ArchiveTimeout.Seconds()))
	}
	if o.RetentionFull > 0 {
		global["repo1-retention-full"] = strconv.Itoa(o.RetentionFull)
		global["repo1-retention-full-type"] = cmp.Or(o.RetentionFullType, "count")
	}
	stanza := map[string]string{
		"pg1-path":        o.DataDir,
		"pg1-socket-path": o.SocketDir,
		"pg1-port":        strconv.Itoa(o.Port),
		"pg1-user":        cmp.Or(o.User, "postgres"),
	}
	for _, options := range []map[string]string{global, stanza, {"stanza": o.Stanza}} {
		for k, v := range options {
			if strings.ContainsAny(v, "\r\n\x00") || strings.ContainsAny(k, "\r\n\x00=[]") {
				return "", fmt.Errorf("pgbackrest.conf: %s has a line break or NUL in its value %q", k, v)
			}
		}
	}
	var b strings.Builder
	section(&b, "global", global)
	section(&b, o.Stanza, stanza)
	return b.String(), nil
}

func section(b *strings.Builder, name string, options map[string]string) {
	fmt.Fprintf(b, "[%s]\n", name)
	keys := make([]string, 0, len(options))
	for k, v := range options {
		if v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "%s=%s\n", k, options[k])
	}
	b.WriteString("\n")
}
