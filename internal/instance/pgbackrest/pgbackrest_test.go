package pgbackrest_test

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/pgbackrest"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

const superuserPassword = "pgbackrest-test"

// Real PostgreSQL, real pgBackRest (Debian's), a real S3 server over TLS: WAL archived
// continuously, a full and an incremental backup, then a restore into a new data directory to
// a time between two batches of rows, which must bring back exactly the rows before it.
func TestArchiveBackupAndRestoreToATime(t *testing.T) {
	ctx := context.Background()
	s3 := pgtest.StartS3(t)
	source, runner, conn := startArchiving(t, s3, "source")
	batches := pgtest.Batches{T: t, Conn: conn}
	batches.Create()
	batches.Insert(1)
	if err := runner.Backup(ctx, pgbackrest.Full); err != nil {
		t.Fatal(err)
	}
	target := batches.InsertAroundTarget(2)
	if err := runner.Backup(ctx, pgbackrest.Incr); err != nil {
		t.Fatal(err)
	}
	// The segment holding batch 3's commit is archived: recovery can pass the target.
	if err := runner.Check(ctx); err != nil {
		t.Fatal(err)
	}

	raw, err := runner.InfoJSON(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("PGPILOT_UPDATE_TESTDATA") != "" { // the unit tests parse what pgBackRest really prints
		if err := os.WriteFile(filepath.Join("testdata", "info.json"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	info, err := pgbackrest.ParseInfo(raw, "db")
	if err != nil {
		t.Fatal(err)
	}
	if info.Status.Code != 0 || len(info.Backups) != 2 || info.Backups[0].Type != pgbackrest.Full ||
		info.Backups[1].Type != pgbackrest.Incr || len(info.Archive) != 1 || info.Archive[0].Max == "" {
		t.Fatalf("pgbackrest info: %+v", info)
	}
	t.Logf("backups: %s (%d bytes, WAL %s–%s), %s; archived WAL %s–%s", info.Backups[0].Label, info.Backups[0].Info.Size,
		info.Backups[0].Archive.Start, info.Backups[0].Archive.Stop, info.Backups[1].Label, info.Archive[0].Min, info.Archive[0].Max)
	_ = conn.Close(ctx)
	if err := source.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	restored := pgtest.NewInstance(t, "restored")
	restoreRunner := configure(t, s3, restored)
	if err := restoreRunner.Restore(ctx, pgbackrest.Target{Type: "time", Value: pgbackrest.TimeTarget(target)}); err != nil {
		t.Fatal(err)
	}
	if err := restored.Start(); err != nil {
		t.Fatal(err)
	}
	conn = pgtest.Connect(t, restored, agentapi.Superuser, superuserPassword, "postgres")
	waitForPromotion(t, conn)
	var rows, distinct int
	if err := conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT batch) FROM batches WHERE batch <= 2").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	var later int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM batches WHERE batch = 3").Scan(&later); err != nil {
		t.Fatal(err)
	}
	if rows != 200 || distinct != 2 || later != 0 {
		t.Fatalf("restored to %s: %d rows of batches 1–2 (want 200), %d of batch 3 (want 0)", target, rows, later)
	}
}

// waitForPromotion waits until the restored server behind conn reached its target and promoted.
func waitForPromotion(t testing.TB, conn *pgx.Conn) {
	t.Helper()
	pgtest.Eventually(t, "the restored server promotes at the target", func() error {
		var inRecovery bool
		if err := conn.QueryRow(context.Background(), "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || inRecovery {
			return fmt.Errorf("in recovery: %v (%v)", inRecovery, err)
		}
		return nil
	})
}

// startArchiving starts a new server that archives its WAL to s3 through pgBackRest, with the
// stanza created, and connects to it as the superuser.
func startArchiving(t testing.TB, s3 *pgtest.S3Server, name string) (*postgres.Instance, pgbackrest.Runner, *pgx.Conn) {
	t.Helper()
	if _, err := osexec.LookPath("pgbackrest"); err != nil {
		t.Fatalf("pgBackRest not found (hack/host-packages.sh installs it): %v", err)
	}
	inst := pgtest.NewInstance(t, name)
	runner := configure(t, s3, inst)
	if err := inst.InitDB(context.Background(), superuserPassword); err != nil {
		t.Fatal(err)
	}
	inst.Settings["archive_mode"] = "on"
	inst.Settings["archive_command"] = runner.ArchiveCommand()
	if err := inst.Start(); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, inst, agentapi.Superuser, superuserPassword, "postgres")
	if err := runner.StanzaCreate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return inst, runner, conn
}

// configure writes pgBackRest's configuration for inst, next to its data directory, and lets
// the test's OS user for pgBackRest (PostgreSQL's) log in over the socket.
func configure(t testing.TB, s3 *pgtest.S3Server, inst *postgres.Instance) pgbackrest.Runner {
	t.Helper()
	dir := filepath.Dir(inst.DataDir)
	state := filepath.Join(dir, "pgbackrest")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if cred := pgtest.RunAs(t); cred != nil {
		if err := os.Chown(state, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
		inst.IdentMap += fmt.Sprintf("%s postgres %s\n", agentapi.LocalSuperuserMap, agentapi.Superuser)
	}
	config := filepath.Join(dir, "pgbackrest.conf")
	content, err := pgbackrest.Render(pgbackrest.Options{
		Stanza: "db",
		Repository: pgbackrest.Repository{Endpoint: s3.Endpoint, Port: s3.Port, Bucket: s3.Bucket, Path: "/pgtest",
			Region: s3.Region, URIStyle: "path", CAFile: s3.CAFile},
		DataDir: inst.DataDir, SocketDir: inst.SocketDir, Port: inst.Port, StateDir: state, ProcessMax: 2,
		ArchiveTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	runner := pgbackrest.Runner{ConfigPath: config, Stanza: "db", RunAs: pgtest.RunAs(t), Output: testLog{t},
		Keys: pgbackrest.Keys{AccessKeyID: s3.AccessKeyID, SecretAccessKey: s3.SecretAccessKey}}
	inst.Env = runner.Environment()
	return runner
}

type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("[pgbackrest] %s", p)
	return len(p), nil
}

// The repository down: archiving fails (PostgreSQL counts the failures and keeps running,
// keeping the WAL), and once the S3 server is back every segment is archived with no gap.
func TestArchivingSurvivesARepositoryOutage(t *testing.T) {
	ctx := context.Background()
	s3 := pgtest.StartS3(t)
	_, runner, conn := startArchiving(t, s3, "outage")
	if err := runner.Check(ctx); err != nil {
		t.Fatal(err)
	}
	batches := pgtest.Batches{T: t, Conn: conn}
	batches.Create()

	s3.Stop()
	var outageSegment string
	for batch := 1; batch <= 3; batch++ {
		batches.Insert(batch)
		outageSegment = switchWAL(t, conn)
	}
	pgtest.Eventually(t, "archiving fails while the repository is down", func() error {
		var failed int
		if err := conn.QueryRow(ctx, "SELECT failed_count FROM pg_stat_archiver").Scan(&failed); err != nil || failed == 0 {
			return fmt.Errorf("failed_count %d (%v)", failed, err)
		}
		return nil
	})
	batches.Insert(4) // the primary still takes writes

	s3.Start(t)
	// Every segment of the outage is archived once the repository is back.
	waitForArchived(t, conn, outageSegment, time.Minute)
	info, err := runner.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Archive) != 1 || info.Archive[0].Max < outageSegment {
		t.Fatalf("archive after the outage: %+v, want up to %s", info.Archive, outageSegment)
	}
	// No gap: the repository holds every segment from the first to the last, which is what a
	// restore across the outage needs; pgBackRest's check verifies the newest arrives too.
	if err := runner.Check(ctx); err != nil {
		t.Fatal(err)
	}
	segments := archivedSegments(t, s3, info.Archive[0].ID)
	for i := 1; i < len(segments); i++ {
		if segmentNumber(t, segments[i]) != segmentNumber(t, segments[i-1])+1 {
			t.Fatalf("gap in the archive between %s and %s", segments[i-1], segments[i])
		}
	}
}

// archivedSegments lists the WAL segment files the S3 server stores for archive id, in order.
func archivedSegments(t *testing.T, s3 *pgtest.S3Server, id string) []string {
	t.Helper()
	var segments []string
	for _, key := range s3.ObjectKeys(t, "pgtest/archive/db/"+id+"/") {
		name := filepath.Base(key)
		if len(name) > 24 && !strings.Contains(name, ".backup") && !strings.HasSuffix(name, ".history") {
			segments = append(segments, name[:24])
		}
	}
	sort.Strings(segments)
	if len(segments) == 0 {
		t.Fatal("no archived segment in the bucket")
	}
	return segments
}

// segmentNumber is a 16 MiB segment's position in the WAL (timeline aside).
func segmentNumber(t *testing.T, name string) uint64 {
	t.Helper()
	log, err1 := strconv.ParseUint(name[8:16], 16, 64)
	seg, err2 := strconv.ParseUint(name[16:24], 16, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("segment name %q", name)
	}
	return log<<8 | seg
}

// switchWAL closes the current WAL segment, so that it is archived now, and returns its name.
func switchWAL(t testing.TB, conn *pgx.Conn) string {
	t.Helper()
	var segment string
	if err := conn.QueryRow(context.Background(), "SELECT pg_walfile_name(pg_switch_wal())").Scan(&segment); err != nil {
		t.Fatal(err)
	}
	return segment
}

// waitForArchived polls pg_stat_archiver until segment (or a later one) was archived.
func waitForArchived(t testing.TB, conn *pgx.Conn, segment string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var last string
		if err := conn.QueryRow(context.Background(), "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver").Scan(&last); err != nil {
			t.Fatal(err)
		}
		if last >= segment {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("segment %s not archived after %s (last archived %q)", segment, timeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
