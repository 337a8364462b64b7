package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// recordSink keeps the JSON records CollectLogs hands over.
type recordSink struct {
	mu      sync.Mutex
	records []map[string]any
}

func (s *recordSink) add(line []byte) {
	var r map[string]any
	if err := json.Unmarshal(line, &r); err != nil {
		r = map[string]any{"unparsed": string(line)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, r)
}

// find returns the first record whose fields include want.
func (s *recordSink) find(want map[string]string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.records {
		matches := true
		for k, v := range want {
			if fmt.Sprint(r[k]) != v {
				matches = false
			}
		}
		if matches {
			return r
		}
	}
	return nil
}

// A real server logs JSON records through its logging collector into pipes the agent reads:
// a failed login arrives as a record with its SQL state and client, the log directory holds
// pipes and no file, and a restarted server's records keep arriving.
func TestCollectLogsReadsJSONRecordsFromPipes(t *testing.T) {
	ctx := context.Background()
	inst := pgtest.NewInstance(t, "logs")
	sink := &recordSink{}
	dir := filepath.Join(filepath.Dir(inst.DataDir), "log")
	if err := inst.CollectLogs(dir, sink.add); err != nil {
		t.Fatal(err)
	}
	if err := inst.InitDB(ctx, superuserPassword); err != nil {
		t.Fatal(err)
	}
	if err := inst.Start(); err != nil {
		t.Fatal(err)
	}
	pgtest.Connect(t, inst, "postgres", superuserPassword, "postgres")

	failLogin := func() {
		conn, err := postgres.Connect(ctx, inst.Port, "postgres", "wrong", "postgres")
		if err == nil {
			_ = conn.Close(ctx)
			t.Fatal("a wrong password was accepted")
		}
	}
	failed := map[string]string{"state_code": "28P01", "error_severity": "FATAL", "user": "postgres", "backend_type": "client backend"}
	failLogin()
	pgtest.Eventually(t, "the failed login's record", func() error {
		if r := sink.find(failed); r == nil || r["remote_host"] != "127.0.0.1" {
			return fmt.Errorf("no record %v with remote_host 127.0.0.1 in %d records", failed, len(sink.records))
		}
		return nil
	})

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type()&os.ModeNamedPipe == 0 {
			t.Errorf("%s in the log directory is not a pipe (%s): logs must not grow on the volume", e.Name(), e.Type())
		}
	}
	if len(entries) != 2 {
		t.Errorf("log directory holds %d entries, want the JSON and the other pipe", len(entries))
	}

	if err := inst.Restart(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	pgtest.Connect(t, inst, "postgres", superuserPassword, "postgres")
	var before int
	sink.mu.Lock()
	before = len(sink.records)
	sink.mu.Unlock()
	failLogin()
	pgtest.Eventually(t, "a record after the restart", func() error {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, r := range sink.records[before:] {
			if r["state_code"] == "28P01" {
				return nil
			}
		}
		return fmt.Errorf("no failed-login record among %d since the restart", len(sink.records)-before)
	})
}

// Without a configuration file nothing could turn the collector on: CollectLogs says so.
func TestCollectLogsNeedsAConfigurationFile(t *testing.T) {
	inst := &postgres.Instance{DataDir: t.TempDir()}
	err := inst.CollectLogs(t.TempDir(), func([]byte) {})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("configuration file")) {
		t.Fatalf("CollectLogs without a ConfigFile = %v, want an error about the configuration file", err)
	}
}
