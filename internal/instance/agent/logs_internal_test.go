package agent

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

func TestNotableRecords(t *testing.T) {
	for _, c := range []struct {
		name          string
		record        jsonRecord
		reason, about string
	}{
		{"wrong password", jsonRecord{Severity: "FATAL", StateCode: "28P01", Message: `password authentication failed for user "app"`, RemoteHost: "10.0.0.7"},
			agentapi.LogNoticeAuthenticationFailed, `password authentication failed for user "app" (from 10.0.0.7)`},
		{"no pg_hba.conf line", jsonRecord{Severity: "FATAL", StateCode: "28000", Message: `no pg_hba.conf entry for host "10.0.0.8"`},
			agentapi.LogNoticeAuthenticationFailed, `no pg_hba.conf entry for host "10.0.0.8"`},
		{"archive_command", jsonRecord{Severity: "WARNING", StateCode: "01000", Message: "archive command failed with exit code 1"},
			agentapi.LogNoticeArchiveCommandFailed, "archive command failed with exit code 1"},
		{"disk full", jsonRecord{Severity: "ERROR", StateCode: "53100", Message: "could not extend file: No space left on device"},
			agentapi.LogNoticeDiskFull, "could not extend file: No space left on device"},
		{"panic", jsonRecord{Severity: "PANIC", StateCode: "XX000", Message: "could not locate a valid checkpoint record"},
			agentapi.LogNoticePanic, "could not locate a valid checkpoint record"},
		{"a user's query error", jsonRecord{Severity: "ERROR", StateCode: "42601", Message: `syntax error at or near "SELEC"`}, "", ""},
		{"the server starting", jsonRecord{Severity: "FATAL", StateCode: "57P03", Message: "the database system is starting up"}, "", ""},
	} {
		if reason, about := notable(c.record); reason != c.reason || about != c.about {
			t.Errorf("%s: notable = %q %q, want %q %q", c.name, reason, about, c.reason, c.about)
		}
	}
}

func TestSeverityLevels(t *testing.T) {
	for severity, want := range map[string]slog.Level{"DEBUG1": slog.LevelDebug, "LOG": slog.LevelInfo, "INFO": slog.LevelInfo,
		"NOTICE": slog.LevelInfo, "WARNING": slog.LevelWarn, "ERROR": slog.LevelError, "FATAL": slog.LevelError, "PANIC": slog.LevelError} {
		if got := severityLevel(severity); got != want {
			t.Errorf("severityLevel(%s) = %v, want %v", severity, got, want)
		}
	}
}

// In the container, a PostgreSQL record is one JSON line of the agent's log: the record's
// severity as the level, its message, the instance and cluster, and its other fields.
func TestPostgresRecordsAreAgentLogLines(t *testing.T) {
	var out bytes.Buffer
	log := WithIdentity(logr.FromSlogHandler(slog.NewJSONHandler(&out, nil)).WithName("agent"),
		agentapi.Config{ClusterName: "db", PodName: "db-1"})
	p := newPostgresLog(log)
	p.record([]byte(`{"timestamp":"2026-12-02 02:36:00.599 GMT","user":"app","dbname":"app","remote_host":"10.0.0.7",` +
		`"error_severity":"FATAL","state_code":"28P01","message":"password authentication failed for user \"app\"","backend_type":"client backend"}` + "\n"))
	_, _ = p.Write([]byte("pushed WAL file '000000010000000000000005' to the archive\n"))

	var lines []map[string]any
	for line := range strings.Lines(out.String()) {
		if n := strings.Count(line, `"instance":`); n != 1 {
			t.Errorf("%d instance fields in %s", n, line)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q (%v)", line, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %s", len(lines), out.String())
	}
	record, _ := lines[0]["record"].(map[string]any)
	if lines[0]["level"] != "ERROR" || lines[0]["msg"] != `password authentication failed for user "app"` ||
		lines[0]["cluster"] != "db" || lines[0]["instance"] != "db-1" || record["state_code"] != "28P01" || record["user"] != "app" {
		t.Errorf("record line %v", lines[0])
	}
	if _, dup := record["message"]; dup {
		t.Errorf("the message is both the line's and the record's: %v", lines[0])
	}
	if lines[1]["level"] != "INFO" || lines[1]["stream"] != "stderr" || lines[1]["instance"] != "db-1" {
		t.Errorf("output line %v", lines[1])
	}
	if n := p.current(); len(n) != 1 || n[0].Reason != agentapi.LogNoticeAuthenticationFailed || n[0].Count != 1 ||
		!n[0].Last.Equal(time.Date(2026, 12, 2, 2, 36, 0, 599e6, time.UTC)) {
		t.Errorf("notices %+v", n)
	}
}
