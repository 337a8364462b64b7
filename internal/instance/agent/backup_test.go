package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// A cluster's agent archives its WAL through `agent pgbackrest archive-push` (the operator's
// archive_command), creates the stanza, takes a backup the operator asks for over the API and
// reports archiving; a new cluster's agent, on a volume where an earlier attempt was killed in
// the middle of the restore, restores that backup to a point in time, promotes, drops the
// recovery settings and archives into its own repository. Real PostgreSQL, real pgBackRest, a
// real S3 server.
func TestAgentArchivesBacksUpAndRecoversToATime(t *testing.T) {
	ctx := context.Background()
	s3 := pgtest.StartS3(t)
	sourceRepo := s3.Repository("/pgtest/default/db")

	source := startArchivingAgent(t, s3, "db", agentapi.BackupConfig{Repository: &sourceRepo, Compression: "lz4", Parallel: 2})
	conn := pgtest.Connect(t, source.Instance, "postgres", "super", "postgres")
	batches := pgtest.Batches{T: t, Conn: conn}
	// The source's agent of a synchronous cluster keeps synchronous_standby_names in
	// postgresql.auto.conf, which every backup carries. (Not loaded here: this source has no
	// standby to confirm its commits.)
	batches.Exec(`ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 ("db-1")'`)
	batches.Create()
	batches.Insert(1)
	waitForStanza(t, source)

	if code, body, err := postJSON(source.URL+agentapi.PathBackups, agentapi.BackupRequest{Name: "first", Type: "full"}); err != nil || code != http.StatusAccepted {
		t.Fatalf("start backup = %d %s (%v), want 202", code, body, err)
	}
	if code, _, err := postJSON(source.URL+agentapi.PathBackups, agentapi.BackupRequest{Name: "other", Type: "full"}); err != nil || code != http.StatusConflict {
		t.Fatalf("a second backup while one runs = %d (%v), want 409", code, err)
	}
	full := waitForBackup(t, source, "first")
	if full.Backup.Type != "full" || full.Backup.StopLSN == "" || full.Backup.StartWAL == "" || full.Backup.Size == 0 {
		t.Fatalf("backup record %+v", full.Backup)
	}

	target := batches.InsertAroundTarget(2)
	var segment string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&segment); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "batch 3's segment archived, as the agent reports", func() error {
		s, err := status(source)
		if err != nil || s.Archive == nil || s.Archive.LastArchivedWAL < segment || s.Archive.Failing() {
			return fmt.Errorf("archive %+v (%v), want %s", s.Archive, err, segment)
		}
		if !s.Archive.Enabled || s.Archive.WALBytes == 0 || s.Archive.VolumeFreeBytes == 0 || len(s.Archive.Backups) != 1 {
			return fmt.Errorf("archive %+v", s.Archive)
		}
		return nil
	})
	code, metrics, err := get(source.MetricsURL, "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("metrics: %d (%v)", code, err)
	}
	for _, line := range []string{"pgpilot_backups 1", "pgpilot_backup_last_completion_timestamp_seconds " + strconv.FormatFloat(float64(full.Backup.Stop), 'g', -1, 64),
		"pgpilot_archive_enabled 1", "pgpilot_archive_failing 0"} {
		if !strings.Contains(metrics, "\n"+line) {
			t.Errorf("metrics have no %q", line)
		}
	}
	if err := source.Stop(); err != nil {
		t.Fatal(err)
	}

	ownRepo := s3.Repository("/pgtest/default/restored")
	// The restored agent checks its files at a pod's pace, as slow as its stanza would come if
	// the restore did not make it.
	restored := startArchivingAgentWith(t, s3, "restored", agentapi.BackupConfig{Repository: &ownRepo, Compression: "lz4", Parallel: 2,
		Recovery: &agentapi.Recovery{Repository: sourceRepo, Target: agentapi.RecoveryTarget{Type: "time", Value: target.Format(time.RFC3339Nano)}}},
		func(o *agent.Options) { o.ConfigInterval = agent.DefaultOptions().ConfigInterval }, leaveInterruptedRestore)
	conn = pgtest.Connect(t, restored.Instance, "postgres", "super", "postgres")
	var rows, later int
	if err := conn.QueryRow(ctx, "SELECT count(*) FILTER (WHERE batch <= 2), count(*) FILTER (WHERE batch = 3) FROM batches").Scan(&rows, &later); err != nil {
		t.Fatal(err)
	}
	if rows != 200 || later != 0 {
		t.Fatalf("restored to %s: %d rows of batches 1–2 (want 200), %d of batch 3 (want 0)", target, rows, later)
	}
	s, err := status(restored)
	if err != nil || s.Role != agentapi.RolePrimary || s.Timeline != 2 {
		t.Fatalf("restored status %+v (%v), want a primary on timeline 2", s, err)
	}
	auto, err := os.ReadFile(filepath.Join(restored.Instance.DataDir, "postgresql.auto.conf"))
	if err != nil || strings.Contains(string(auto), "recovery_target") || strings.Contains(string(auto), "restore_command") {
		t.Fatalf("postgresql.auto.conf still has recovery settings (a clone would copy them): %s (%v)", auto, err)
	}
	// The source's standbys are not the restored cluster's: a commit waiting for them would
	// never return (the restored agent's own password changes first of all).
	commitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := conn.Exec(commitCtx, "INSERT INTO batches SELECT g, 9 FROM generate_series(900001, 900010) g"); err != nil {
		t.Fatalf("a commit on the restored server: %v (synchronous_standby_names kept from the source?)", err)
	}
	waitForStanza(t, restored)
	pgtest.Batches{T: t, Conn: conn}.Exec("SELECT pg_switch_wal()")
	pgtest.Eventually(t, "the restored cluster archives into its own repository", func() error {
		if keys := s3.ObjectKeys(t, "pgtest/default/restored/archive"); !containsTimeline2(keys) {
			return fmt.Errorf("archived: %v", keys)
		}
		return nil
	})
	// The stanza was there before the server archived anything: no push failed (a failed one
	// costs three retries and the archiver's minute of sleep).
	var failed int64
	if err := conn.QueryRow(ctx, "SELECT failed_count FROM pg_stat_archiver").Scan(&failed); err != nil || failed != 0 {
		t.Errorf("archive pushes failed on the restored server: %d (%v)", failed, err)
	}
}

func containsTimeline2(keys []string) bool {
	for _, k := range keys {
		if strings.Contains(filepath.Base(k), "00000002") {
			return true
		}
	}
	return false
}

// leaveInterruptedRestore leaves in inst's volume what an agent killed in the middle of a
// restore leaves: the restore marker and a partial data directory whose postmaster is gone.
func leaveInterruptedRestore(t *testing.T, inst *postgres.Instance) {
	volume := filepath.Dir(inst.DataDir)
	files := map[string]string{
		"pgpilot-restore.json":  "{}",
		"pgdata/PG_VERSION":     "15\n",
		"pgdata/postmaster.pid": "2147483647\n" + inst.DataDir + "\n",
		"pgdata/base/1/1259":    "partial",
		"pgdata/backup_label":   "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\n",
	}
	for name, content := range files {
		path := filepath.Join(volume, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// startArchivingAgent runs the initial primary of a new cluster named cluster with backup
// configuration b, archiving through the agent as in a pod; before, if given, prepares the
// instance's volume.
func startArchivingAgent(t *testing.T, s3 *pgtest.S3Server, cluster string, b agentapi.BackupConfig, before ...func(*testing.T, *postgres.Instance)) *pgtest.RunningAgent {
	t.Helper()
	return startArchivingAgentWith(t, s3, cluster, b, func(*agent.Options) {}, before...)
}

// startArchivingAgentWith is startArchivingAgent with the agent's options changed by option.
func startArchivingAgentWith(t *testing.T, s3 *pgtest.S3Server, cluster string, b agentapi.BackupConfig, option func(*agent.Options),
	before ...func(*testing.T, *postgres.Instance)) *pgtest.RunningAgent {
	t.Helper()
	inst := pgtest.NewInstance(t, cluster)
	for _, prepare := range before {
		prepare(t, inst)
	}
	cfg := agentConfig(t, cluster+"-0", inst, inst.Port)
	cfg.ClusterName, cfg.InitialPrimary = cluster, cluster+"-0"
	pgtest.WriteBackupConfig(t, cfg, b, s3)
	pgtest.ArchiveThroughAgent(inst, cfg, agentBinary)
	r := pgtest.StartAgent(t, cfg, inst, pgtest.NewMemoryLeases(cfg.PodName), func(o *agent.Options) {
		o.Executable = agentBinary
		option(o)
	})
	waitReady(t, r)
	return r
}

func waitForStanza(t *testing.T, r *pgtest.RunningAgent) {
	t.Helper()
	pgtest.Eventually(t, "stanza created", func() error {
		s, err := status(r)
		if err != nil || s.Archive == nil || !s.Archive.StanzaReady || s.Archive.Unavailable != "" {
			return fmt.Errorf("archive %+v (%v)", s.Archive, err)
		}
		return nil
	})
}

func waitForBackup(t *testing.T, r *pgtest.RunningAgent, name string) agentapi.BackupResult {
	t.Helper()
	var result agentapi.BackupResult
	// A wait, not a claim (make bench measures backups): a full backup beside the other suites
	// on a saturated CI machine took over a minute.
	pgtest.EventuallyWithin(t, "backup "+name+" completed", pgtest.BringUpWait, func() error {
		code, body, err := get(r.URL+agentapi.PathBackups+"/"+name, token)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %s (%v)", code, body, err)
		}
		if err := json.Unmarshal([]byte(body), &result); err != nil {
			return err
		}
		if result.Phase == agentapi.BackupFailed {
			t.Fatalf("backup failed: %s", result.Error)
		}
		if result.Phase != agentapi.BackupCompleted {
			return fmt.Errorf("phase %s", result.Phase)
		}
		return nil
	})
	return result
}

func postJSON(url string, body any) (int, string, error) {
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(data)))
	req.Header.Set("Authorization", "Bearer "+token)
	return do(req)
}
